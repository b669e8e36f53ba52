#!/usr/bin/env bash
# Logits of recur against the independent float64 reference (tests/ref/mamba_ref.py), for every
# model that make_models.sh wrote.
#   test_model_ref.sh TEST_MODEL_BIN MODELS_DIR
# Tolerance (max |a-b| / rms(b) per token): 1e-4 for f32, q8_0 and q4_0 weights, 1e-2 for f16
# and bf16.
set -euo pipefail
test_bin=$1
models=$2
here=$(cd "$(dirname "$0")" && pwd)
# a kernel path (RECUR_ISA) this CPU lacks: test_model says SKIP and exits 77, and so do we
"$test_bin" isa || exit $?
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# three sequences: one token, a short run, and 23 tokens spread over the first 256 ids
seqs=("7" "1,2,3,250,4,5,0,255" "17,200,33,91,128,6,44,250,3,77,160,12,9,199,81,64,31,222,140,5,18,96,240")
passed=0
failed=0
for model in "$models"/*.gguf; do
    case "$(basename "$model")" in
    f32-* | q8_0-* | q4_0-*) tol=1e-4 ;; # quantized: exact weights (d * q), inputs through q8_0 as in ggml (the reference does both)
    *) tol=1e-2 ;;
    esac
    args=()
    for s in "${seqs[@]}"; do args+=(--tokens "$s"); done
    use=("${seqs[@]}")
    case "$(basename "$model")" in
    q8_0-* | q4_0-*)
        # Quantizing a product's inputs rounds each to a step; an input whose float32 value
        # sits within about one float32 ulp of a half step (a tie) may round either way in an
        # engine whose float32 sums differ from the reference's in the last bit, and from that
        # token on the logits differ by a whole step's effect (RWKV's group norm can make that
        # 5%). Each sequence is compared up to its first such token, and the cut is reported.
        mapfile -t keep < <(python3 "$here/../ref/mamba_ref.py" "$model" "${args[@]}" --comparable 1e-7)
        use=()
        for i in "${!seqs[@]}"; do
            IFS=, read -ra ids <<<"${seqs[$i]}"
            if [ "${keep[$i]}" -lt "${#ids[@]}" ]; then
                echo "test_model_ref: $(basename "$model") sequence $i compared on its first" \
                    "${keep[$i]} of ${#ids[@]} tokens (a q8_0 input at a rounding tie)"
            fi
            [ "${keep[$i]}" -gt 0 ] || continue
            use+=("$(IFS=,; echo "${ids[*]:0:${keep[$i]}}")")
        done
        [ "${#use[@]}" -gt 0 ] || {
            echo "test_model_ref: $(basename "$model"): no token left to compare" >&2
            failed=$((failed + 1))
            continue
        }
        args=()
        for s in "${use[@]}"; do args+=(--tokens "$s"); done
        ;;
    esac
    python3 "$here/../ref/mamba_ref.py" "$model" "${args[@]}" --out "$work/ref.bin"
    if "$test_bin" ref "$model" "$work/ref.bin" "$tol" "${use[@]}"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
    fi
done
echo "test_model_ref: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
