#!/usr/bin/env bash
# One answer however the tokens are batched (issue 30): for every model make_models.sh wrote
# (MODELS_DIR and MODELS_DIR/quant: every weight type and architecture), a sequence's logits
# decoded one token a batch against the same tokens as one prompt, in chunks of 7 with
# n_ubatch 5, interleaved with three other sequences in one batch, and a token of four
# sequences a step (test_model batching).
#   test_model_batching.sh TEST_MODEL_BIN MODELS_DIR
# Tolerance 1e-3 of the logits' rms, the issue's bound. Measured on an AVX-512 machine, every
# kernel path: 0 (the same bits) for every file with block weights, whose products sum each
# input alone in integers (rops_exec.one_order), but the Mamba-2 ones' whole prompts, which
# take the chunked scan (1.3e-6 at most); 7.8e-6 at most for the f32, f16 and bf16 files,
# whose prompts take the many-input float kernels.
set -euo pipefail
test_bin=$1
models=$2
here=$(cd "$(dirname "$0")" && pwd)
"$test_bin" isa || exit $?
# shellcheck source=../lib/check.sh
. "$here/../lib/check.sh"

for model in "$models"/*.gguf "$models"/quant/*.gguf; do
    check "$(basename "$model") batched as one token a batch" "$test_bin" batching "$model" 1e-3
    # a hybrid's attention rows in f16 (llama.cpp's default; recur's is f32): the rounding turns
    # the float files' last-bit differences into steps now and then (worst measured 1.2e-3,
    # f32-falcon-wide's whole prompt; the block-weight files sum each input alone, 1.3e-6)
    case "$(basename "$model")" in
    *granite* | *nemotron* | *falcon*)
        check "$(basename "$model") with f16 attention rows batched as one token a batch" \
            env RECUR_TEST_ATTN_TYPE=f16 "$test_bin" batching "$model" 5e-3
        ;;
    esac
done
finish test_model_batching
