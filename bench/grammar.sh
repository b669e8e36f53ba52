#!/usr/bin/env bash
# Issue 19's figures: what a grammar adds to each generated token (bench_grammar), for
# tests/data/grammars/json.gbnf and the 10-property schema tests/data/grammars/schema-10.json,
# on three vocabularies:
#  - the shipped model (4-layer Mamba, 50,432 tokens: the smallest model, the worst case);
#  - a 130m-shaped f16 Mamba with GPT-2's 50,257 tokens (random weights);
#  - a 0.1B-shaped f16 RWKV-7 with a world-style vocabulary of 65,041 tokens (random weights;
#    RWKV's own 65,536-token world file is not available offline, so `recur mkmodel` builds
#    one from the Falcon vocabulary: <s>, the 256 bytes, then Falcon's longer tokens).
# One thread, one sequence.
#   bench/grammar.sh [OUT_DIR] [TOKENS]      (run ./run.sh first: it builds build/)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/grammar}
tokens=${2:-256}
recur=build/tools/recur
mkdir -p "$out"
[ -f "$out/mamba-130m-shape-gpt2.gguf" ] ||
    "$recur" mkmodel "$out/mamba-130m-shape-gpt2.gguf" --arch mamba --embd 768 --layers 24 \
        --vocab 50257 --state 16 --seed 1 --type f16 \
        --vocab-file tests/data/ggml-vocab-gpt-2.gguf
[ -f "$out/rwkv7-0.1b-shape-world.gguf" ] ||
    "$recur" mkmodel "$out/rwkv7-0.1b-shape-world.gguf" --arch rwkv7 --embd 768 --layers 12 \
        --vocab 65041 --seed 1 --type f16 --vocab-file ../shared/testdata/vocab/ggml-vocab-falcon.gguf
grep -m1 'model name' /proc/cpuinfo
for m in models/recur-mamba-fortunes.gguf "$out/mamba-130m-shape-gpt2.gguf" \
    "$out/rwkv7-0.1b-shape-world.gguf"; do
    for g in "--grammar tests/data/grammars/json.gbnf" "--schema tests/data/grammars/schema-10.json"; do
        echo "== $m $g"
        # shellcheck disable=SC2086
        build/bench/bench_grammar "$m" $g "$tokens" 8 1
    done
done | tee "$out/results.txt"
