#!/usr/bin/env bash
# The speed figures of issue 6: a mamba-130m-shaped model (embd 768, 24 layers, d_inner 1536,
# d_state 16, dt_rank 48, vocab 50257, untied) made by `recur mkmodel`, in f16, q8_0 and q4_0
# (and f32 with --f32), through `recur bench` on 2 threads; JSON files and tables in OUT_DIR. With
# --families, the other three architectures too (issue 21), in f16: the 130m-shaped Mamba-2
# (d_state 128, 24 heads of 64) and the 0.1B-shaped RWKV-6 and RWKV-7 (12 layers, heads of 64).
# recur bench's table names the ISA in use (RECUR_ISA picks one); OUT_DIR/machine.txt the CPU.
# --models-only makes the models and stops (bench/side_by_side.py uses them); RECUR names the
# recur program (default build/tools/recur).
#   bench/speed.sh [OUT_DIR] [--f32] [--families] [--models-only]
#   (run ./run.sh once first, for build/tools/recur)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/speed}
recur=${RECUR:-build/tools/recur}
# every model below takes GPT-2's vocabulary (mkmodel has no default: it carries no path)
export RECUR_VOCAB_FILE=${RECUR_VOCAB_FILE:-tests/data/ggml-vocab-gpt-2.gguf}
mkdir -p "$out"
model="$out/mamba-130m-shape-f16.gguf"
[ -f "$model" ] || "$recur" mkmodel "$model" --arch mamba --embd 768 --layers 24 --vocab 50257 \
    --state 16 --inner 1536 --dt-rank 48 --seed 1 --type f16
q8="$out/mamba-130m-shape-q8_0.gguf"
[ -f "$q8" ] || "$recur" quantize "$model" "$q8" q8_0
q4="$out/mamba-130m-shape-q4_0.gguf"
[ -f "$q4" ] || "$recur" quantize "$model" "$q4" q4_0
models=("$model" "$q8" "$q4")
want_f32=false families=false models_only=false
for a in "${@:2}"; do
    case "$a" in
    --f32) want_f32=true ;;
    --families) families=true ;;
    --models-only) models_only=true ;;
    *) echo "speed.sh: unknown flag $a" >&2; exit 2 ;;
    esac
done
if $want_f32; then
    f32="$out/mamba-130m-shape-f32.gguf"
    [ -f "$f32" ] || "$recur" mkmodel "$f32" --arch mamba --embd 768 --layers 24 --vocab 50257 \
            --state 16 --inner 1536 --dt-rank 48 --seed 1 --type f32
    models+=("$f32")
fi
if $families; then
    m2="$out/mamba2-130m-shape-f16.gguf"
    [ -f "$m2" ] || "$recur" mkmodel "$m2" --arch mamba2 --embd 768 --layers 24 --vocab 50257 \
            --state 128 --heads 24 --groups 1 --seed 1 --type f16
    models+=("$m2")
    for arch in rwkv6 rwkv7; do
        r="$out/$arch-0.1b-shape-f16.gguf"
        [ -f "$r" ] || "$recur" mkmodel "$r" --arch "$arch" --embd 768 --layers 12 --vocab 50257 \
                --head-size 64 --seed 1 --type f16
        models+=("$r")
    done
fi
$models_only && exit 0
# the CPU beside the figures (bench/RESULTS.md records it with each): the machines change
{
    grep -m1 'model name' /proc/cpuinfo || true
    grep -m1 'cpu family' /proc/cpuinfo || true
    grep -m1 '^model[[:space:]]' /proc/cpuinfo || true
    echo "threads: $(nproc)"
    grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|fma|f16c|amx)' | sort | tr '\n' ' '
    echo
} >"$out/machine.txt"
cat "$out/machine.txt" >&2
for m in "${models[@]}"; do
    name=$(basename "$m" .gguf)
    "$recur" bench -m "$m" -p 512 -n 128 -np 1,4,16,64 -t 2 -r 3 --json >"$out/$name.json" \
        2> >(tee "$out/$name.md" >&2)
done
