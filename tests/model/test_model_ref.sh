#!/usr/bin/env bash
# Logits of recur against the independent float64 reference (tests/ref/mamba_ref.py), for every
# model that make_models.sh wrote.
#   test_model_ref.sh TEST_MODEL_BIN MODELS_DIR
# Tolerance (max |a-b| / rms(b) per token), a few times the worst error measured over every
# model here, on every kernel path (RECUR_ISA scalar, avx2, avxvnni, avx512, four threads; and
# scalar on one thread: ctest -R test_model_ref, AVX-512 machine): 1e-5 for f32, q8_0 and q4_0
# weights (worst 3.3e-6, f32-rwkv7), 3e-5 for f16 and bf16 (worst 9.8e-6, f16-rwkv6-rescale;
# the others 2.6e-6 at most). The reference computes in float64 from the same stored weights,
# so what remains is float32 rounding. Hybrid models (granite, nemotron, falcon) keep their
# attention rows in f32 for that comparison, and are checked again with the default f16 rows.
# The *-qk hybrids (Q/K RMS norms before RoPE) hold the f32 tolerance: worst 2.5e-6
# (f32-falcon-qk, avx2), where leaving the norms out is off by 0.5..2.8 and norming after RoPE
# by 0.22 (f32-falcon-qk); with f16 rows 7.3e-4 at worst.
set -euo pipefail
test_bin=$1
models=$2
here=$(cd "$(dirname "$0")" && pwd)
# a kernel path (RECUR_ISA) this CPU lacks: test_model says SKIP and exits 77, and so do we
"$test_bin" isa || exit $?
# shellcheck source=../lib/check.sh
. "$here/../lib/check.sh"

# The reference's answers depend only on the model and the arguments, and every kernel path's run
# (test_model_ref_ISA, side by side under ctest -j) asks the same questions: the first run to ask
# computes an answer under a lock and the others read it, from MODELS_DIR/.ref, keyed by the
# model's checksum and the arguments. A file there is complete: it is written aside and renamed.
cache="$models/.ref"
mkdir -p "$cache"
# ref_file MODEL ARGS...: prints the path of mamba_ref.py's standard output for MODEL ARGS...;
# fails, caching nothing, when the reference fails (each step's status is read here: set -e does
# not reach into a command substitution)
ref_file() {
    local key
    key=$({ md5sum <"$1"; printf '%s\n' "$@"; } | md5sum | cut -d' ' -f1)
    (
        flock 9 || exit 1
        [ -e "$cache/$key" ] && exit 0
        python3 "$here/../ref/mamba_ref.py" "$@" >"$cache/$key.tmp" &&
            mv "$cache/$key.tmp" "$cache/$key"
    ) 9>"$cache/$key.lock" || return 1
    echo "$cache/$key"
}

# three sequences: one token, a short run, and 23 tokens spread over the first 256 ids
seqs=("7" "1,2,3,250,4,5,0,255" "17,200,33,91,128,6,44,250,3,77,160,12,9,199,81,64,31,222,140,5,18,96,240")
for model in "$models"/*.gguf; do
    case "$(basename "$model")" in
    # Falcon-H1 without the grouped norm: its Mamba-2 outputs go unnormalised into a residual
    # stream without scales, 8.2e-6 at worst (avx512, 6.2e-6 on the portable path)
    f32-falcon-wide*) tol=3e-5 ;;
    f32-* | q8_0-* | q4_0-* | Q*) tol=1e-5 ;; # quantized: exact weights (d * q), inputs through q8_0 / q8_1 / q8_K as in ggml (the reference does both)
    *) tol=3e-5 ;;
    esac
    args=()
    for s in "${seqs[@]}"; do args+=(--tokens "$s"); done
    use=("${seqs[@]}")
    case "$(basename "$model")" in
    q8_0-* | q4_0-* | Q*)
        # Quantizing a product's inputs rounds each to a step; an input whose float32 value
        # sits within about one float32 ulp of a half step (a tie) may round either way in an
        # engine whose float32 sums differ from the reference's in the last bit, and from that
        # token on the logits differ by a whole step's effect (RWKV's group norm can make that
        # 5%). Each sequence is compared up to its first such token, and the cut is reported.
        # The margin: how far the engine's float32 values may stray from the reference's:
        # 1e-7 for the q8_0 / q4_0 files; 1e-6 for the mixes (Q*), whose 256-wide q8_K blocks
        # and batched products strayed that far (a q8_K input 3e-7..1e-6 from a tie rounded
        # the other way in Q6_K-rwkv6-wide and Q4_K_M-mamba2-wide); 3e-6 for the RWKV-7 mixes,
        # whose portable path strays 2.2e-6 already on bf16-rwkv7-wide's logits (an input
        # 1e-6..1e-5 from a tie flipped there in Q6_K-rwkv7-wide).
        margin=1e-7
        case "$(basename "$model")" in
        Q*rwkv7*) margin=3e-6 ;;
        Q*) margin=1e-6 ;;
        esac
        keep_file=$(ref_file "$model" "${args[@]}" --comparable "$margin") || exit 1
        mapfile -t keep <"$keep_file"
        use=()
        for i in "${!seqs[@]}"; do
            IFS=, read -ra ids <<<"${seqs[$i]}"
            if [ "${keep[$i]}" -lt "${#ids[@]}" ]; then
                echo "test_model_ref: $(basename "$model") sequence $i compared on its first" \
                    "${keep[$i]} of ${#ids[@]} tokens (a quantized input or scale at a rounding tie)"
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
    # the logits as little-endian float64 (--out /dev/stdout)
    ref=$(ref_file "$model" "${args[@]}" --out /dev/stdout) || exit 1
    # a hybrid model's attention rows in f32 (recur's default), as the reference keeps them
    check "$(basename "$model") within $tol of the reference" \
        env RECUR_TEST_ATTN_TYPE=f32 "$test_bin" ref "$model" "$ref" "$tol" "${use[@]}"
    # and in f16 (llama.cpp's default): rounding K and V to f16 costs a few 1e-3 (worst measured 4.0e-3
    # on f32-falcon-wide, 2.0e-3 on f16-nemotron). Float weights only: with block weights the
    # rounded rows move the quantized inputs of later products off the reference's (4-15%)
    case "$(basename "$model")" in
    f*granite* | f*nemotron* | f*falcon* | bf16*granite* | bf16*nemotron* | bf16*falcon*)
        check "$(basename "$model") with an f16 attention cache within 1e-2 of the reference" \
            env RECUR_TEST_ATTN_TYPE=f16 "$test_bin" ref "$model" "$ref" 1e-2 "${use[@]}"
        ;;
    esac
done
finish test_model_ref
