#!/usr/bin/env bash
# Real tokenizers through the command line: `recur mkmodel --vocab-file` on llama.cpp's Falcon
# (byte-level BPE, tokenizer.ggml.pre = "falcon") and LLaMA (SentencePiece) vocabularies, then
# `recur tokenize` and `recur run` on the random models written:
#  - the files carry tokenizer.ggml.pre (the vocabulary file's, "default" without one, --pre);
#  - a prompt tokenizes to the ids of llama.cpp's test vectors (tests/data/*.out);
#  - `recur run --temp 0` prints what a plain argmax loop over the C API prints, and for
#    SentencePiece the generated ids detokenize to what an independent reader of the token
#    texts (tests/lib/gguf_meta.py: "▁" is a space, <0xXX> a byte) makes of them.
#   test_vocab_cli.sh RECUR_BIN TEST_MODEL_BIN REPO_ROOT
set -uo pipefail
recur=$1
test_model=$2
root=$3
data="$root/tests/data"
meta="$root/tests/lib/gguf_meta.py"
# shellcheck source=../lib/check.sh
. "$(dirname "$0")/../lib/check.sh"

mk() { # mk NAME VOCAB_FILE N_VOCAB ARCH [FLAGS...]
    local name=$1 vf=$2 nv=$3 arch=$4
    shift 4
    "$recur" mkmodel "$work/$name.gguf" --arch "$arch" --embd 64 --layers 2 --vocab "$nv" \
        --state 8 --seed 7 --vocab-file "$vf" "$@" >/dev/null 2>"$work/$name.err"
    local rc=$?
    check "mkmodel $name ($(head -c 300 "$work/$name.err"))" [ "$rc" -eq 0 ]
}
mk falcon "$data/ggml-vocab-falcon.gguf" 65024 mamba
mk spm "$data/ggml-vocab-llama-spm.gguf" 32000 mamba
mk spm_cut "$data/ggml-vocab-llama-spm.gguf" 1000 mamba2
mk neox "$data/ggml-vocab-gpt-neox.gguf" 50277 mamba
mk neox_gpt2 "$data/ggml-vocab-gpt-neox.gguf" 50277 mamba --pre gpt-2

pre() { python3 "$meta" "$work/$1.gguf" tokenizer.ggml.pre; }
check "falcon model: pre is the file's (falcon)" [ "$(pre falcon)" = falcon ]
check "spm model: pre is the file's (default)" [ "$(pre spm)" = default ]
check "neox model: pre written as default (the file has none)" [ "$(pre neox)" = default ]
check "neox model with --pre gpt-2" [ "$(pre neox_gpt2)" = gpt-2 ]
check "cut spm model keeps the scores" [ "$(python3 "$meta" "$work/spm_cut.gguf" tokenizer.ggml.scores)" = "<array>" ]
check "cut spm model keeps add_bos_token" [ "$(python3 "$meta" "$work/spm_cut.gguf" tokenizer.ggml.add_bos_token)" = True ]

"$recur" mkmodel "$work/bad.gguf" --arch mamba --embd 64 --layers 2 --vocab 300 --state 8 \
    --seed 1 --pre qwen2 --vocab-file "$data/ggml-vocab-gpt-2.gguf" >/dev/null 2>"$work/bad.err"
check "an unknown --pre fails (exit 1)" [ $? -eq 1 ]
check "... naming the pre-tokenizer" grep -q 'tokenizer.ggml.pre is "qwen2", a pre-tokenizer recur does not implement' "$work/bad.err"
check "... and leaves no file" [ ! -e "$work/bad.gguf" ]
"$recur" mkmodel "$work/bad2.gguf" --arch mamba --embd 64 --layers 2 --vocab 300 --state 8 \
    --seed 1 --pre gpt-2 --vocab-file "$data/ggml-vocab-llama-spm.gguf" >/dev/null 2>"$work/bad2.err"
check "--pre on a SentencePiece vocabulary is a usage error" [ $? -eq 2 ]

# llama.cpp's ids for "Hello world" (the line of that text in the .out files)
case_ids() { # case_ids VOCAB TEXT -> the ids llama.cpp's vectors give for TEXT
    python3 - "$1" "$2" <<'PY'
import sys
base, text = sys.argv[1], sys.argv[2]
texts = open(base + ".inp", encoding="utf-8").read().split("\n__ggml_vocab_test__\n")[:-1]
lines = open(base + ".out", encoding="utf-8").read().split("\n")
print(lines[texts.index(text)].strip())
PY
}
for t in "Hello world" " Hello World!" "3333333" "Hello, y'all! How are you 😁 ?我想在apple工作1314151天～"; do
    want=$(case_ids "$data/ggml-vocab-falcon.gguf" "$t")
    got=$("$recur" tokenize -m "$work/falcon.gguf" -p "$t" 2>/dev/null)
    check "falcon model tokenizes \"$t\" as llama.cpp ($got / $want)" [ "$got" = "$want" ]
    want=$(case_ids "$data/ggml-vocab-llama-spm.gguf" "$t")
    got=$("$recur" tokenize -m "$work/spm.gguf" -p "$t" --no-bos 2>/dev/null)
    check "spm model tokenizes \"$t\" as llama.cpp ($got / $want)" [ "$got" = "$want" ]
    got=$("$recur" tokenize -m "$work/spm.gguf" -p "$t" 2>/dev/null)
    check "spm model adds BOS (add_bos_token)" [ "$got" = "1 $want" ]
done

prompt="The capital of France is"
for m in falcon spm spm_cut; do
    "$recur" run -m "$work/$m.gguf" -p "$prompt" -n 24 --temp 0 >"$work/$m.run" 2>"$work/$m.run.err"
    rc=$?
    check "$m: run exits 0 ($(tail -c 300 "$work/$m.run.err"))" [ "$rc" -eq 0 ]
    "$test_model" greedy "$work/$m.gguf" "$prompt" 24 >"$work/$m.api"
    check "$m: run --temp 0 prints the argmax loop's text" cmp -s "$work/$m.run" "$work/$m.api"
    check "$m: run printed more than the prompt" [ "$(wc -c <"$work/$m.run")" -gt $((${#prompt} + 1)) ]
done
for m in spm spm_cut; do
    ids=$("$test_model" greedy-ids "$work/$m.gguf" "$prompt" 24)
    got=$("$test_model" detokenize "$work/$m.gguf" "$ids" | od -An -tx1)
    want=$(python3 "$meta" "$work/$m.gguf" --spm-detok "$ids" | head -c -1 | od -An -tx1)
    check "$m: generated ids detokenize as an independent reader reads them" [ "$got" = "$want" ]
done

# llama-perplexity's BOS rule on a vocabulary that adds BOS: each window starts with BOS (1),
# the second half is scored; the float64 reference gives the same mean loss
printf 'The quick brown fox jumps over the lazy dog. A stitch in time saves nine, they say. %s' \
    'Many hands make light work; the early bird catches the worm.' >"$work/ppl.txt"
"$recur" perplexity -m "$work/spm_cut.gguf" -f "$work/ppl.txt" -c 8 -np 2 --chunks 3 -t 1 \
    >"$work/ppl.out" 2>"$work/ppl.err"
rc=$?
check "spm_cut: perplexity exits 0 ($(tail -c 300 "$work/ppl.err"))" [ "$rc" -eq 0 ]
got=$(sed -n 's/^mean loss = \([0-9.]*\) nats.* over 9 scored tokens in 3 windows of 8 (second halves)$/\1/p' "$work/ppl.out")
read -r -a ids < <("$recur" tokenize -m "$work/spm_cut.gguf" -f "$work/ppl.txt" 2>/dev/null)
check "spm_cut: the text starts with BOS" [ "${ids[0]}" = 1 ]
windows=()
for k in 0 1 2; do
    win=("${ids[@]:$((k * 8)):8}")
    win[0]=1
    windows+=(--tokens "$(IFS=,; echo "${win[*]}")")
done
want=$(python3 "$root/tests/ref/mamba_ref.py" "$work/spm_cut.gguf" "${windows[@]}" --mean-nll --score-from 4)
check "spm_cut: perplexity with BOS windows equals the reference ($got vs $want)" \
    awk -v a="${got:--1}" -v b="${want:--1}" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && b > 0 && d <= 1e-4 * b) }'

finish test_vocab_cli
