#!/usr/bin/env bash
# Tests of `recur run` and `recur parallel` against the C API and each other.
#   test_cli.sh RECUR_BIN TEST_MODEL_BIN MODELS_DIR
set -uo pipefail
recur=$1
test_model=$2
models=$3
here=$(cd "$(dirname "$0")" && pwd)
model="$models/f32-untied.gguf"
# shellcheck source=../lib/check.sh
. "$here/../lib/check.sh"

prompt="Hello world, this is a test of"

# greedy `recur run` prints what a plain argmax loop over the C API gives
"$recur" run -m "$model" -p "$prompt" -n 24 --temp 0 >"$work/run.txt" 2>"$work/run.err"
check "run exits 0" [ $? -eq 0 ]
"$test_model" greedy "$model" "$prompt" 24 >"$work/api.txt"
check "greedy run equals the C API" cmp -s "$work/run.txt" "$work/api.txt"
check "run reports speed" grep -q "tokens/s" "$work/run.err"
n_prompt=$(sed -n 's/^recur: prompt \([0-9]*\) tokens.*/\1/p' "$work/run.err")
check "run reports the prompt's tokens" [ -n "$n_prompt" ]

# the prompt from a file gives the same
printf '%s' "$prompt" >"$work/prompt.txt"
"$recur" run -m "$model" -f "$work/prompt.txt" -n 24 --temp 0 >"$work/runf.txt" 2>/dev/null
check "-f equals -p" cmp -s "$work/run.txt" "$work/runf.txt"

# parallel, greedy: 8 identical continuations, each equal to `recur run`
"$recur" parallel -m "$model" -p "$prompt" -np 8 -n 24 --temp 0 >"$work/par.txt" 2>"$work/par.err"
check "parallel exits 0" [ $? -eq 0 ]
want=$(cat "$work/run.txt")
for i in 0 1 2 3 4 5 6 7; do
    got=$(LC_ALL=C sed -n "s/^sequence $i: //p" "$work/par.txt")
    check "parallel sequence $i equals run" [ "$got" = "$want" ]
done
check "parallel reports speed" grep -q "tokens/s" "$work/par.err"

# parallel with sampling: seeds differ per sequence, so not all continuations are equal, and
# the same seed gives the same output again
"$recur" parallel -m "$model" -p "$prompt" -np 4 -n 16 --temp 1.5 --top-k 0 --top-p 1 \
    --min-p 0 --seed 7 >"$work/s1.txt" 2>/dev/null
"$recur" parallel -m "$model" -p "$prompt" -np 4 -n 16 --temp 1.5 --top-k 0 --top-p 1 \
    --min-p 0 --seed 7 >"$work/s2.txt" 2>/dev/null
check "sampling is deterministic under a seed" cmp -s "$work/s1.txt" "$work/s2.txt"
distinct=$(grep -a '^sequence' "$work/s1.txt" | sed 's/^sequence [0-9]*: //' | sort -u | wc -l)
check "sampled continuations differ" [ "$distinct" -gt 1 ]

# state: a saved prompt is reused and continuing equals an uninterrupted run
"$recur" run -m "$model" -p "$prompt" -n 0 --state-out "$work/s.bin" >/dev/null 2>&1
check "state-out writes a file" [ -s "$work/s.bin" ]
"$recur" run -m "$model" -p "$prompt" -n 24 --temp 0 --state-in "$work/s.bin" \
    >"$work/cont.txt" 2>"$work/cont.err"
check "state-in equals an uninterrupted run" cmp -s "$work/cont.txt" "$work/run.txt"
check "state-in reuses every prompt token" grep -q "($n_prompt reused" "$work/cont.err"
longer="$prompt the emergency broadcast system"
"$recur" run -m "$model" -p "$longer" -n 16 --temp 0 >"$work/long.txt" 2>/dev/null
"$recur" run -m "$model" -p "$longer" -n 16 --temp 0 --state-in "$work/s.bin" \
    >"$work/long2.txt" 2>"$work/long2.err"
check "a longer prompt continues from the state" cmp -s "$work/long.txt" "$work/long2.txt"
check "the saved prefix is not decoded again" grep -q "($n_prompt reused" "$work/long2.err"
# a conversation: save after generating, continue with the whole text so far
"$recur" run -m "$model" -p "$prompt" -n 8 --temp 0 --state-out "$work/t1.bin" \
    >"$work/t1.txt" 2>/dev/null
turn2="$(cat "$work/t1.txt") and then"
"$recur" run -m "$model" -p "$turn2" -n 8 --temp 0 >"$work/t2a.txt" 2>/dev/null
"$recur" run -m "$model" -p "$turn2" -n 8 --temp 0 --state-in "$work/t1.bin" \
    >"$work/t2b.txt" 2>/dev/null
check "second turn from the state equals a fresh run" cmp -s "$work/t2a.txt" "$work/t2b.txt"
# another model's state is refused
"$recur" run -m "$models/f32-tied.gguf" -p "$prompt" -n 2 --state-in "$work/s.bin" \
    >/dev/null 2>"$work/other.err"
check "another model's state is refused (exit 1)" [ $? -eq 1 ]
check "another model's state: message" grep -q "another model" "$work/other.err"

# perplexity: the mean loss of recur's windows equals the float64 reference's (computed
# from its own logits and log-softmax), to 1e-4 relative, with both methods: llama-perplexity's
# (the default: the second half of each window, here positions 5..7 of 8) and the training
# script's (--score-all: every token after the first)
printf 'The quick brown fox jumps over the lazy dog. A stitch in time saves nine, they say.' \
    >"$work/ppl.txt"
"$recur" perplexity -m "$model" -f "$work/ppl.txt" -c 8 -np 2 --chunks 3 >"$work/ppl2.out" 2>"$work/ppl2.err"
check "perplexity exits 0" [ $? -eq 0 ]
got_half=$(sed -n 's/^mean loss = \([0-9.]*\) nats.* over 9 scored tokens in 3 windows of 8 (second halves)$/\1/p' "$work/ppl2.out")
check "perplexity scores 3 windows x 3 tokens (the second halves)" [ -n "$got_half" ]
read -r -a ids < <("$recur" tokenize -m "$model" -f "$work/ppl.txt" 2>/dev/null)
windows=()
for k in 0 1 2; do
    windows+=(--tokens "$(IFS=,; echo "${ids[*]:$((k * 8)):8}")")
done
want_half=$(python3 "$here/../ref/mamba_ref.py" "$model" "${windows[@]}" --mean-nll --score-from 4)
check "perplexity equals the reference's mean loss of the second halves ($got_half vs $want_half)" \
    awk -v a="${got_half:--1}" -v b="$want_half" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && b > 0 && d <= 1e-4 * b) }'
check "the two methods differ" [ "$got_half" != "$(python3 "$here/../ref/mamba_ref.py" "$model" "${windows[@]}" --mean-nll)" ]
"$recur" perplexity -m "$model" -f "$work/ppl.txt" -c 8 -np 2 --chunks 3 --score-all \
    >"$work/ppl.out" 2>"$work/ppl.err"
check "perplexity --score-all exits 0" [ $? -eq 0 ]
check "perplexity prints llama-perplexity's final line" grep -q "^Final estimate: PPL = " "$work/ppl.out"
check "perplexity prints the running value per window" \
    grep -q "^\[1\][0-9.]*,\[2\][0-9.]*,\[3\][0-9.]*,$" "$work/ppl.out"
got_loss=$(sed -n 's/^mean loss = \([0-9.]*\) nats.* over 21 scored tokens in 3 windows of 8 (every token after the first: --score-all)$/\1/p' "$work/ppl.out")
check "perplexity scores 3 windows x 7 tokens" [ -n "$got_loss" ]
read -r -a ids < <("$recur" tokenize -m "$model" -f "$work/ppl.txt" --no-bos 2>/dev/null)
windows=()
for k in 0 1 2; do
    windows+=(--tokens "$(IFS=,; echo "${ids[*]:$((k * 8)):8}")")
done
want_loss=$(python3 "$here/../ref/mamba_ref.py" "$model" "${windows[@]}" --mean-nll)
check "perplexity equals the reference's mean loss ($got_loss vs $want_loss)" \
    awk -v a="${got_loss:--1}" -v b="$want_loss" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && b > 0 && d <= 1e-4 * b) }'
expect_exit "perplexity without -f" 2 "-f FILE is required" "$recur" perplexity -m "$model"
printf 'too short' >"$work/short.txt"
expect_exit "perplexity --score-all on a text shorter than a window" 1 \
    "fewer than one window of -c 256" "$recur" perplexity -m "$model" -f "$work/short.txt" --score-all
expect_exit "perplexity on a text shorter than two windows" 1 \
    "at least 128 (two windows of -c 64) are needed" "$recur" perplexity -m "$model" -f "$work/ppl.txt" -c 64

# quantize: the q8_0 file holds q8_0 matrices, decodes, and its greedy text equals the C API's
"$recur" quantize "$model" "$work/q8.gguf" q8_0 2>"$work/q.err"
check "quantize exits 0" [ $? -eq 0 ]
check "quantize converts the matrices" grep -q ": 8 of 23 tensors in q8_0" "$work/q.err"
"$recur" run -m "$work/q8.gguf" -p "$prompt" -n 8 --temp 0 >"$work/q8run.txt" 2>/dev/null
"$test_model" greedy "$work/q8.gguf" "$prompt" 8 >"$work/q8api.txt"
check "q8_0 greedy run equals the C API" cmp -s "$work/q8run.txt" "$work/q8api.txt"
"$recur" quantize "$work/q8.gguf" "$work/f16.gguf" f16 2>/dev/null
check "q8_0 -> f16 loads" "$recur" run -m "$work/f16.gguf" -p x -n 1 --temp 0 >/dev/null 2>&1
expect_exit "quantize: unknown type" 2 "unknown type 'q5_k'" "$recur" quantize "$model" "$work/x.gguf" q5_k
# the mixes: Q4_K_M loads and generates; the lower-case name is one type throughout
"$recur" quantize "$model" "$work/q4km.gguf" Q4_K_M 2>"$work/q.err"
check "quantize Q4_K_M exits 0 ($(cat "$work/q.err"))" grep -q "tensors in Q4_K_M" "$work/q.err"
check "a Q4_K_M file generates" "$recur" run -m "$work/q4km.gguf" -p "$prompt" -n 4 --temp 0 >/dev/null 2>&1
"$recur" quantize --help >"$work/qhelp.txt"
check "quantize --help lists the mixes" grep -q "Q4_K_M Q4_K_S Q5_K_M" "$work/qhelp.txt"
check "quantize --help lists the pure types" grep -q "q4_K q5_K q6_K q8_0" "$work/qhelp.txt"
"$recur" quantize "$model" "$work/q4km-3.gguf" Q4_K_M 3 2>/dev/null
check "quantize on 3 threads writes the same bytes as on 4" cmp -s "$work/q4km.gguf" "$work/q4km-3.gguf"
"$recur" quantize "$model" "$work/q4km-1.gguf" Q4_K_M 1 2>/dev/null
check "quantize on 1 thread writes the same bytes" cmp -s "$work/q4km.gguf" "$work/q4km-1.gguf"
expect_exit "quantize: bad THREADS" 2 "THREADS '0' is not a number in 1 .. 256" \
    "$recur" quantize "$model" "$work/x.gguf" Q4_K_M 0
expect_exit "quantize: same file" 2 "IN and OUT are the same file" "$recur" quantize "$model" "$model" q8_0
expect_exit "quantize: missing input" 1 "$work/none.gguf" "$recur" quantize "$work/none.gguf" "$work/x.gguf" q8_0
check "quantize: no output after a failure" [ ! -e "$work/x.gguf" ]

# bench: JSON with every test, positive speeds, the spread around the median, and bounds
"$recur" bench -m "$model" -p 16 -n 4 -np 1,3 -r 3 -t 2 --json >"$work/bench.json" 2>"$work/bench.err"
rc=$?
check "bench exits 0 ($(head -c 200 "$work/bench.err"))" [ "$rc" -eq 0 ]
check "bench JSON holds pp16, tg4, tg4 x3 with sane figures" python3 - "$work/bench.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
tests = {r["test"]: r for r in d["results"]}
assert list(tests) == ["pp16", "tg4", "tg4 x3"], tests
assert tests["tg4 x3"]["tokens"] == 12 and tests["pp16"]["tokens"] == 16
for r in tests.values():
    assert 0 < r["min_tps"] <= r["median_tps"] <= r["max_tps"], r
    assert r["bound_tps"] > 0 and r["bound_by"] in ("memory", "compute"), r
assert d["machine"]["fma_gflops"] > 0 and d["machine"]["read_gbps"] > 0
assert d["weights"]["layer_params"] == 2 * (64 * 256 + 128 * 20 + 4 * 128 + 128 * 64), d
assert d["weight_types"].startswith("f32 100%"), d["weight_types"]
# a step reads the weights and each sequence's state: 2 layers of f32 conv (3 x 128) and
# scan (128 x 8) states, and the saved state's header
st = d["weights"]["state_bytes_per_seq"]
assert 2 * (3 * 128 + 128 * 8) * 4 <= st < 2 * (3 * 128 + 128 * 8) * 4 + 256, st
for r in tests.values():
    if r["bound_by"] == "memory":
        k = r["n_seq"]
        want = d["machine"]["read_gbps"] * 1e9 / (d["weights"]["bytes_per_token"] + k * st) * k
        assert abs(r["bound_tps"] / want - 1) < 1e-3, (r, want)
EOF
# --probe-each: every run with the probe before it, its fraction against that probe's bound
# (recomputed here from the run's figures and the file's sizes), the median of those reported
"$recur" bench -m "$model" -p 16 -n 4 -np 1,3 -r 3 -t 2 --probe-each --json \
    >"$work/bench_pe.json" 2>"$work/bench_pe.err"
rc=$?
check "bench --probe-each exits 0 ($(head -c 200 "$work/bench_pe.err"))" [ "$rc" -eq 0 ]
check "bench --probe-each: each run against its own probe, the median of those" \
    python3 - "$work/bench_pe.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
w, st = d["weights"], d["weights"]["state_bytes_per_seq"]
for r in d["results"]:
    runs = r["runs"]
    assert len(runs) == 3 and all(u["read_gbps"] > 0 and u["fma_gflops"] > 0 for u in runs), r
    for u in runs:
        if r["test"].startswith("pp"):
            bound = u["fma_gflops"] * 1e9 / (2 * w["layer_params"])
        else:
            k = r["n_seq"]
            mem = u["read_gbps"] * 1e9 / (w["bytes_per_token"] + k * st) * k
            flops = u["fma_gflops"] * 1e9 / (2 * (w["layer_params"] + w["output_params"]))
            bound = min(mem, flops)
        assert abs(u["fraction_of_bound"] / (u["tps"] / bound) - 1) < 2e-3, (u, bound)
    fr = sorted(u["fraction_of_bound"] for u in runs)
    assert abs(r["paired_fraction_of_bound"] - fr[1]) < 1e-4, r
    assert sorted(u["tps"] for u in runs) == sorted([r["min_tps"], r["median_tps"], r["max_tps"]])
EOF
# --no-probe: speeds without a machine, so no bounds (null in JSON, dashes in the table)
"$recur" bench -m "$model" -p 16 -n 4 -np 1 -r 1 -t 2 --no-probe --json >"$work/bench_np.json" \
    2>"$work/bench_np.err"
rc=$?
check "bench --no-probe exits 0 ($(head -c 200 "$work/bench_np.err"))" [ "$rc" -eq 0 ]
check "bench --no-probe: speeds, no machine, no bounds, no runs" python3 - "$work/bench_np.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["machine"] is None, d
assert [r["test"] for r in d["results"]] == ["pp16", "tg4"], d
for r in d["results"]:
    assert r["median_tps"] > 0 and "runs" not in r, r
    assert r["bound_tps"] is None and r["bound_by"] is None and r["fraction_of_bound"] is None, r
EOF
check "bench --no-probe: no machine line on stderr" bash -c '! grep -q "GB/s" "$1"' _ "$work/bench_np.err"
"$recur" bench -m "$work/q4km.gguf" -p 8 -n 2 -np 1 -r 1 -t 1 --no-probe >"$work/bench4.txt" 2>/dev/null
check "bench names a mix's weight types" grep -qE "\| q[0-9]_[0-9K]+ [0-9]+%, q" "$work/bench4.txt"
check "bench --no-probe: the table's bound columns are dashes" grep -qE "\| tg2 \| [0-9.]+ \([0-9.]+-[0-9.]+\) \| - \| - \|$" "$work/bench4.txt"
# repacking: the q4_K / q6_K matrices' second copy, which AVX-512 reads; -nr loads without it
# (a file whose rows are whole 256s: the small one's fall back to q5_0)
"$recur" bench -m "$models/quant/Q4_K_M-wide.gguf" -p 0 -n 2 -np 1 -r 1 -t 1 --no-probe --json \
    >"$work/bench_rp.json" 2>/dev/null
rc=$?
check "bench of the Q4_K_M file exits 0" [ "$rc" -eq 0 ]
"$recur" bench -m "$models/quant/Q4_K_M-wide.gguf" -p 0 -n 2 -np 1 -r 1 -t 1 --no-probe --json -nr \
    >"$work/bench_nr.json" 2>/dev/null
rc=$?
check "bench -nr exits 0" [ "$rc" -eq 0 ]
check "bench: a copy with AVX-512 (none without), none with -nr" python3 - "$work/bench_rp.json" \
    "$work/bench_nr.json" <<'EOF'
import json, sys
rp, nr = (json.load(open(f)) for f in sys.argv[1:3])
assert nr["weights"]["repacked_bytes"] == 0, nr["weights"]
if rp["isa"] == "avx512":
    assert rp["weights"]["repacked_bytes"] > 0, rp["weights"]
else:
    assert rp["weights"]["repacked_bytes"] == 0, rp
    print("  (isa %s: no copy is made, so only -nr's none is checked)" % rp["isa"])
EOF
check "bench --no-probe: the table says why" grep -q "not probed (--no-probe)" "$work/bench4.txt"
expect_exit "bench: --no-probe with --probe-each" 2 "--probe-each and --no-probe contradict" \
    "$recur" bench -m "$model" --no-probe --probe-each
expect_exit "bench: bad -np" 2 "-np: '1,x' is not a valid value" "$recur" bench -m "$model" -np 1,x

# errors: usage (2) and runtime (1), one clear line
# without -m: $RECUR_MODEL, else the shipped model
RECUR_MODEL="$work/none.gguf" expect_exit "no -m: RECUR_MODEL" 1 "$work/none.gguf" "$recur" run -p x
expect_exit "no prompt" 2 "-p or -f" "$recur" run -m "$model"
expect_exit "unknown flag" 2 "unknown flag '--bogus'" "$recur" run -m "$model" -p x --bogus 1
expect_exit "bad number" 2 "--temp: 'hot' is not a valid value" "$recur" run -m "$model" -p x --temp hot
expect_exit "missing value" 2 "-n needs a value" "$recur" run -m "$model" -p x -n
expect_exit "bad -np" 2 "-np: '0' is not a valid value" "$recur" parallel -m "$model" -p x -np 0
expect_exit "unknown command" 2 "unknown command 'fly'" "$recur" fly
expect_exit "missing file" 1 "$work/none.gguf" "$recur" run -m "$work/none.gguf" -p x
expect_exit "missing prompt file" 1 "$work/none.txt" "$recur" run -m "$model" -f "$work/none.txt"
printf 'not a model' >"$work/text.gguf"
expect_exit "not GGUF" 1 "not a GGUF file" "$recur" run -m "$work/text.gguf" -p x
# a model of another architecture: the value of general.architecture patched to "mambo"
python3 - "$model" "$work/mambo.gguf" <<'EOF'
import struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
key = b"general.architecture"
i = data.index(key) + len(key)
assert struct.unpack_from("<I", data, i)[0] == 8  # a string value
n = struct.unpack_from("<Q", data, i + 4)[0]
assert data[i + 12:i + 12 + n] == b"mamba"
data[i + 12:i + 12 + n] = b"mambo"
open(sys.argv[2], "wb").write(data)
EOF
expect_exit "unsupported architecture" 1 "architecture mambo is not supported" \
    "$recur" run -m "$work/mambo.gguf" -p x
lines=$(wc -l <"$work/err")
check "a runtime error is one line" [ "$lines" -eq 1 ]
expect_exit "help" 0 "" "$recur" run --help
check "help lists --state-in" grep -q -- "--state-in" "$work/out"
expect_exit "parallel help" 0 "" "$recur" parallel --help
check "parallel help lists -np" grep -q -- "-np" "$work/out"

# a prompt that leaves a saved state's tokens part-way: back to its last checkpoint (every 64
# positions), the same text as a cold run
base="$prompt $prompt $prompt $prompt $prompt $prompt $prompt $prompt"
"$recur" run -m "$model" -p "$base $prompt" -n 0 --state-out "$work/ck.bin" >/dev/null 2>&1
"$recur" run -m "$model" -p "$base and now for something else" -n 16 --temp 0 \
    >"$work/div_cold.txt" 2>/dev/null
"$recur" run -m "$model" -p "$base and now for something else" -n 16 --temp 0 \
    --state-in "$work/ck.bin" >"$work/div.txt" 2>"$work/div.err"
check "state-in: a diverging prompt goes back to a checkpoint" grep -q "went back" "$work/div.err"
check "state-in: ... and reuses 64 tokens" grep -q "(64 reused)" "$work/div.err"
check "state-in: ... and prints what a cold run does" cmp -s "$work/div.txt" "$work/div_cold.txt"

# lookup decoding: the same text as plain decoding, greedy and sampled, and it says how it went
"$recur" run -m "$model" -p "$prompt" -n 64 --temp 0 >"$work/plain.txt" 2>/dev/null
"$recur" run -m "$model" -p "$prompt" -n 64 --temp 0 --lookup 4 >"$work/look.txt" 2>"$work/look.err"
check "lookup: greedy output equals plain decoding" cmp -s "$work/plain.txt" "$work/look.txt"
check "lookup: reports acceptance" grep -q "drafts accepted" "$work/look.err"
accepted=$(sed -n 's/^recur: lookup: \([0-9]*\) of.*/\1/p' "$work/look.err")
check "lookup: some drafts are accepted on this text" [ "${accepted:-0}" -gt 0 ]
"$recur" run -m "$model" -p "$prompt" -n 64 --temp 0.9 --seed 3 >"$work/plain_s.txt" 2>/dev/null
"$recur" run -m "$model" -p "$prompt" -n 64 --temp 0.9 --seed 3 --lookup 6 \
    >"$work/look_s.txt" 2>/dev/null
check "lookup: sampled output equals plain decoding" cmp -s "$work/plain_s.txt" "$work/look_s.txt"
# the state saved after lookup decoding holds the same tokens as after plain decoding (drafts
# past the end rolled back): equal headers (magic, version, model, token list, checksum) and
# equal sizes
"$recur" run -m "$model" -p "$prompt" -n 64 --temp 0 --lookup 5 --state-out "$work/ls.bin" \
    >/dev/null 2>&1
"$recur" run -m "$model" -p "$prompt" -n 64 --temp 0 --state-out "$work/ps.bin" \
    >/dev/null 2>"$work/ps.err"
n_out=$(sed -n 's/.*generated \([0-9]*\) tokens.*/\1/p' "$work/ps.err")
n_saved=$(od -An -t u4 -j 16 -N 4 "$work/ps.bin" | tr -d ' ')
check "lookup: the state saved holds prompt + output" [ "$n_saved" -eq $((n_prompt + n_out)) ]
check "lookup: the saved state holds the same tokens" \
    cmp -s -n $((28 + 4 * n_saved)) "$work/ls.bin" "$work/ps.bin"
expect_exit "lookup: bad N" 2 "--lookup" "$recur" run -m "$model" -p x --lookup 0

# the prompt cache: a repeat reuses all but the last token, a next turn reuses prompt + reply,
# and the output is what a cold run gives
cache="$work/cache.bin"
"$recur" run -m "$model" -p "$longer" -n 16 --temp 0 --prompt-cache "$cache" \
    >"$work/c1.txt" 2>"$work/c1.err"
check "cache: a cold run reuses nothing" grep -q "(0 reused)" "$work/c1.err"
check "cache: the file is written" [ -s "$cache" ]
check "cache: a cold run prints what a plain run does" cmp -s "$work/c1.txt" "$work/long.txt"
n_long=$(sed -n 's/^recur: prompt \([0-9]*\) tokens.*/\1/p' "$work/c1.err")
"$recur" run -m "$model" -p "$longer" -n 16 --temp 0 --prompt-cache "$cache" \
    >"$work/c2.txt" 2>"$work/c2.err"
check "cache: a repeat reuses all but the last token" grep -q "($((n_long - 1)) reused)" "$work/c2.err"
check "cache: a repeat prints the same" cmp -s "$work/c2.txt" "$work/long.txt"
turn2="$(cat "$work/c1.txt") and then what"
"$recur" run -m "$model" -p "$turn2" -n 16 --temp 0 >"$work/t2cold.txt" 2>/dev/null
"$recur" run -m "$model" -p "$turn2" -n 16 --temp 0 --prompt-cache "$cache" \
    >"$work/t2.txt" 2>"$work/t2.err"
check "cache: a next turn reuses prompt + reply" grep -q "($((n_long + 16)) reused)" "$work/t2.err"
check "cache: a next turn prints what a cold run does" cmp -s "$work/t2.txt" "$work/t2cold.txt"
"$recur" parallel -m "$model" -p "$longer" -np 2 -n 8 --temp 0 --prompt-cache "$cache" \
    >"$work/pc.txt" 2>"$work/pc.err"
check "cache: parallel reuses the prompt" grep -q "($((n_long - 1)) reused)" "$work/pc.err"
# a cache of another model: a note, a correct answer, and the file left alone
cp "$cache" "$work/cache_keep.bin"
"$recur" run -m "$models/f32-rms.gguf" -p "$longer" -n 8 --temp 0 --prompt-cache "$cache" \
    >/dev/null 2>"$work/cx.err"
check "cache: another model's file gives a note" grep -q "another model" "$work/cx.err"
check "cache: another model's file is left alone" cmp -s "$cache" "$work/cache_keep.bin"
printf 'garbage' >"$work/bad_cache.bin"
"$recur" run -m "$model" -p "$longer" -n 16 --temp 0 --prompt-cache "$work/bad_cache.bin" \
    >"$work/cb.txt" 2>"$work/cb.err"
check "cache: a corrupt file still gives the right text" cmp -s "$work/cb.txt" "$work/long.txt"
check "cache: a corrupt file is left alone" [ "$(cat "$work/bad_cache.bin")" = garbage ]

# files that are not files, links and modes (state files and prompt caches alike)
mkfifo "$work/fifo"
# a FIFO named as a model or a state is refused at once (an open of it would block forever:
# timeout turns a hang into exit 124)
expect_exit "a FIFO as the model is refused" 1 "not a regular file (a FIFO)" \
    timeout 20 "$recur" run -m "$work/fifo" -p "$prompt" -n 4
expect_exit "a FIFO as --state-in is refused" 1 "not a regular file (a FIFO)" \
    timeout 20 "$recur" run -m "$model" -p "$prompt" -n 4 --state-in "$work/fifo"
# a FIFO as an output is refused before anything is generated, and stays a FIFO
expect_exit "a FIFO as --state-out is refused" 1 "is a FIFO, not a regular file" \
    timeout 20 "$recur" run -m "$model" -p "$prompt" -n 4 --state-out "$work/fifo"
check "a refused --state-out generated nothing" [ ! -s "$work/out" ]
check "the FIFO is still a FIFO" [ -p "$work/fifo" ]
expect_exit "a FIFO as --prompt-cache is refused" 1 "is a FIFO, not a regular file" \
    timeout 20 "$recur" run -m "$model" -p "$prompt" -n 4 --prompt-cache "$work/fifo"
expect_exit "an output in a missing folder fails before generating" 1 \
    "cannot create a file in $work/no-such-dir: No such file or directory" \
    "$recur" run -m "$model" -p "$prompt" -n 4 --state-out "$work/no-such-dir/s.bin"
check "nothing was generated for it" [ ! -s "$work/out" ]
# a link is written through: it stays a link, its target gets the state, the mode stays
mkdir "$work/real"
cp "$work/s.bin" "$work/real/s.bin"
chmod 0640 "$work/real/s.bin"
ln -s real/s.bin "$work/s-link.bin"
"$recur" run -m "$model" -p "$longer" -n 0 --state-out "$work/s-link.bin" >/dev/null 2>&1
check "state-out through a link keeps the link" [ -L "$work/s-link.bin" ]
check "state-out through a link writes its target" [ "$(cmp -s "$work/real/s.bin" "$work/s.bin"; echo $?)" = 1 ]
check "state-out keeps the file's mode" [ "$(stat -c %a "$work/real/s.bin")" = 640 ]
"$recur" run -m "$model" -p "$longer" -n 16 --temp 0 --state-in "$work/s-link.bin" \
    >"$work/long3.txt" 2>/dev/null
check "the state written through the link is the longer prompt's" cmp -s "$work/long3.txt" "$work/long.txt"
# grammars: one whose matching would cost without bound is refused before generating (exit 2,
# naming the rule and the limit; timeout turns a hang into exit 124), and a sample the grammar
# leaves no token for ends the run with exit 1 and the reason, not as an end of text
expect_exit "run refuses a grammar bomb" 2 \
    "rule 'root' (a group or repetition in it) expands to more than 1024 parse stacks" \
    timeout 20 "$recur" run -m "$model" -p "$prompt" -n 8 --grammar 'root ::= ([a-z]?){0,1000}'
expect_exit "run fails when the grammar cannot go on" 1 \
    "recur: sampling failed: grammar: no candidate token can continue the grammar here" \
    timeout 20 "$recur" run -m "$model" -p "$prompt" -n 8 --grammar 'root ::= "a" []'
check "the failed run's error is one line" [ "$(grep -c . "$work/err")" -eq 1 ]
printf 'hi\n' >"$work/chat-in.txt"
expect_exit "chat fails when the grammar cannot go on" 1 \
    "recur chat: sampling failed: grammar: no candidate token can continue the grammar here" \
    timeout 20 "$recur" chat -m "$model" -n 8 --grammar 'root ::= "a" []' <"$work/chat-in.txt"

leftovers=$(find "$work" -name '*.tmp-*' | wc -l)
check "no temporary files are left" [ "$leftovers" -eq 0 ]

finish test_cli
