#!/usr/bin/env bash
# Tests of the trained model that ships in models/ (tools/dev/train/train_mamba.py made it).
#   test_shipped_model.sh RECUR_BIN TEST_MODEL_BIN REPO_ROOT
# - it loads, and `recur run` without -m uses it; its tokenizer.ggml.pre is gpt-2 and its
#   tensors are those trained (hash);
# - recur's held-out loss on the first windows of models/heldout.txt equals the training
#   script's figure for the same windows (recorded in the model's .json) within 1%;
# - greedy output for a fixed prompt equals the golden ids in tests/data/fortunes-greedy.txt,
#   which the float64 reference (tests/ref/mamba_ref.py --greedy) computed;
# - quantized to Q6_K and Q4_K_M, its perplexity stays within 1% and 5% of the f16 file's.
set -uo pipefail
recur=$1
test_model=$2
root=$3
model="$root/models/recur-mamba-fortunes.gguf"
stats="$root/models/recur-mamba-fortunes.json"
golden="$root/tests/data/fortunes-greedy.txt"
# shellcheck source=../lib/check.sh
. "$(dirname "$0")/../lib/check.sh"

check "the model is in the tree" [ -s "$model" ]
check "its size is under 40 MB" [ "$(stat -c %s "$model")" -lt 40000000 ]

# its metadata names the pre-tokenizer it was trained with (the GPT-2 pattern), so that
# llama.cpp tokenizes it as recur does; the weights are those trained: the SHA-256 of every
# tensor's name and bytes is the one of the file as first committed, without the key
meta="$(dirname "$0")/../lib/gguf_meta.py"
check "tokenizer.ggml.pre is gpt-2" [ "$(python3 "$meta" "$model" tokenizer.ggml.pre)" = "gpt-2" ]
check "tokenizer.ggml.model is gpt2" [ "$(python3 "$meta" "$model" tokenizer.ggml.model)" = "gpt2" ]
check "the tensors are the trained ones" [ "$(python3 "$meta" "$model" --tensor-hash)" = \
    "acf8ec6be13182e04ae16819ea62ef175c96a19710f97cbafdaae45cfe917af6" ]

# recur run without -m loads the shipped model (RECUR_MODEL unset) and writes text
(unset RECUR_MODEL; "$recur" run -p "The" -n 4 --temp 0 >"$work/run.txt" 2>"$work/run.err")
rc=$?
check "run without -m exits 0 ($(head -c 200 "$work/run.err"))" [ "$rc" -eq 0 ]
"$recur" run -m "$model" -p "The" -n 4 --temp 0 >"$work/run_m.txt" 2>/dev/null
check "run without -m equals run -m the shipped model" cmp -s "$work/run.txt" "$work/run_m.txt"

# held-out loss: recur perplexity --score-all (the training script's method) against the
# training script, first K windows of 256
K=4
"$recur" perplexity -m "$model" -f "$root/models/heldout.txt" -c 256 -np $K --chunks $K \
    --score-all >"$work/ppl.out" 2>"$work/ppl.err"
rc=$?
check "perplexity exits 0 ($(tail -c 300 "$work/ppl.err"))" [ "$rc" -eq 0 ]
got=$(sed -n "s/^mean loss = \([0-9.]*\) nats.* in $K windows of 256 (every token after the first: --score-all)\$/\1/p" "$work/ppl.out")
want=$(python3 -c 'import json, sys
w = json.load(open(sys.argv[1]))["heldout_window_losses"][:int(sys.argv[2])]
print("%.6f" % (sum(w) / len(w)))' "$stats" $K)
echo "held-out loss of the first $K windows: recur ${got:-none}, training script $want"
check "held-out loss within 1% of the training script's" \
    awk -v a="${got:--1}" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && b > 0 && d <= 0.01 * b) }'

# the model quantized by recur quantize: perplexity (llama-perplexity's method, 16 windows of
# 256) within 1% of the shipped f16 file's for Q6_K and 5% for Q4_K_M (measured: +0.14% and
# +0.23%; the file's 50k x 512 embedding, q6_K in both, is 90% of its bytes)
ppl() {
    "$recur" perplexity -m "$1" -f "$root/models/heldout.txt" -c 256 --chunks 16 2>&1 |
        sed -n 's/^Final estimate: PPL = \([0-9.]*\) .*/\1/p'
}
base_ppl=$(ppl "$model")
for q in Q6_K:0.01 Q4_K_M:0.05; do
    t=${q%%:*}
    "$recur" quantize "$model" "$work/$t.gguf" "$t" 2>/dev/null
    got_ppl=$(ppl "$work/$t.gguf")
    echo "perplexity: f16 ${base_ppl:-none}, $t ${got_ppl:-none}"
    check "$t perplexity within ${q#*:} of the f16 file's" \
        awk -v a="${got_ppl:--1}" -v b="${base_ppl:--1}" -v r="${q#*:}" \
        'BEGIN { exit !(b > 0 && a > 0 && (a - b) / b <= r && (b - a) / b <= r) }'
done

# golden greedy continuation
prompt=$(sed -n 's/^prompt: //p' "$golden")
prompt_ids=$(sed -n 's/^prompt_ids: //p' "$golden")
greedy_ids=$(sed -n 's/^greedy_ids: //p' "$golden")
n=$(awk -F, '{ print NF }' <<<"$greedy_ids")
got_prompt=$("$recur" tokenize -m "$model" -p "$prompt" 2>/dev/null | tr ' ' ',')
check "the golden prompt tokenizes as recorded" [ "$got_prompt" = "$prompt_ids" ]
got_ids=$("$test_model" greedy-ids "$model" "$prompt" "$n")
check "greedy ids equal the golden ids ($n tokens)" [ "$got_ids" = "$greedy_ids" ]
# and `recur run --temp 0` prints the same text as the API's argmax loop
"$recur" run -m "$model" -p "$prompt" -n "$n" --temp 0 >"$work/g_run.txt" 2>/dev/null
"$test_model" greedy "$model" "$prompt" "$n" >"$work/g_api.txt"
check "recur run --temp 0 equals the argmax loop" cmp -s "$work/g_run.txt" "$work/g_api.txt"

finish test_shipped_model
