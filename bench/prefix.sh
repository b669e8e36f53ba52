#!/usr/bin/env bash
# Issue 7's figures, on the 130m-shaped f16 model of bench/speed.sh (made there) and 2 threads:
#  - time to first token of a ~2,000-token prompt whose last ~16 tokens change, decoded cold
#    and with the prompt cache holding the earlier prompt (restore + decode of the rest);
#  - lookup decoding on a repetitive text (the shipped model), against plain decoding, with
#    identical output.
#   bench/prefix.sh [OUT_DIR] [MODEL]     (run ./run.sh and bench/speed.sh first)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/prefix}
model=${2:-build/speed/mamba-130m-shape-f16.gguf}
recur=build/tools/recur
reps=5
mkdir -p "$out"

head -c 7600 models/heldout.txt >"$out/a.txt"
{
    head -c 7544 models/heldout.txt
    printf ' and so the story ends differently than anyone had expected.'
} >"$out/b.txt"
"$recur" tokenize -m "$model" -f "$out/a.txt" >"$out/a.ids" 2>/dev/null
"$recur" tokenize -m "$model" -f "$out/b.txt" >"$out/b.ids" 2>/dev/null
n_b=$(wc -w <"$out/b.ids")
common=$(paste -d'\n' <(tr ' ' '\n' <"$out/a.ids") <(tr ' ' '\n' <"$out/b.ids") |
    awk 'NR % 2 == 1 { a = $0; next } { if (a != $0) { print n + 0; exit } n++ }')
echo "prompt B: $n_b tokens, the first $common equal to prompt A's"

build/bench/bench_prefix "$model" "$out/a.txt" "$out/b.txt" 2 "$reps" | tee "$out/ttft.txt"

# lookup decoding, on the shipped (trained) model: a fortune four times over, then the model's
# own continuation, which repeats itself (a random-weight model never repeats a draft)
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
shipped=models/recur-mamba-fortunes.gguf
head -c 600 models/heldout.txt | tail -c 300 >"$out/f.txt"
for i in 1 2 3 4; do cat "$out/f.txt"; done >"$out/rep.txt"
for mode in plain 2 8; do
    for r in $(seq 5); do
        flags=()
        [ "$mode" != plain ] && flags=(--lookup "$mode")
        "$recur" run -m "$shipped" -f "$out/rep.txt" -n 400 --temp 0 -t 2 "${flags[@]}" \
            >"$out/$mode.out" 2>"$out/$mode.err"
        # "...; generated N tokens in S s (R tokens/s)": R, the last number of the line
        grep "generated" "$out/$mode.err" | awk -F'[()]' '{ print $(NF - 1) + 0 }'
    done | median >"$out/$mode.tps"
done
for mode in 2 8; do
    cmp -s "$out/plain.out" "$out/$mode.out" && same=identical || same=DIFFERENT
    grep "lookup:" "$out/$mode.err"
    echo "lookup decoding --lookup $mode: $(cat "$out/plain.tps") -> $(cat "$out/$mode.tps") tokens/s," \
        "$(awk -v a="$(cat "$out/plain.tps")" -v b="$(cat "$out/$mode.tps")" 'BEGIN { printf "%.2fx", b / a }'), output $same"
done
