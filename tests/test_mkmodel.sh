#!/usr/bin/env bash
# test_mkmodel: `recur mkmodel` writes models in llama.cpp's GGUF layout. Each file is read back
# by an independent reader (Python's struct module, not recur's), which checks the keys, the
# tokenizer cut from the vocabulary file, the tensors' names, shapes and types, and a few
# weights whose values are fixed by construction (A, dt bias). Flag errors must exit 2 naming
# the flag; runtime errors exit 1.
#   bash tests/test_mkmodel.sh path/to/recur
set -u
bin=${1:?usage: test_mkmodel.sh path/to/recur}
here=$(cd "$(dirname "$0")" && pwd)
vocab=$here/data/ggml-vocab-gpt-2.gguf
# Until the fixture is in tests/data, the shared test data beside the checkout has it.
[ -f "$vocab" ] || vocab=$here/../../shared/testdata/vocab/ggml-vocab-gpt-2.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() {
    echo "FAIL: $*"
    fail=$((fail + 1))
}

# mk NAME ARGS...: writes $tmp/NAME.gguf; the command's status must be 0.
mk() {
    local name=$1
    shift
    if "$bin" mkmodel "$tmp/$name.gguf" --vocab-file "$vocab" "$@" >"$tmp/out" 2>"$tmp/err"; then
        ok
    else
        bad "mkmodel $name $*: exit $?: $(cat "$tmp/err")"
    fi
}

# expect STATUS TEXT ARGS...: `recur ARGS` exits STATUS and stderr contains TEXT.
expect() {
    local want=$1 text=$2
    shift 2
    "$bin" "$@" >"$tmp/out" 2>"$tmp/err"
    local got=$?
    if [ "$got" -ne "$want" ]; then
        bad "recur $*: exit $got, $want expected; stderr: $(head -c 300 "$tmp/err")"
    elif ! grep -qF -- "$text" "$tmp/err"; then
        bad "recur $*: stderr does not name '$text': $(head -c 300 "$tmp/err")"
    else
        ok
    fi
}

base=(--arch mamba --embd 64 --layers 2 --vocab 1000 --state 16 --seed 7)

# ---- models that must be written -----------------------------------------------------------
for t in f32 f16 bf16; do
    mk "$t" "${base[@]}" --type "$t"
    mk "$t-tied" "${base[@]}" --type "$t" --tied
done
mk rms "${base[@]}" --dt-b-c-rms --inner 96 --conv 3 --dt-rank 5 --eps 1e-6
mk full --arch mamba --embd 8 --layers 1 --vocab 50257 --state 4 --seed 1
mk bytes --arch mamba --embd 8 --layers 1 --vocab 256 --state 4 --seed 1
mk eq --arch=mamba --embd=64 --layers=2 --vocab=1000 --state=16 --seed=7
if [ -f "$here/data/ggml-vocab-gpt-2.gguf" ]; then
    # The compiled-in default vocabulary.
    if "$bin" mkmodel "$tmp/default.gguf" "${base[@]}" >/dev/null 2>"$tmp/err" &&
        cmp -s "$tmp/default.gguf" "$tmp/f32.gguf"; then ok; else bad "default --vocab-file"; fi
fi

# ---- determinism -----------------------------------------------------------------------------
mk f32-again "${base[@]}" --type f32
mk seed8 "${base[@]:0:10}" --seed 8
if cmp -s "$tmp/f32.gguf" "$tmp/f32-again.gguf"; then ok; else bad "same seed, different bytes"; fi
if cmp -s "$tmp/f32.gguf" "$tmp/seed8.gguf"; then bad "seeds 7 and 8 give one file"; else ok; fi

# ---- usage errors: exit 2, the flag named, the usage shown -------------------------------------
m=(mkmodel "$tmp/x.gguf")
expect 2 "--embd" "${m[@]}" --arch mamba --layers 2 --vocab 300 --state 4 --seed 1 --embd
expect 2 "--embd" "${m[@]}" --arch mamba --embd abc --layers 2 --vocab 300 --state 4 --seed 1
expect 2 "--embd" "${m[@]}" --arch mamba --embd 12x --layers 2 --vocab 300 --state 4 --seed 1
expect 2 "--layers" "${m[@]}" --arch mamba --embd 8 --layers 0 --vocab 300 --state 4 --seed 1
expect 2 "--state" "${m[@]}" --arch mamba --embd 8 --layers 2 --vocab 300 --state -3 --seed 1
expect 2 "--seed" "${m[@]}" --arch mamba --embd 8 --layers 2 --vocab 300 --state 4 --seed -1
expect 2 "--seed" "${m[@]}" --arch mamba --embd 8 --layers 2 --vocab 300 --state 4
expect 2 "--embd" "${m[@]}" --arch mamba --embd 3000000000 --layers 2 --vocab 300 --state 4 --seed 1
expect 2 "--type" "${m[@]}" "${base[@]}" --type f8
expect 2 "--arch" "${m[@]}" --arch rwkv --embd 8 --layers 2 --vocab 300 --state 4 --seed 1
expect 2 "--inner" "${m[@]}" "${base[@]}" --inner 0
expect 2 "--conv" "${m[@]}" "${base[@]}" --conv -1
expect 2 "--dt-rank" "${m[@]}" "${base[@]}" --dt-rank ""
expect 2 "--eps" "${m[@]}" "${base[@]}" --eps 0
expect 2 "--eps" "${m[@]}" "${base[@]}" --eps fast
expect 2 "--eps" "${m[@]}" "${base[@]}" --eps 1e-60
expect 2 "--tied" "${m[@]}" "${base[@]}" --tied=yes
expect 2 "--bogus" "${m[@]}" "${base[@]}" --bogus
expect 2 "--embd is given twice" "${m[@]}" "${base[@]}" --embd 8
expect 2 "unexpected argument" "${m[@]}" "${base[@]}" other.gguf
expect 2 "no output file" mkmodel "${base[@]}"
expect 2 "usage: recur mkmodel" "${m[@]}" "${base[@]}" --type f8
# A byte-level vocabulary cannot have fewer than 256 tokens, nor more than the file's.
expect 2 "--vocab" "${m[@]}" --arch mamba --embd 8 --layers 1 --vocab 255 --state 4 --seed 1 \
    --vocab-file "$vocab"
expect 2 "--vocab" "${m[@]}" --arch mamba --embd 8 --layers 1 --vocab 50258 --state 4 --seed 1 \
    --vocab-file "$vocab"
[ -e "$tmp/x.gguf" ] && bad "a refused command left $tmp/x.gguf" || ok

# ---- runtime errors: exit 1, one line ----------------------------------------------------------
expect 1 "$tmp/none.gguf" "${m[@]}" "${base[@]}" --vocab-file "$tmp/none.gguf"
echo "not a gguf file" >"$tmp/garbage.gguf"
expect 1 "$tmp/garbage.gguf" "${m[@]}" "${base[@]}" --vocab-file "$tmp/garbage.gguf"
expect 1 "recur mkmodel:" mkmodel "$tmp/no/such/dir/x.gguf" "${base[@]}" --vocab-file "$vocab"
[ "$(wc -l <"$tmp/err")" -eq 1 ] && ok || bad "runtime error is not one line: $(cat "$tmp/err")"

# ---- the program's own commands ----------------------------------------------------------------
if "$bin" mkmodel --help >"$tmp/help" 2>&1; then ok; else bad "mkmodel --help exit status"; fi
for f in --arch --embd --layers --vocab --state --seed --type --tied --inner --conv --dt-rank \
    --dt-b-c-rms --eps --vocab-file; do
    grep -qF -- "$f" "$tmp/help" && ok || bad "mkmodel --help does not list $f"
done
for d in "default f32" "default 2*embd" "default 4" "default ceil(embd/16)" "default 1e-5" \
    "ggml-vocab-gpt-2.gguf"; do
    grep -qF -- "$d" "$tmp/help" && ok || bad "mkmodel --help does not say '$d'"
done
"$bin" --help >/dev/null && ok || bad "recur --help"
"$bin" help mkmodel | grep -qF -- "--dt-b-c-rms" && ok || bad "recur help mkmodel"
"$bin" --version | grep -q "^recur [0-9]" && ok || bad "recur --version"
expect 2 "frobnicate" frobnicate
expect 2 "usage: recur" # no command at all

# ---- the files, read back by an independent reader ---------------------------------------------
# Each argument: NAME TYPE TIED RMS EMBD LAYERS VOCAB STATE INNER CONV RANK EPS SEED.
python3 - "$vocab" "$tmp" \
    "f32 f32 0 0 64 2 1000 16 128 4 4 1e-5 7" "f16 f16 0 0 64 2 1000 16 128 4 4 1e-5 7" \
    "bf16 bf16 0 0 64 2 1000 16 128 4 4 1e-5 7" "f32-tied f32 1 0 64 2 1000 16 128 4 4 1e-5 7" \
    "f16-tied f16 1 0 64 2 1000 16 128 4 4 1e-5 7" \
    "bf16-tied bf16 1 0 64 2 1000 16 128 4 4 1e-5 7" \
    "rms f32 0 1 64 2 1000 16 96 3 5 1e-6 7" "full f32 0 0 8 1 50257 4 16 4 1 1e-5 1" \
    "bytes f32 0 0 8 1 256 4 16 4 1 1e-5 1" "eq f32 0 0 64 2 1000 16 128 4 4 1e-5 7" \
    <<'EOF' >"$tmp/py" 2>&1
import math, struct, sys

def read_gguf(path):
    """Minimal GGUF v3 reader: (kv dict, {name: (dims, type, offset)}, data start, bytes)."""
    b = open(path, "rb").read()
    p = 0
    def take(fmt):
        nonlocal p
        v = struct.unpack_from("<" + fmt, b, p)
        p += struct.calcsize("<" + fmt)
        return v[0]
    def string():
        nonlocal p
        n = take("Q")
        p += n
        return b[p - n:p].decode("utf-8")
    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q",
              11: "q", 12: "d"}
    def raw(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return (et, [raw(et) for _ in range(n)])
        return take(scalar[t])
    def value(t):  # strings and arrays as they are, other scalars with their type
        return raw(t) if t in (8, 9) else (t, raw(t))
    assert take("I") == 0x46554747 and take("I") == 3, "magic or version"
    n_tensors, n_kv = take("Q"), take("Q")
    kv = {}
    for _ in range(n_kv):
        k = string()
        kv[k] = value(take("I"))
    tensors = {}
    for _ in range(n_tensors):
        name = string()
        dims = tuple(take("Q") for _ in range(take("I")))
        tensors[name] = (dims, take("I"), take("Q"))
    data = (p + 31) // 32 * 32
    return kv, tensors, data, b

def floats(t, n, buf, off):
    if t == 0:
        return struct.unpack_from("<%df" % n, buf, off)
    if t == 1:
        return struct.unpack_from("<%de" % n, buf, off)
    hs = struct.unpack_from("<%dH" % n, buf, off)
    return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in hs]

passed = failed = 0
def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)

vkv, _, _, _ = read_gguf(sys.argv[1])
vtokens, vtypes, vmerges = (vkv["tokenizer.ggml." + k][1]
                             for k in ("tokens", "token_type", "merges"))
# The property the cut relies on (GPT-2's file): 256 byte tokens, then merge j makes token
# 256 + j from two earlier tokens, so the first N tokens go with the first N - 256 merges.
ids = {t: i for i, t in enumerate(vtokens)}
check(all(ids["".join(m.split(" ", 1))] == 256 + j for j, m in enumerate(vmerges)),
      "vocab: merge j makes token 256 + j")
check(all(ids[h] < 256 + j for j, m in enumerate(vmerges) for h in m.split(" ", 1)),
      "vocab: merges join earlier tokens")

F32, F16, BF16 = 0, 1, 30
ttype = {"f32": F32, "f16": F16, "bf16": BF16}
ftype = {"f32": 0, "f16": 1, "bf16": 32}
models = {}
for spec in sys.argv[3:]:
    name, t, tied, rms, embd, layers, vocab, state, inner, conv, rank, eps, seed = spec.split()
    tied, rms = tied == "1", rms == "1"
    embd, layers, vocab, state, inner, conv, rank = map(
        int, (embd, layers, vocab, state, inner, conv, rank))
    path = "%s/%s.gguf" % (sys.argv[2], name)
    kv, tensors, data, buf = read_gguf(path)
    models[name] = (kv, tensors, data, buf)
    U32, F, BOOL, STR = 4, 6, 7, 8
    want = {
        "general.architecture": "mamba", "general.file_type": (U32, ftype[t]),
        "mamba.context_length": (U32, 1048576), "mamba.embedding_length": (U32, embd),
        "mamba.feed_forward_length": (U32, 0), "mamba.attention.head_count": (U32, 0),
        "mamba.block_count": (U32, layers), "mamba.ssm.conv_kernel": (U32, conv),
        "mamba.ssm.inner_size": (U32, inner), "mamba.ssm.state_size": (U32, state),
        "mamba.ssm.time_step_rank": (U32, rank),
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2",
    }
    if rms:
        want["mamba.ssm.dt_b_c_rms"] = (BOOL, True)
    for k, v in want.items():
        check(kv.get(k) == v, "%s: %s = %r, %r expected" % (name, k, kv.get(k), v))
    check("general.alignment" not in kv, name + ": general.alignment is set")
    check("mamba.ssm.dt_b_c_rms" in kv or not rms, name + ": dt_b_c_rms")
    e = kv.get("mamba.attention.layer_norm_rms_epsilon")
    check(e is not None and e[0] == F and abs(e[1] - float(eps)) <= 1e-6 * float(eps),
          "%s: epsilon %r" % (name, e))
    check(isinstance(kv.get("general.name"), str), name + ": general.name")
    expected_keys = set(want) | {"general.name", "mamba.attention.layer_norm_rms_epsilon",
        "tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges",
        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"}
    check(set(kv) == expected_keys, "%s: keys %s" % (name, sorted(set(kv) ^ expected_keys)))

    # Tokenizer: the first N tokens and types, bos/eos valid; when the file's (50256) does not
    # fit, the last kept token is a control token and the merge that made it is gone.
    tokens, types, merges = (kv["tokenizer.ggml." + k] for k in ("tokens", "token_type", "merges"))
    check(tokens == (STR, vtokens[:vocab]), name + ": tokens are the file's first N")
    bos, eos = kv["tokenizer.ggml.bos_token_id"], kv["tokenizer.ggml.eos_token_id"]
    check(types[0] == 5 and types[1][:vocab - 1] == vtypes[:vocab - 1], name + ": token types")
    if vocab == len(vtokens):
        check(bos == eos == (U32, 50256) and types[1][-1] == 3, name + ": bos/eos kept")
        check(merges == (STR, vmerges), name + ": all merges kept")
    elif vocab == 256:
        check(bos == eos == (U32, 255) and types[1] == [1] * 256, name + ": bos/eos on a byte")
        check(merges == (STR, []), name + ": no merges")
    else:
        check(bos == eos == (U32, vocab - 1) and types[1][-1] == 3, name + ": bos/eos control")
        check(merges == (STR, vmerges[:vocab - 257]), name + ": merges are the file's first N-257")

    # Tensors: names, shapes (fastest first), types, aligned offsets inside the file.
    wt = ttype[t]
    shapes = {"token_embd.weight": ((embd, vocab), wt), "output_norm.weight": ((embd,), F32)}
    if not tied:
        shapes["output.weight"] = ((embd, vocab), wt)
    for l in range(layers):
        for n, s, ty in (("attn_norm.weight", (embd,), F32),
                         ("ssm_in.weight", (embd, 2 * inner), wt),
                         ("ssm_conv1d.weight", (conv, inner), F32),
                         ("ssm_conv1d.bias", (inner,), F32),
                         ("ssm_x.weight", (inner, rank + 2 * state), wt),
                         ("ssm_dt.weight", (rank, inner), wt),
                         ("ssm_dt.bias", (inner,), F32), ("ssm_a", (state, inner), F32),
                         ("ssm_d", (inner,), F32), ("ssm_out.weight", (inner, embd), wt)):
            shapes["blk.%d.%s" % (l, n)] = (s, ty)
    check(set(tensors) == set(shapes),
          "%s: tensors %s" % (name, sorted(set(tensors) ^ set(shapes))))
    size = {F32: 4, F16: 2, BF16: 2}
    end = 0
    for n, (dims, ty, off) in tensors.items():
        if n in shapes:
            check((dims, ty) == shapes[n],
                  "%s: %s is %r %d, %r expected" % (name, n, dims, ty, shapes[n]))
        check(off % 32 == 0, "%s: %s offset %d not aligned" % (name, n, off))
        end = max(end, off + math.prod(dims) * size[ty])
    check(data + end <= len(buf), name + ": tensor data runs past the end of the file")

    def get(n):
        dims, ty, off = tensors[n]
        return floats(ty, math.prod(dims), buf, data + off)
    a = get("blk.0.ssm_a")
    check(all(a[c * state + k] == -(k + 1) for c in range(inner) for k in range(state)),
          name + ": A[c][n] = -(n + 1)")
    sp = [math.log1p(math.exp(x)) for x in get("blk.0.ssm_dt.bias")]
    check(all(0.99e-3 <= v <= 1.01e-1 for v in sp),
          name + ": softplus(dt bias) outside [1e-3, 1e-1]")
    norm = get("blk.0.attn_norm.weight")
    check(len(set(norm)) > 1 and abs(sum(norm) / len(norm) - 1) < 0.1,
          name + ": norm near 1, not all 1")
    w = get("blk.0.ssm_in.weight")
    std = math.sqrt(sum(x * x for x in w) / len(w))
    check(abs(std * math.sqrt(embd) - 1) < 4 / math.sqrt(2 * len(w)),
          "%s: ssm_in std %g, 1/sqrt(embd) expected" % (name, std))

# The f16 and bf16 models of a seed are the f32 model rounded; tying only drops output.weight.
f32 = models["f32"]
def vals(m, n):
    kv, tensors, data, buf = m
    dims, ty, off = tensors[n]
    return floats(ty, math.prod(dims), buf, data + off)
for other, rel in (("f16", 2 ** -10), ("bf16", 2 ** -7), ("f32-tied", 0)):
    for n in ("token_embd.weight", "blk.1.ssm_out.weight", "blk.1.ssm_d"):
        x, y = vals(f32, n), vals(models[other], n)
        check(all(abs(p - q) <= rel * abs(p) + 1e-7 for p, q in zip(x, y)),
              "%s: %s is not the f32 model rounded" % (other, n))
check(models["eq"][3] == f32[3], "--flag=value gives the same file")
print("python: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
EOF
status=$?
py=$(grep -o 'python: [0-9]* passed, [0-9]* failed' "$tmp/py")
if [ -n "$py" ]; then
    set -- $py
    pass=$((pass + $2))
    fail=$((fail + $4))
fi
[ -n "$py" ] || bad "python reader did not finish (exit $status)"
grep -v '^python:' "$tmp/py"

echo "test_mkmodel: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
