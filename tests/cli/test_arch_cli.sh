#!/usr/bin/env bash
# The command-line and server checks of test_cli.sh / test_serve.py on one model of every
# architecture (Mamba-1, Mamba-2, RWKV-6, RWKV-7, a q8_0 RWKV-6, and the hybrids Granite 4.0-H,
# Nemotron-H and Falcon-H1).
#   test_arch_cli.sh RECUR_BIN TEST_MODEL_BIN MODELS_DIR
# Per model:
# - `recur run --temp 0` prints what the C API's argmax loop prints (test_model greedy), and
#   its ids are the float64 reference's (tests/ref/mamba_ref.py --greedy) where the reference's
#   smallest top-2 logit gap is clear of rounding (> 1e-3; else the comparison is skipped, and
#   the test exits 77 when nothing failed: a skip is never a pass); q8_0 models are compared
#   with the C API only, as an input near a q8_0 rounding tie may round the other way in the
#   reference (see test_model_ref.sh);
# - `recur parallel -np 4 --temp 0`: 4 continuations, each the one of `recur run`;
# - `recur perplexity` equals the reference's --mean-nll to 1e-4 relative (not for q8_0), with
#   llama-perplexity's method (second halves) and --score-all;
# - `recur tokenize` of UTF-8 with newlines, tabs, quotes and backslashes detokenizes (C API)
#   back to the same bytes; on the RWKV world vocabulary a single ASCII byte b is token b + 1;
# - --state-out / --state-in with a longer prompt equals one run of it, and --prompt-cache
#   reuses the prompt on a second run and prints the same text;
# - `recur bench` runs pp, tg and tg x2;
# - `recur serve` (tests/serve/test_arch_serve.py): greedy, streamed, n = 2, tokenize round trip,
#   prompt reuse.
set -uo pipefail
recur=$1
test_model=$2
models=$3
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/check.sh
. "$here/../lib/check.sh"
not_compared() { # not_compared NAME WHY: a comparison this model is outside of (by design)
    echo "not compared: $1 ($2)"
}

prompt="Hello world, this is a test of"
longer="$prompt the emergency broadcast system"
n_gen=16
# the text of the perplexity check: 3 windows of 8 tokens need at least 24 tokens
printf 'The quick brown fox jumps over the lazy dog. A stitch in time saves nine, they say.' \
    >"$work/ppl.txt"
# the text of the tokenizer round trip: multi-byte UTF-8 (2, 3 and 4 bytes), a CR LF, blank
# lines, tabs, both quotes, backslashes and runs of spaces
printf 'Caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\xa6\x99 na\xc3\xafve \xe4\xb8\xad\xe6\x96\x87\n\tline "two" with \\backslash\\ and \x27quote\x27\r\n\n  end\t\\n\\t\n' \
    >"$work/rt.txt"

arch_models=(f32-untied f32-mamba2 f32-rwkv6 f32-rwkv7 q8_0-rwkv6 f32-granite f16-nemotron f32-falcon)
model_paths=()
for name in "${arch_models[@]}"; do
    m="$models/$name.gguf"
    model_paths+=("$m")
    d="$work/$name"
    mkdir -p "$d"
    quantized=false
    case "$name" in q*) quantized=true ;; esac
    # the greedy comparison needs a prompt whose continuation has no near tie: f32-falcon's
    # top-2 gap on the common one is 7e-4 (a skip), on this one 2.9e-2
    prompt="Hello world, this is a test of"
    [ "$name" = f32-falcon ] && prompt="Once upon a time, there was"
    longer="$prompt the emergency broadcast system"

    # ---- greedy: recur run, the C API, the reference ----------------------------------------
    "$recur" run -m "$m" -p "$prompt" -n $n_gen --temp 0 -t 1 >"$d/run.txt" 2>"$d/run.err"
    rc=$?
    check "$name: run exits 0 ($(head -c 200 "$d/run.err"))" [ "$rc" -eq 0 ]
    "$test_model" greedy "$m" "$prompt" $n_gen >"$d/api.txt"
    check "$name: greedy run equals the C API" cmp -s "$d/run.txt" "$d/api.txt"
    n_prompt=$(sed -n 's/^recur: prompt \([0-9]*\) tokens.*/\1/p' "$d/run.err")
    check "$name: run reports the prompt's tokens" [ -n "$n_prompt" ]
    # (random weights rarely pick EOS: a run that stops early would make the equalities weak)
    check "$name: run generates $n_gen tokens" grep -q "generated $n_gen tokens" "$d/run.err"
    prompt_ids=$("$recur" tokenize -m "$m" -p "$prompt" 2>/dev/null | tr ' ' ,)
    check "$name: the prompt tokenizes to $n_prompt ids" \
        [ "$(awk -F, '{ print NF }' <<<"$prompt_ids")" = "${n_prompt:-x}" ]
    got_ids=$("$test_model" greedy-ids "$m" "$prompt" $n_gen)
    if $quantized; then
        not_compared "$name: greedy ids against the reference" "q8_0: a rounding tie may differ"
    else
        want_ids=$(python3 "$here/../ref/mamba_ref.py" "$m" --tokens "$prompt_ids" --greedy $n_gen \
            2>"$d/ref.err")
        gap=$(sed -n 's/^smallest top-2 logit gap: //p' "$d/ref.err")
        if awk -v g="${gap:-0}" 'BEGIN { exit !(g > 1e-3) }'; then
            check "$name: greedy ids equal the reference's (gap $gap)" [ "$got_ids" = "$want_ids" ]
        else
            skip "$name: greedy ids against the reference" "top-2 gap ${gap:-none} <= 1e-3"
        fi
    fi

    # ---- parallel: 4 continuations, each the one of recur run -------------------------------
    "$recur" parallel -m "$m" -p "$prompt" -np 4 -n $n_gen --temp 0 -t 1 \
        >"$d/par.txt" 2>"$d/par.err"
    rc=$?
    check "$name: parallel exits 0 ($(head -c 200 "$d/par.err"))" [ "$rc" -eq 0 ]
    # parallel prints "sequence I: " + prompt + continuation + a blank line; the continuation
    # of a random model may hold newlines, so the whole output is compared, not lines
    for i in 0 1 2 3; do
        printf 'sequence %d: ' $i
        cat "$d/run.txt"
        printf '\n'
    done >"$d/par_want.txt"
    check "$name: parallel -np 4 gives recur run's continuation 4 times" \
        cmp -s "$d/par.txt" "$d/par_want.txt"

    # ---- perplexity against the reference, both methods ------------------------------------
    # default: llama-perplexity's (text tokenised with BOS where the vocabulary adds it, each
    # window's first token BOS, the second half scored: positions 5..7 of 8); --score-all:
    # the training script's (no BOS in the text, every token after the first scored)
    "$recur" perplexity -m "$m" -f "$work/ppl.txt" -c 8 -np 2 --chunks 3 -t 1 \
        >"$d/ppl.out" 2>"$d/ppl.err"
    rc=$?
    check "$name: perplexity exits 0 ($(head -c 200 "$d/ppl.err"))" [ "$rc" -eq 0 ]
    got_half=$(sed -n 's/^mean loss = \([0-9.]*\) nats.* over 9 scored tokens in 3 windows of 8 (second halves)$/\1/p' "$d/ppl.out")
    check "$name: perplexity scores 3 windows x 3 tokens" [ -n "$got_half" ]
    "$recur" perplexity -m "$m" -f "$work/ppl.txt" -c 8 -np 2 --chunks 3 -t 1 --score-all \
        >"$d/ppl_all.out" 2>"$d/ppl_all.err"
    rc=$?
    check "$name: perplexity --score-all exits 0 ($(head -c 200 "$d/ppl_all.err"))" [ "$rc" -eq 0 ]
    got_loss=$(sed -n 's/^mean loss = \([0-9.]*\) nats.* over 21 scored tokens in 3 windows of 8 (every token after the first: --score-all)$/\1/p' "$d/ppl_all.out")
    check "$name: perplexity --score-all scores 3 windows x 7 tokens" [ -n "$got_loss" ]
    if $quantized; then
        not_compared "$name: perplexity against the reference" "q8_0: a rounding tie may differ"
    else
        read -r -a with_bos < <("$recur" tokenize -m "$m" -p x 2>/dev/null)
        read -r -a no_bos < <("$recur" tokenize -m "$m" -p x --no-bos 2>/dev/null)
        adds_bos=false
        [ "${#with_bos[@]}" -gt "${#no_bos[@]}" ] && adds_bos=true
        for method in half all; do
            if [ $method = half ]; then
                read -r -a ids < <("$recur" tokenize -m "$m" -f "$work/ppl.txt" 2>/dev/null)
            else
                read -r -a ids < <("$recur" tokenize -m "$m" -f "$work/ppl.txt" --no-bos 2>/dev/null)
            fi
            windows=()
            for k in 0 1 2; do
                win=("${ids[@]:$((k * 8)):8}")
                # a window's first token is BOS where the vocabulary adds one, both methods
                $adds_bos && win[0]=${with_bos[0]}
                windows+=(--tokens "$(IFS=,; echo "${win[*]}")")
            done
            if [ $method = half ]; then
                want=$(python3 "$here/../ref/mamba_ref.py" "$m" "${windows[@]}" --mean-nll --score-from 4)
                got=$got_half
            else
                want=$(python3 "$here/../ref/mamba_ref.py" "$m" "${windows[@]}" --mean-nll)
                got=$got_loss
            fi
            check "$name: perplexity ($method) equals the reference's mean loss ($got vs $want)" \
                awk -v a="${got:--1}" -v b="${want:--1}" \
                'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && b > 0 && d <= 1e-4 * b) }'
        done
    fi

    # ---- tokenizer round trip ---------------------------------------------------------------
    rt_ids=$("$recur" tokenize -m "$m" -f "$work/rt.txt" --no-bos 2>"$d/tok.err")
    rc=$?
    check "$name: tokenize exits 0 ($(head -c 200 "$d/tok.err"))" [ "$rc" -eq 0 ]
    "$test_model" detokenize "$m" "$rt_ids" >"$d/rt.txt"
    check "$name: tokenize then detokenize gives the text back" cmp -s "$d/rt.txt" "$work/rt.txt"
    case "$name" in
    *rwkv*)
        # world vocabulary (mkmodel's layout, as the RWKV one): id 0 <s>, 1..256 bytes 0..255
        bad=""
        for b in 9 10 32 33 34 39 48 65 92 97 122 126; do
            c=$(printf '%b' "\\x$(printf %02x "$b")")
            [ $b -eq 10 ] && c=$'\n'
            got=$("$recur" tokenize -m "$m" -p "$c" 2>/dev/null)
            [ "$got" = "$((b + 1))" ] || bad="$bad byte $b -> '$got';"
        done
        check "$name: a single ASCII byte b is token b + 1 ($bad)" [ -z "$bad" ]
        check "$name: no BOS is added" [ "$("$recur" tokenize -m "$m" -p A 2>/dev/null)" = 66 ]
        ;;
    esac

    # ---- state files and the prompt cache -----------------------------------------------------
    "$recur" run -m "$m" -p "$prompt" -n 0 --state-out "$d/s.bin" -t 1 >/dev/null 2>&1
    check "$name: state-out writes a file" [ -s "$d/s.bin" ]
    "$recur" run -m "$m" -p "$prompt" -n $n_gen --temp 0 -t 1 --state-in "$d/s.bin" \
        >"$d/cont.txt" 2>"$d/cont.err"
    check "$name: state-in equals an uninterrupted run" cmp -s "$d/cont.txt" "$d/run.txt"
    check "$name: state-in reuses every prompt token" grep -q "($n_prompt reused" "$d/cont.err"
    "$recur" run -m "$m" -p "$longer" -n $n_gen --temp 0 -t 1 >"$d/long.txt" 2>"$d/long.err"
    "$recur" run -m "$m" -p "$longer" -n $n_gen --temp 0 -t 1 --state-in "$d/s.bin" \
        >"$d/long2.txt" 2>"$d/long2.err"
    check "$name: a longer prompt continues from the state" cmp -s "$d/long.txt" "$d/long2.txt"
    check "$name: the saved prefix is not decoded again" grep -q "($n_prompt reused" "$d/long2.err"
    n_long=$(sed -n 's/^recur: prompt \([0-9]*\) tokens.*/\1/p' "$d/long.err")
    "$recur" run -m "$m" -p "$longer" -n $n_gen --temp 0 -t 1 --prompt-cache "$d/cache.bin" \
        >"$d/c1.txt" 2>"$d/c1.err"
    check "$name: cache: a cold run reuses nothing" grep -q "(0 reused)" "$d/c1.err"
    check "$name: cache: a cold run prints what a plain run does" cmp -s "$d/c1.txt" "$d/long.txt"
    "$recur" run -m "$m" -p "$longer" -n $n_gen --temp 0 -t 1 --prompt-cache "$d/cache.bin" \
        >"$d/c2.txt" 2>"$d/c2.err"
    check "$name: cache: a repeat reuses all but the last token" \
        grep -q "($((${n_long:-1} - 1)) reused)" "$d/c2.err"
    check "$name: cache: a repeat prints the same" cmp -s "$d/c2.txt" "$d/long.txt"

    # ---- bench --------------------------------------------------------------------------------
    # (no probe: test_cli.sh checks the bounds; here the model's steps)
    "$recur" bench -m "$m" -p 16 -n 4 -np 1,2 -t 1 -r 1 --no-probe --json >"$d/bench.json" \
        2>"$d/bench.err"
    rc=$?
    check "$name: bench exits 0 ($(head -c 200 "$d/bench.err"))" [ "$rc" -eq 0 ]
    check "$name: bench reports pp16, tg4, tg4 x2" python3 - "$d/bench.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
tests = {r["test"]: r for r in d["results"]}
assert list(tests) == ["pp16", "tg4", "tg4 x2"], tests
for r in tests.values():
    assert 0 < r["min_tps"] <= r["median_tps"] <= r["max_tps"], r
EOF
    echo "test_arch_cli: $name done ($passed passed, $failed failed so far)"
done

# ---- recur serve on every model ---------------------------------------------------------------
python3 "$here/../serve/test_arch_serve.py" "$recur" "${model_paths[@]}"
check "recur serve on every architecture (test_arch_serve.py)" [ $? -eq 0 ]

finish test_arch_cli
