#!/usr/bin/env bash
# test_mkmodel: `recur mkmodel` writes models in llama.cpp's GGUF layout. Each file is read back
# by an independent reader (Python's struct module, not recur's), which checks the keys, the
# tokenizer cut from the vocabulary file, the tensors' names, shapes and types, and a few
# weights whose values are fixed by construction (A, dt bias). RWKV-6/7 files are read with
# tests/ref/gguf_reader.py: keys, tensors, the world vocabulary against Python's own
# repr(bytes), rounding, and `recur quantize` on them; granitehybrid files likewise: the keys
# a real Granite-4.0-H GGUF carries, head_count_kv 0 at the Mamba-2 layers, the tensors of
# llama.cpp's loader. Flag errors must exit 2 naming the flag;
# runtime errors exit 1.
#   bash tests/cli/test_mkmodel.sh path/to/recur
set -u
bin=${1:?usage: test_mkmodel.sh path/to/recur}
here=$(cd "$(dirname "$0")" && pwd)
vocab=$here/../data/ggml-vocab-gpt-2.gguf
# Until the fixture is in tests/data, the shared test data beside the checkout has it.
[ -f "$vocab" ] || vocab=$here/../../../shared/testdata/vocab/ggml-vocab-gpt-2.gguf
# shellcheck source=../lib/check.sh
. "$here/../lib/check.sh"
tmp=$work
# the vocabulary of commands that name none (mkmodel has no default compiled in)
export RECUR_VOCAB_FILE=$vocab

ok() { passed=$((passed + 1)); }
bad() {
    echo "FAIL: $*"
    failed=$((failed + 1))
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
# Without --vocab-file: $RECUR_VOCAB_FILE's vocabulary, and without either a usage error.
if "$bin" mkmodel "$tmp/default.gguf" "${base[@]}" >/dev/null 2>"$tmp/err" &&
    cmp -s "$tmp/default.gguf" "$tmp/f32.gguf"; then ok; else bad "RECUR_VOCAB_FILE as --vocab-file"; fi
(unset RECUR_VOCAB_FILE; "$bin" mkmodel "$tmp/novocab.gguf" "${base[@]}" >/dev/null 2>"$tmp/err")
rc=$?
[ "$rc" -eq 2 ] && ok || bad "no vocabulary: exit $rc, not 2"
grep -qF -- "give the vocabulary with --vocab-file" "$tmp/err" && ok || bad "no vocabulary: $(cat "$tmp/err")"
[ -e "$tmp/novocab.gguf" ] && bad "no vocabulary: a file was written" || ok

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
# --chat-template: a missing file is refused (no file left behind); a NUL byte is refused
expect 1 "--chat-template: $tmp/none.jinja" "${m[@]}" "${base[@]}" --chat-template "$tmp/none.jinja"
[ -e "$tmp/x.gguf" ] && bad "a refused --chat-template left $tmp/x.gguf" || ok
printf 'a\0b' >"$tmp/nul.jinja"
expect 1 "NUL byte" "${m[@]}" "${base[@]}" --chat-template "$tmp/nul.jinja"
# the key is written (and replaces the vocabulary file's, rwkv's "rwkv-world" too): test_chat
# reads it back through the library
printf '{{ "<|im_start|>" }}' >"$tmp/t.jinja"
mk tmpl "${base[@]}" --chat-template "$tmp/t.jinja"
grep -qaF '{{ "<|im_start|>" }}' "$tmp/tmpl.gguf" && ok || bad "--chat-template: the text is not in the file"
mk rwkv-tmpl --arch rwkv6 --embd 64 --layers 1 --vocab 300 --seed 1 --chat-template "$tmp/t.jinja"
grep -qaF 'rwkv-world' "$tmp/rwkv-tmpl.gguf" && bad "--chat-template: rwkv kept rwkv-world" || ok
# --fim PRE,SUF,MID[,REP,SEP]: the fim_*_token_id keys are written (test_fim reads them back
# through the library); ids past --vocab and anything but three ids are usage errors
mk fim "${base[@]}" --fim 997,998,999
for k in fim_pre_token_id fim_suf_token_id fim_mid_token_id; do
    grep -qaF "tokenizer.ggml.$k" "$tmp/fim.gguf" && ok || bad "--fim: $k is not in the file"
done
grep -qaF "fim_pre_token_id" "$tmp/f32.gguf" && bad "a model without --fim has FIM keys" || ok
expect 2 "--fim: token id 1000 is not below --vocab 1000" "${m[@]}" "${base[@]}" --fim 1,2,1000
grep -qaF "fim_rep_token_id" "$tmp/fim.gguf" && bad "--fim with three ids wrote fim_rep" || ok
mk fim5 "${base[@]}" --fim 995,996,997,998,999
for k in fim_rep_token_id fim_sep_token_id; do
    grep -qaF "tokenizer.ggml.$k" "$tmp/fim5.gguf" && ok || bad "--fim: $k is not in the file"
done
for bad_ids in 1,2 1,2,3,4 1,2,3,4,5,6 1,-2,3 1,,3 1,2,3,; do
    expect 2 "--fim: '$bad_ids' is not three or five token ids" "${m[@]}" "${base[@]}" \
        --fim "$bad_ids"
done
[ -e "$tmp/x.gguf" ] && bad "a refused --fim left $tmp/x.gguf" || ok


# ---- the program's own commands ----------------------------------------------------------------
if "$bin" mkmodel --help >"$tmp/help" 2>&1; then ok; else bad "mkmodel --help exit status"; fi
for f in --arch --embd --layers --vocab --state --seed --type --tied --inner --conv --dt-rank \
    --dt-b-c-rms --eps --vocab-file --fim; do
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
    passed=$((passed + $2))
    failed=$((failed + $4))
    # a non-zero exit that no failed check explains (a crash after the closing line)
    [ "$status" -eq 0 ] || [ "$4" -gt 0 ] || bad "python reader: exit $status after '$py'"
else
    bad "python reader did not finish (exit $status)"
fi
grep -v '^python:' "$tmp/py"

# ---- RWKV-6 and RWKV-7 ------------------------------------------------------------------------
# Read back with tests/ref/gguf_reader.py; the expected keys, tensors (docs/rwkv6.md and
# docs/rwkv7.md section 2, llama.cpp's converter) and world vocabulary are listed below,
# independently of mk_rwkv.c and mk_vocab.c.
r6=(--arch rwkv6 --embd 64 --layers 3 --vocab 1000 --seed 7 --head-size 16)
r7=(--arch rwkv7 --embd 64 --layers 3 --vocab 1000 --seed 7 --head-size 16)
mk r6 "${r6[@]}"
mk r6-f16 "${r6[@]}" --type f16
mk r6-bf16 "${r6[@]}" --type bf16
mk r6-again "${r6[@]}"
mk r6-resc "${r6[@]}" --rescale 2
mk r6-opts --arch rwkv6 --embd 32 --layers 2 --vocab 300 --seed 3 --head-size 8 --ff 40 \
    --rescale 1 --mix-dim 4 --decay-dim 8 --eps 1e-6 --type f16
mk r6-full --arch rwkv6 --embd 8 --layers 1 --vocab 50257 --seed 1 --head-size 8 --ff 16
mk r6-defaults --arch rwkv6 --embd 256 --layers 1 --vocab 257 --seed 1
mk r7 "${r7[@]}"
mk r7-f16 "${r7[@]}" --type f16
mk r7-opts --arch rwkv7 --embd 32 --layers 2 --vocab 300 --seed 3 --head-size 8 --ff 40 \
    --lora-w 4 --lora-a 6 --lora-v 5 --lora-g 8
mk r7-defaults --arch rwkv7 --embd 256 --layers 2 --vocab 257 --seed 1
if cmp -s "$tmp/r6.gguf" "$tmp/r6-again.gguf"; then ok; else bad "rwkv6: same seed, different bytes"; fi
mk r6-seed8 "${r6[@]:0:8}" --seed 8 --head-size 16
if cmp -s "$tmp/r6.gguf" "$tmp/r6-seed8.gguf"; then bad "rwkv6: seeds 7 and 8 give one file"; else ok; fi

# quantize: only the big 2-D matrices, whole 32-value rows (r7-opts' channel_mix_value rows
# are 40 long and stay f32); the Python below checks each tensor.
for src in r6 r7 r7-opts; do
    if "$bin" quantize "$tmp/$src.gguf" "$tmp/$src-q8_0.gguf" q8_0 2>"$tmp/err"; then ok; else
        bad "quantize $src: $(cat "$tmp/err")"
    fi
done
# Per layer: rwkv6 r, k, v, g, o and the three channel-mix matrices; rwkv7 r, k, v, o and two.
"$bin" quantize "$tmp/r6.gguf" "$tmp/r6-q.gguf" q8_0 2>"$tmp/err"
grep -qF ": 26 of 78 tensors in q8_0" "$tmp/err" && ok || bad "quantize r6: $(cat "$tmp/err")"
"$bin" quantize "$tmp/r7-f16.gguf" "$tmp/r7-f16-q4_0.gguf" q4_0 2>"$tmp/err"
grep -qF ": 20 of 90 tensors in q4_0" "$tmp/err" && ok || bad "quantize r7-f16: $(cat "$tmp/err")"

m=(mkmodel "$tmp/x.gguf")
v6=(--arch rwkv6 --embd 64 --layers 2 --vocab 300 --seed 1 --head-size 16)
v7=(--arch rwkv7 --embd 64 --layers 2 --vocab 300 --seed 1 --head-size 16)
expect 2 "--state is for --arch mamba" "${m[@]}" "${v6[@]}" --state 4
expect 2 "--tied" "${m[@]}" "${v7[@]}" --tied
expect 2 "--inner is for --arch mamba" "${m[@]}" "${v6[@]}" --inner 32
expect 2 "--dt-b-c-rms is for --arch mamba" "${m[@]}" "${v7[@]}" --dt-b-c-rms
expect 2 "--heads is for --arch mamba" "${m[@]}" "${v7[@]}" --heads 2
expect 2 "--head-size is for --arch rwkv6 and rwkv7" "${m[@]}" "${base[@]}" --head-size 8
expect 2 "--ff is for --arch rwkv6 and rwkv7" "${m[@]}" "${base[@]}" --ff 8
expect 2 "--lora-g is for --arch rwkv6 and rwkv7" "${m[@]}" "${base[@]}" --lora-g 8
expect 2 "--rescale is for --arch rwkv6, not rwkv7" "${m[@]}" "${v7[@]}" --rescale 2
expect 2 "--mix-dim is for --arch rwkv6, not rwkv7" "${m[@]}" "${v7[@]}" --mix-dim 2
expect 2 "--lora-a is for --arch rwkv7, not rwkv6" "${m[@]}" "${v6[@]}" --lora-a 2
expect 2 "--head-size 64 (the default) does not divide --embd 48" "${m[@]}" --arch rwkv7 \
    --embd 48 --layers 1 --vocab 300 --seed 1
expect 2 "--head-size 5 does not divide" "${m[@]}" "${v6[@]:0:10}" --head-size 5
expect 2 "--head-size" "${m[@]}" "${v6[@]:0:10}" --head-size 0
expect 2 "--ff: the default int(embd*3.5)//32*32 is 0" "${m[@]}" --arch rwkv6 --embd 8 \
    --layers 1 --vocab 300 --seed 1 --head-size 8
expect 2 "--ff" "${m[@]}" "${v7[@]}" --ff 0
expect 2 "--lora-w" "${m[@]}" "${v7[@]}" --lora-w 0
expect 2 "--decay-dim" "${m[@]}" "${v6[@]}" --decay-dim -1
expect 2 "--rescale" "${m[@]}" "${v6[@]}" --rescale x
expect 2 "--vocab: 256 is too small" "${m[@]}" "${v6[@]:0:6}" --vocab 256 --seed 1 --head-size 16 \
    --vocab-file "$vocab"
expect 2 "--vocab: 50258 is more than the 50257 tokens" "${m[@]}" "${v7[@]:0:6}" --vocab 50258 \
    --seed 1 --head-size 16 --vocab-file "$vocab"
expect 1 "$tmp/none.gguf" "${m[@]}" "${v6[@]}" --vocab-file "$tmp/none.gguf"
[ -e "$tmp/x.gguf" ] && bad "a refused rwkv command left $tmp/x.gguf" || ok
for f in --head-size --ff --rescale --mix-dim --decay-dim --lora-w --lora-a --lora-v --lora-g \
    rwkv6 rwkv7; do
    grep -qF -- "$f" "$tmp/help" && ok || bad "mkmodel --help does not list $f"
done

# gguf_reader.py needs numpy, which Debian's /usr/bin/python3 has when a pyenv one does not;
# scripts/setup.sh installs python3-numpy, so without it the RWKV checks fail rather than pass
# unrun.
pyn=python3
python3 -c "import numpy" 2>/dev/null || pyn=/usr/bin/python3
if ! "$pyn" -c "import numpy" 2>/dev/null; then
    bad "the RWKV file checks need python3 with numpy (Debian: python3-numpy; scripts/setup.sh installs it)"
else
    # NAME ARCH TYPE EMBD LAYERS VOCAB HEAD_SIZE FF EPS, then rwkv6: RESCALE D_MIX D_DEC,
    # rwkv7: R_W R_A R_V R_G ("-": the converter's default, computed below).
    "$pyn" - "$here/../ref" "$vocab" "$tmp" \
        "r6 rwkv6 f32 64 3 1000 16 - 1e-5 0 - -" "r6-f16 rwkv6 f16 64 3 1000 16 - 1e-5 0 - -" \
        "r6-bf16 rwkv6 bf16 64 3 1000 16 - 1e-5 0 - -" \
        "r6-resc rwkv6 f32 64 3 1000 16 - 1e-5 2 - -" \
        "r6-opts rwkv6 f16 32 2 300 8 40 1e-6 1 4 8" "r6-full rwkv6 f32 8 1 50257 8 16 1e-5 0 - -" \
        "r6-defaults rwkv6 f32 256 1 257 64 - 1e-5 0 - -" \
        "r7 rwkv7 f32 64 3 1000 16 - 1e-5 - - - -" "r7-f16 rwkv7 f16 64 3 1000 16 - 1e-5 - - - -" \
        "r7-opts rwkv7 f32 32 2 300 8 40 1e-5 4 6 5 8" \
        "r7-defaults rwkv7 f32 256 2 257 64 - 1e-5 - - - -" \
        <<'EOF' >"$tmp/py" 2>&1
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from gguf_reader import GGUFFile

passed = failed = 0
def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)

U32, F32KEY, STR, ARR = 4, 6, 8, 9
F32, F16, BF16, Q8_0, Q4_0 = 0, 1, 30, 8, 2
ttype = {"f32": F32, "f16": F16, "bf16": BF16}
ftype = {"f32": 0, "f16": 1, "bf16": 32}

# The world vocabulary expected from the gpt2 file: <s>, the 256 bytes, then the file's
# normal multi-byte tokens decoded from GPT-2's byte-to-unicode text, in order, once each.
def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xa1, 0xac + 1)) + \
        list(range(0xae, 0xff + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))
unbyte = {c: b for b, c in bytes_to_unicode().items()}
gv = GGUFFile(sys.argv[2])
world = [b"<s>"] + [bytes([b]) for b in range(256)]
seen = set(world)
for text, ty in zip(gv.kv["tokenizer.ggml.tokens"], gv.kv["tokenizer.ggml.token_type"]):
    if ty != 1:
        continue
    raw = bytes(unbyte[c] for c in text)
    if len(raw) > 1 and raw not in seen:
        seen.add(raw)
        world.append(raw)
check(len(world) == 50257, "the gpt2 file gives %d world tokens, 50257 expected" % len(world))

def unescape(s):
    """llama.cpp's llama_unescape_rwkv_token (docs/rwkv6.md section 6)."""
    out, i = bytearray(), 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n == "x" and i + 3 < len(s):
                out.append(int(s[i + 2:i + 4], 16))
                i += 4
                continue
            out += {"t": b"\t", "n": b"\n", "r": b"\r"}.get(n, n.encode())
            i += 2
            continue
        out += c.encode()
        i += 1
    return bytes(out)

def lora_rank(e, exp, mult):  # the converter's calc_lora_rank
    return max(1, round(e ** exp * mult / 32)) * 32

models = {}
for spec in sys.argv[4:]:
    f = spec.split()
    name, arch, t = f[0], f[1], f[2]
    E, L, V, hs = map(int, f[3:7])
    v6 = arch == "rwkv6"
    ff = int(f[7]) if f[7] != "-" else (int((E * 3.5) // 32 * 32) if v6 else 4 * E)
    eps = float(f[8])
    extra = [None if x == "-" else int(x) for x in f[9:]]
    g = GGUFFile("%s/%s.gguf" % (sys.argv[3], name))
    models[name] = g
    kv, ty = g.kv, g.kv_types
    A = arch + "."
    want = {
        "general.architecture": (STR, arch), "general.file_type": (U32, ftype[t]),
        A + "context_length": (U32, 1048576), A + "embedding_length": (U32, E),
        A + "block_count": (U32, L), A + "feed_forward_length": (U32, ff),
        A + "attention.head_count": (U32, 0), A + "wkv.head_size": (U32, hs),
        "tokenizer.ggml.model": (STR, "rwkv"), "tokenizer.ggml.bos_token_id": (U32, 0),
        "tokenizer.ggml.eos_token_id": (U32, 0), "tokenizer.chat_template": (STR, "rwkv-world"),
    }
    if v6:
        rescale, dmix, ddec = extra
        dmix = dmix or (64 if E == 4096 else 32)
        ddec = ddec or (128 if E == 4096 else 64)
        want[A + "rescale_every_n_layers"] = (U32, rescale)
        want[A + "time_mix_extra_dim"] = (U32, dmix)
        want[A + "time_decay_extra_dim"] = (U32, ddec)
    else:
        rw, ra, rv, rg = extra
        rw = rw or lora_rank(E, 0.5, 1.8)
        ra = ra or lora_rank(E, 0.5, 1.8)
        rv = rv or lora_rank(E, 0.5, 1.3)
        rg = rg or lora_rank(E, 0.8, 0.6)
        want[A + "attention.decay_lora_rank"] = (U32, rw)
        want[A + "attention.iclr_lora_rank"] = (U32, ra)
        want[A + "attention.value_residual_mix_lora_rank"] = (U32, rv)
        want[A + "attention.gate_lora_rank"] = (U32, rg)
    for k, v in want.items():
        check((ty.get(k), kv.get(k)) == v,
              "%s: %s = %r (type %r), %r expected" % (name, k, kv.get(k), ty.get(k), v))
    e = kv.get(A + "attention.layer_norm_epsilon")
    check(ty.get(A + "attention.layer_norm_epsilon") == F32KEY and e == np.float32(eps),
          "%s: layer_norm_epsilon %r" % (name, e))
    check(ty.get("general.name") == STR, name + ": general.name")
    keys = set(want) | {"general.name", A + "attention.layer_norm_epsilon",
                        "tokenizer.ggml.tokens", "tokenizer.ggml.token_type"}
    check(set(kv) == keys, "%s: keys %s" % (name, sorted(set(kv) ^ keys)))

    # Vocabulary: each text is Python's own repr(bytes)[2:-1] of the expected bytes.
    tokens, types = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.token_type"]
    expect = ["<s>"] + [repr(b)[2:-1] for b in world[1:V]]
    check(ty["tokenizer.ggml.tokens"] == ARR and len(tokens) == V, name + ": token count")
    check(tokens == expect, "%s: tokens differ first at %s" % (name, next(
        (i for i, (a, b) in enumerate(zip(tokens, expect)) if a != b), None)))
    check(list(types) == [3] + [1] * (V - 1), name + ": token types CONTROL, then NORMAL")
    check(tokens[:257] == ["<s>"] + [repr(bytes([b]))[2:-1] for b in range(256)],
          name + ": ids 0..256 are <s> and the bytes")
    check([tokens[i] for i in (1, 10, 11, 14, 0x22 + 1, 0x27 + 1, 0x41 + 1, 0x5c + 1, 0x80 + 1,
                               0xff + 1)] ==
          ["\\x00", "\\t", "\\n", "\\r", '"', "'", "A", "\\\\", "\\x80", "\\xff"],
          name + ": byte token texts")
    check(all(unescape(s) == b for s, b in zip(tokens[1:], world[1:V])),
          name + ": llama.cpp's unescape gives the bytes back")
    if V == 50257:
        check(sum(1 for s in tokens if "'" in s and "\\'" not in s) > 10 and
              any("\\'" in s for s in tokens) == any(b"'" in b and b'"' in b for b in world),
              name + ": repr's quote choice")

    # Tensors: name -> (GGUF shape, dtype); W = the --type of the big matrices.
    W = ttype[t]
    shapes = {"token_embd.weight": ((E, V), W), "output.weight": ((E, V), W)}
    for n in ("token_embd_norm", "output_norm"):
        shapes[n + ".weight"] = shapes[n + ".bias"] = ((E,), F32)
    for l in range(L):
        b = "blk.%d." % l
        layer = {"attn_norm.weight": ((E,), F32), "attn_norm.bias": ((E,), F32),
                 "attn_norm_2.weight": ((E,), F32), "attn_norm_2.bias": ((E,), F32),
                 "time_mix_ln.weight": ((E,), F32), "time_mix_ln.bias": ((E,), F32),
                 "time_mix_receptance.weight": ((E, E), W), "time_mix_key.weight": ((E, E), W),
                 "time_mix_value.weight": ((E, E), W), "time_mix_output.weight": ((E, E), W),
                 "channel_mix_lerp_k.weight": ((E,), F32),
                 "channel_mix_key.weight": ((E, ff), W), "channel_mix_value.weight": ((ff, E), W)}
        if v6:
            layer.update({
                "time_mix_lerp_x.weight": ((E,), F32),
                "time_mix_lerp_fused.weight": ((E, 1, 1, 5), F32),
                "time_mix_w1.weight": ((E, 5 * dmix), F32),
                "time_mix_w2.weight": ((dmix, E, 5), F32),
                "time_mix_decay.weight": ((E,), F32),
                "time_mix_decay_w1.weight": ((E, ddec), F32),
                "time_mix_decay_w2.weight": ((ddec, E), F32),
                "time_mix_first.weight": ((hs, E // hs), F32),
                "time_mix_gate.weight": ((E, E), W),
                "channel_mix_lerp_r.weight": ((E,), F32),
                "channel_mix_receptance.weight": ((E, E), W)})
        else:
            rvl = ra if l == 0 else rv
            layer.update({
                "time_mix_lerp_fused.weight": ((E, 1, 1, 6), F32),
                "time_mix_w0.weight": ((E,), F32), "time_mix_w1.weight": ((E, rw), F32),
                "time_mix_w2.weight": ((rw, E), F32),
                "time_mix_a0.weight": ((E,), F32), "time_mix_a1.weight": ((E, ra), W),
                "time_mix_a2.weight": ((ra, E), W),
                "time_mix_v0.weight": ((E,), F32), "time_mix_v1.weight": ((E, rvl), W),
                "time_mix_v2.weight": ((rvl, E), W),
                "time_mix_g1.weight": ((E, rg), W), "time_mix_g2.weight": ((rg, E), W),
                "time_mix_k_k.weight": ((E,), F32), "time_mix_k_a.weight": ((E,), F32),
                "time_mix_r_k.weight": ((E,), F32)})
        for n, s in layer.items():
            shapes[b + n] = s
    check(set(g.tensors) == set(shapes),
          "%s: tensors %s" % (name, sorted(set(g.tensors) ^ set(shapes))))
    for n, info in g.tensors.items():
        if n in shapes:
            check((tuple(info.ne), info.ggml_type) == shapes[n], "%s: %s is %r %d, %r expected"
                  % (name, n, info.ne, info.ggml_type, shapes[n]))
        check(info.offset % 32 == 0, "%s: %s offset %d" % (name, n, info.offset))

    # Values: the ranges the initialisation promises.
    T = g.tensor
    for l in range(L):
        b = "blk.%d." % l
        lerps = ["time_mix_lerp_fused.weight", "channel_mix_lerp_k.weight"] + \
            (["time_mix_lerp_x.weight", "channel_mix_lerp_r.weight"] if v6 else [])
        check(all(0 <= T(b + n).min() and T(b + n).max() < 1 and T(b + n).std() > 0.1
                  for n in lerps), "%s: %s lerps in [0, 1)" % (name, b))
        nw = T(b + "attn_norm.weight")
        check(abs(nw.mean() - 1) < 0.1 and nw.std() > 0.02, "%s: %s norm near 1" % (name, b))
        check(abs(T(b + "attn_norm.bias")).max() > 0.01, "%s: %s norm bias shows" % (name, b))
        if v6:
            d = T(b + "time_mix_decay.weight")
            check(-5 <= d.min() and d.max() < 0.2, "%s: %s decay in [-5, 0.2)" % (name, b))
        else:
            w0 = T(b + "time_mix_w0.weight")
            check(-3 <= w0.min() and w0.max() < 1, "%s: %s w0 in [-3, 1)" % (name, b))
            raw = lambda n: bytes(g.data[g.data_start + g.tensors[n].offset:][
                :g.tensors[n].n_bytes()])
            same = all(raw(b + "time_mix_v%d.weight" % i) == raw(b + "time_mix_a%d.weight" % i)
                       for i in range(3))
            check(same == (l == 0), "%s: %s v0/v1/v2 %s a0/a1/a2" % (
                name, b, "are not copies of" if l == 0 else "equal"))
    r = T("blk.0.time_mix_receptance.weight")
    check(abs(r.std() * np.sqrt(E) - 1) < 0.2, "%s: receptance std %g" % (name, r.std()))

# The f16 and bf16 files are the f32 one rounded (to nearest even); F32 tensors are equal.
def bf16_round(x):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7fff + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)
for base, other, rnd in (("r6", "r6-f16", lambda x: x.astype(np.float16)),
                         ("r6", "r6-bf16", bf16_round), ("r7", "r7-f16",
                                                        lambda x: x.astype(np.float16))):
    a, o = models[base], models[other]
    for n, info in a.tensors.items():
        x, y = a.tensor(n), o.tensor(n)
        if o.tensors[n].ggml_type != F32:
            x = rnd(x).astype(np.float64)
        check(np.array_equal(x, y), "%s: %s is not %s's rounded" % (other, n, base))
# --rescale changes only the key.
a, o = models["r6"], models["r6-resc"]
check(all(np.array_equal(a.tensor(n), o.tensor(n)) for n in a.tensors),
      "--rescale changed a tensor")

# quantize: q8_0 / q4_0 exactly where llama-quantize would quantize and rows are whole blocks.
small = ("time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight",
         "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight",
         "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight",
         "time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight",
         "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight")
for src, q, qt in (("r6", "r6-q8_0", Q8_0), ("r7", "r7-q8_0", Q8_0),
                   ("r7-opts", "r7-opts-q8_0", Q8_0), ("r7-f16", "r7-f16-q4_0", Q4_0)):
    a = models[src]
    o = GGUFFile("%s/%s.gguf" % (sys.argv[3], q))
    check(set(o.tensors) == set(a.tensors), q + ": tensor names")
    n_q = 0
    for n, info in a.tensors.items():
        conv = (len(info.ne) == 2 and n.endswith("weight") and "_norm.weight" not in n and
                not any(s in n for s in small) and info.ne[0] % 32 == 0)
        n_q += conv
        got = o.tensors[n]
        check(got.ggml_type == (qt if conv else info.ggml_type) and got.ne == info.ne,
              "%s: %s is type %d" % (q, n, got.ggml_type))
        if conv:
            x, y = a.tensor(n), o.tensor(n)
            check(np.abs(x - y).max() <= (0.02 if qt == Q8_0 else 0.2) * np.abs(x).max(),
                  "%s: %s far from its source" % (q, n))
        else:
            check(np.array_equal(a.tensor(n), o.tensor(n)), "%s: %s changed" % (q, n))
    check(n_q > 0 and o.kv["general.file_type"] == (7 if qt == Q8_0 else 2),
          "%s: %d converted, file_type %r" % (q, n_q, o.kv["general.file_type"]))
    check(o.kv["tokenizer.ggml.tokens"] == a.kv["tokenizer.ggml.tokens"], q + ": vocabulary")
print("python: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
EOF
    status=$?
    py=$(grep -o 'python: [0-9]* passed, [0-9]* failed' "$tmp/py")
    if [ -n "$py" ]; then
        set -- $py
        passed=$((passed + $2))
        failed=$((failed + $4))
        # a non-zero exit that no failed check explains (a crash after the closing line)
        [ "$status" -eq 0 ] || [ "$4" -gt 0 ] || bad "rwkv python checks: exit $status after '$py'"
    else
        bad "rwkv python checks did not finish (exit $status)"
    fi
    grep -v '^python:' "$tmp/py"
fi

# ---- granitehybrid (tools/dev/mk_granite.c) ----------------------------------------------------
# Models in the layout of llama.cpp's converter for Granite 4.0-H: the key set a real
# Granite-4.0-H GGUF carries, head_count_kv 0 exactly at the Mamba-2 layers, the tensors of
# src/models/granite-hybrid.cpp's loader with their shapes and types.
g=(--arch granitehybrid --embd 32 --layers 4 --vocab 300 --state 8 --seed 11)
mk gr "${g[@]}"
mk gr-f16 "${g[@]}" --type f16
mk gr-opts --arch granitehybrid --embd 48 --layers 5 --vocab 400 --state 6 --seed 12 \
    --attn-layers 0,3 --attn-heads 6 --attn-kv-heads 2 --heads 12 --groups 3 --conv 3 --ff 40 \
    --eps 1e-6 --embd-scale 2.5 --residual-scale 0.5 --attn-scale 0.125 --logit-scale 8 --tied
mk gr-two --arch granitehybrid --embd 16 --layers 2 --vocab 256 --state 4 --seed 13 --type bf16
gm=("${m[@]}" --arch granitehybrid --embd 32 --layers 4 --vocab 300 --state 8 --seed 11)
expect 2 "--inner is for --arch mamba and mamba2 or falcon-h1 or nemotron_h, not granitehybrid" "${gm[@]}" --inner 64
expect 2 "--head-size is for --arch rwkv6 and rwkv7, not granitehybrid" "${gm[@]}" --head-size 8
expect 2 "--attn-layers is for --arch granitehybrid, not mamba" "${m[@]}" "${base[@]}" \
    --attn-layers 1
expect 2 "--logit-scale is for --arch granitehybrid, not rwkv7" "${m[@]}" "${v7[@]}" \
    --logit-scale 2
expect 2 "--state is required" "${m[@]}" --arch granitehybrid --embd 32 --layers 4 --vocab 300 \
    --seed 1
expect 2 "--attn-layers: layer 4 is past the last layer (3)" "${gm[@]}" --attn-layers 1,4
expect 2 "--attn-layers: layer 1 is given twice" "${gm[@]}" --attn-layers 1,2,1
expect 2 "--attn-layers: '1,,2' is not a list" "${gm[@]}" --attn-layers 1,,2
expect 2 "--attn-layers: '' is not a list" "${gm[@]}" --attn-layers ""
expect 2 "--attn-layers: '-1' is not a list" "${gm[@]}" --attn-layers=-1
expect 2 "--attn-layers: every layer is attention" "${gm[@]}" --attn-layers 0,1,2,3
expect 2 "the default --attn-layers (the odd layers) needs 2 layers" "${m[@]}" \
    --arch granitehybrid --embd 32 --layers 1 --vocab 300 --state 8 --seed 1
expect 2 "--attn-heads 3 does not divide embd 32" "${gm[@]}" --attn-heads 3
expect 2 "--attn-kv-heads 3 does not divide the 4 attention heads" "${gm[@]}" --attn-heads 4 \
    --attn-kv-heads 3
expect 2 "--attn-heads" "${gm[@]}" --attn-heads 0
expect 2 "--heads 5 does not divide d_inner 64" "${gm[@]}" --heads 5
expect 2 "--groups 3 does not divide the 4 heads" "${gm[@]}" --heads 4 --groups 3
expect 2 "--embd-scale: 0 must be positive" "${gm[@]}" --embd-scale 0
expect 2 "--residual-scale: -1 must be positive" "${gm[@]}" --residual-scale -1
expect 2 "--attn-scale: 'x' is not a number" "${gm[@]}" --attn-scale x
expect 2 "--logit-scale: 1e60 must be positive and fit a float32" "${gm[@]}" --logit-scale 1e60
[ -e "$tmp/x.gguf" ] && bad "a refused granitehybrid command left $tmp/x.gguf" || ok
for f in --attn-layers --attn-heads --attn-kv-heads --embd-scale --residual-scale --attn-scale \
    --logit-scale granitehybrid "Granite 4.0-H"; do
    grep -qF -- "$f" "$tmp/help" && ok || bad "mkmodel --help does not list $f"
done

if "$pyn" -c "import numpy" 2>/dev/null; then
    # NAME TYPE EMBD LAYERS VOCAB STATE ATTN-LAYERS HEADS KV-HEADS SSM-HEADS GROUPS CONV FF EPS
    # EMBD-SCALE RESIDUAL-SCALE ATTN-SCALE LOGIT-SCALE TIED
    "$pyn" - "$here/../ref" "$tmp" \
        "gr f32 32 4 300 8 1,3 2 1 1 1 4 96 1e-5 12 0.246 0.0625 3 0" \
        "gr-opts f32 48 5 400 6 0,3 6 2 12 3 3 40 1e-6 2.5 0.5 0.125 8 1" \
        "gr-two bf16 16 2 256 4 1 1 1 1 1 4 64 1e-5 12 0.246 0.0625 3 0" \
        <<'EOF' >"$tmp/py" 2>&1
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from gguf_reader import GGUFFile

passed = failed = 0
def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)

U32, F32KEY, BOOL, STR, ARR = 4, 6, 7, 8, 9
F32, F16, BF16 = 0, 1, 30
ttype = {"f32": F32, "f16": F16, "bf16": BF16}
ftype = {"f32": 0, "f16": 1, "bf16": 32}
for spec in sys.argv[3:]:
    f = spec.split()
    name, t = f[0], f[1]
    E, L, V, N = map(int, f[2:6])
    attn = [int(x) for x in f[6].split(",")]
    H, Hkv, Hs, G, K, FF = map(int, f[7:13])
    eps, es, rs, ats, ls = map(float, f[13:18])
    tied = f[18] == "1"
    g = GGUFFile("%s/%s.gguf" % (sys.argv[2], name))
    kv, ty = g.kv, g.kv_types
    A = "granitehybrid."
    Di, hd = 2 * E, E // H
    # llama.cpp: load_arch_hparams of src/models/granite-hybrid.cpp and llama_model_base::
    # load_hparams; the values the converter's GraniteHybridModel writes
    want = {
        "general.architecture": (STR, "granitehybrid"), "general.file_type": (U32, ftype[t]),
        A + "block_count": (U32, L), A + "context_length": (U32, 1 << 20),
        A + "embedding_length": (U32, E), A + "feed_forward_length": (U32, FF),
        A + "attention.head_count": (U32, H), A + "expert_count": (U32, 0),
        A + "expert_used_count": (U32, 0), A + "vocab_size": (U32, V),
        A + "rope.dimension_count": (U32, hd), A + "expert_shared_feed_forward_length": (U32, FF),
        A + "ssm.conv_kernel": (U32, K), A + "ssm.state_size": (U32, N),
        A + "ssm.group_count": (U32, G), A + "ssm.inner_size": (U32, Di),
        A + "ssm.time_step_rank": (U32, Hs), A + "rope.scaling.finetuned": (BOOL, False),
        "tokenizer.ggml.model": (STR, "gpt2"),
    }
    for k, v in want.items():
        check((ty.get(k), kv.get(k)) == v,
              "%s: %s = %r (type %r), %r expected" % (name, k, kv.get(k), ty.get(k), v))
    floats = {A + "attention.layer_norm_rms_epsilon": eps, A + "rope.freq_base": 10000.0,
              A + "embedding_scale": es, A + "residual_scale": rs, A + "attention.scale": ats,
              A + "logit_scale": ls}
    for k, v in floats.items():
        check(ty.get(k) == F32KEY and kv.get(k) == np.float32(v),
              "%s: %s = %r, %r expected" % (name, k, kv.get(k), v))
    kvh = [int(x) for x in kv.get(A + "attention.head_count_kv", [])]
    check(ty.get(A + "attention.head_count_kv") == ARR and
          kvh == [Hkv if l in attn else 0 for l in range(L)],
          "%s: head_count_kv %r for attention layers %r" % (name, kvh, attn))
    keys = set(want) | set(floats) | {"general.name", A + "attention.head_count_kv"}
    tok = {k for k in kv if k.startswith("tokenizer.")}
    check(set(kv) - tok == keys - tok, "%s: keys %s" % (name, sorted((set(kv) - tok) ^
                                                                       (keys - tok))))
    # tensors: llama.cpp's load_arch_tensors, GGUF order {ne0, ne1}
    wt = ttype[t]
    tens = {"token_embd.weight": ([E, V], wt), "output_norm.weight": ([E], F32)}
    if not tied:
        tens["output.weight"] = ([E, V], wt)
    for l in range(L):
        b = "blk.%d." % l
        tens[b + "attn_norm.weight"] = ([E], F32)
        if l in attn:
            tens[b + "attn_q.weight"] = ([E, H * hd], wt)
            tens[b + "attn_k.weight"] = ([E, Hkv * hd], wt)
            tens[b + "attn_v.weight"] = ([E, Hkv * hd], wt)
            tens[b + "attn_output.weight"] = ([H * hd, E], wt)
        else:
            tens[b + "ssm_in.weight"] = ([E, 2 * Di + 2 * G * N + Hs], wt)
            tens[b + "ssm_conv1d.weight"] = ([K, Di + 2 * G * N], F32)
            tens[b + "ssm_conv1d.bias"] = ([Di + 2 * G * N], F32)
            tens[b + "ssm_dt.bias"] = ([Hs], F32)
            tens[b + "ssm_a"] = ([1, Hs], F32)
            tens[b + "ssm_d"] = ([1, Hs], F32)
            tens[b + "ssm_norm.weight"] = ([Di // G, G], F32)
            tens[b + "ssm_out.weight"] = ([Di, E], wt)
        tens[b + "ffn_norm.weight"] = ([E], F32)
        tens[b + "ffn_gate.weight"] = ([E, FF], wt)
        tens[b + "ffn_up.weight"] = ([E, FF], wt)
        tens[b + "ffn_down.weight"] = ([FF, E], wt)
    check(set(g.tensors) == set(tens), "%s: tensors %s" % (name, sorted(set(g.tensors) ^
                                                                       set(tens))))
    for n, (ne, tt) in tens.items():
        info = g.tensors.get(n)
        check(info is not None and list(info.ne) == ne and info.ggml_type == tt,
              "%s: %s is %r type %r, %r type %r expected" % (
                  name, n, info and list(info.ne), info and info.ggml_type, ne, tt))
    for l in range(L):
        if l not in attn and "blk.%d.ssm_a" % l in g.tensors:
            a = g.tensor("blk.%d.ssm_a" % l)
            check(a.max() <= -1 and a.min() >= -16, "%s: layer %d A in [-16, -1]" % (name, l))
# the f16 file is the f32 one rounded; the F32 tensors are equal
a, o = GGUFFile(sys.argv[2] + "/gr.gguf"), GGUFFile(sys.argv[2] + "/gr-f16.gguf")
for n, info in a.tensors.items():
    x = a.tensor(n)
    if o.tensors[n].ggml_type == F16:
        x = x.astype(np.float16).astype(np.float64)
    check(np.array_equal(x, o.tensor(n)), "gr-f16: %s is not gr's rounded" % n)
print("python: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
EOF
    status=$?
    py=$(grep -o 'python: [0-9]* passed, [0-9]* failed' "$tmp/py")
    if [ -n "$py" ]; then
        set -- $py
        passed=$((passed + $2))
        failed=$((failed + $4))
        [ "$status" -eq 0 ] || [ "$4" -gt 0 ] || bad "granite python checks: exit $status after '$py'"
    else
        bad "granite python checks did not finish (exit $status)"
    fi
    grep -v '^python:' "$tmp/py"
fi

# ---- falcon-h1 (tools/dev/mk_falcon_h1.c) -------------------------------------------------------
# Models in the layout of llama.cpp's converter for Falcon-H1 (conversion/falcon_h1.py): its key
# set (no scale keys: the converter folds the multipliers into the weights), attention and
# Mamba-2 tensors in every layer, blk.N.ffn_norm without ".weight", ssm_norm only under
# --ssm-norm; the shapes of src/models/falcon-h1.cpp's loader.
fh=(--arch falcon-h1 --embd 32 --layers 2 --vocab 300 --state 8 --seed 21)
mk fh "${fh[@]}"
mk fh-opts --arch falcon-h1 --embd 48 --layers 3 --vocab 400 --state 6 --seed 22 --inner 72 \
    --heads 6 --groups 3 --conv 3 --ff 40 --attn-heads 6 --attn-kv-heads 2 --attn-head-dim 10 \
    --rope-base 1e6 --ssm-norm --eps 1e-6 --tied
mk fh-f16 "${fh[@]}" --type f16
fm=("${m[@]}" "${fh[@]}")
expect 2 "--rope-base is for --arch falcon-h1, not mamba" "${m[@]}" "${base[@]}" --rope-base 2
expect 2 "--ssm-norm is for --arch falcon-h1, not granitehybrid" "${gm[@]}" --ssm-norm
expect 2 "--attn-layers is for --arch granitehybrid, not falcon-h1" "${fm[@]}" --attn-layers 1
expect 2 "--logit-scale is for --arch granitehybrid, not falcon-h1" "${fm[@]}" --logit-scale 2
expect 2 "--state is required" "${m[@]}" --arch falcon-h1 --embd 32 --layers 2 --vocab 300 \
    --seed 1
expect 2 "--heads 5 does not divide d_inner 64 (--inner)" "${fm[@]}" --heads 5
expect 2 "--heads 4 does not divide d_inner 30 (--inner)" "${fm[@]}" --inner 30 --heads 4
expect 2 "--groups 3 does not divide the 4 SSM heads" "${fm[@]}" --heads 4 --groups 3
expect 2 "--attn-heads 3 does not divide embd 32; give --attn-head-dim" "${fm[@]}" --attn-heads 3
expect 2 "--attn-head-dim 7 is odd" "${fm[@]}" --attn-heads 3 --attn-head-dim 7
expect 2 "--attn-kv-heads 3 does not divide the 4 attention heads" "${fm[@]}" --attn-heads 4 \
    --attn-kv-heads 3
expect 2 "--attn-head-dim" "${fm[@]}" --attn-head-dim 0
expect 2 "--inner" "${fm[@]}" --inner x
expect 2 "--rope-base: 0 must be positive" "${fm[@]}" --rope-base 0
expect 2 "--rope-base: 'x' is not a number" "${fm[@]}" --rope-base x
[ -e "$tmp/x.gguf" ] && bad "a refused falcon-h1 command left $tmp/x.gguf" || ok
for f in --rope-base --ssm-norm falcon-h1 Falcon-H1; do
    grep -qF -- "$f" "$tmp/help" && ok || bad "mkmodel --help does not list $f"
done

if "$pyn" -c "import numpy" 2>/dev/null; then
    # NAME TYPE EMBD LAYERS VOCAB STATE INNER SSM-HEADS GROUPS CONV FF HEADS KV-HEADS HEAD-DIM
    # ROPE-BASE EPS SSM-NORM TIED
    "$pyn" - "$here/../ref" "$tmp" \
        "fh f32 32 2 300 8 64 1 1 4 64 2 1 16 1e11 1e-5 0 0" \
        "fh-opts f32 48 3 400 6 72 6 3 3 40 6 2 10 1e6 1e-6 1 1" \
        "fh-f16 f16 32 2 300 8 64 1 1 4 64 2 1 16 1e11 1e-5 0 0" \
        <<'EOF' >"$tmp/py" 2>&1
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from gguf_reader import GGUFFile

passed = failed = 0
def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)

U32, F32KEY, STR = 4, 6, 8
F32, F16 = 0, 1
ttype = {"f32": F32, "f16": F16}
ftype = {"f32": 0, "f16": 1}
for spec in sys.argv[3:]:
    f = spec.split()
    name, t = f[0], f[1]
    E, L, V, N, Di, Hs, G, K, FF, H, Hkv, hd = map(int, f[2:14])
    base, eps = map(float, f[14:16])
    ssm_norm, tied = f[16] == "1", f[17] == "1"
    g = GGUFFile("%s/%s.gguf" % (sys.argv[2], name))
    kv, ty = g.kv, g.kv_types
    A = "falcon-h1."
    # llama.cpp: load_arch_hparams of src/models/falcon-h1.cpp and llama_model_base::
    # load_hparams; the values the converter's FalconH1Model (and its Mamba2Model) writes
    want = {
        "general.architecture": (STR, "falcon-h1"), "general.file_type": (U32, ftype[t]),
        A + "block_count": (U32, L), A + "context_length": (U32, 16384),
        A + "embedding_length": (U32, E), A + "feed_forward_length": (U32, FF),
        A + "attention.head_count": (U32, H), A + "attention.head_count_kv": (U32, Hkv),
        A + "attention.key_length": (U32, hd), A + "attention.value_length": (U32, hd),
        A + "vocab_size": (U32, V), A + "ssm.conv_kernel": (U32, K),
        A + "ssm.state_size": (U32, N), A + "ssm.group_count": (U32, G),
        A + "ssm.inner_size": (U32, Di), A + "ssm.time_step_rank": (U32, Hs),
        "tokenizer.ggml.model": (STR, "gpt2"),
    }
    for k, v in want.items():
        check((ty.get(k), kv.get(k)) == v,
              "%s: %s = %r (type %r), %r expected" % (name, k, kv.get(k), ty.get(k), v))
    floats = {A + "attention.layer_norm_rms_epsilon": eps, A + "rope.freq_base": base}
    for k, v in floats.items():
        check(ty.get(k) == F32KEY and kv.get(k) == np.float32(v),
              "%s: %s = %r, %r expected" % (name, k, kv.get(k), v))
    keys = set(want) | set(floats) | {"general.name"}
    tok = {k for k in kv if k.startswith("tokenizer.")}
    check(set(kv) - tok == keys - tok, "%s: keys %s" % (name, sorted((set(kv) - tok) ^
                                                                       (keys - tok))))
    # tensors: llama.cpp's load_arch_tensors, GGUF order {ne0, ne1}
    wt = ttype[t]
    tens = {"token_embd.weight": ([E, V], wt), "output_norm.weight": ([E], F32)}
    if not tied:
        tens["output.weight"] = ([E, V], wt)
    cd = Di + 2 * G * N
    for l in range(L):
        b = "blk.%d." % l
        tens[b + "attn_norm.weight"] = ([E], F32)
        tens[b + "attn_q.weight"] = ([E, H * hd], wt)
        tens[b + "attn_k.weight"] = ([E, Hkv * hd], wt)
        tens[b + "attn_v.weight"] = ([E, Hkv * hd], wt)
        tens[b + "attn_output.weight"] = ([H * hd, E], wt)
        tens[b + "ssm_in.weight"] = ([E, Di + cd + Hs], wt)
        tens[b + "ssm_conv1d.weight"] = ([K, cd], F32)
        tens[b + "ssm_conv1d.bias"] = ([cd], F32)
        tens[b + "ssm_dt.bias"] = ([Hs], F32)
        tens[b + "ssm_a"] = ([1, Hs], F32)
        tens[b + "ssm_d"] = ([1, Hs], F32)
        if ssm_norm:
            tens[b + "ssm_norm.weight"] = ([Di // G, G], F32)
        tens[b + "ssm_out.weight"] = ([Di, E], wt)
        tens[b + "ffn_norm"] = ([E], F32)
        tens[b + "ffn_gate.weight"] = ([E, FF], wt)
        tens[b + "ffn_up.weight"] = ([E, FF], wt)
        tens[b + "ffn_down.weight"] = ([FF, E], wt)
    check(set(g.tensors) == set(tens), "%s: tensors %s" % (name, sorted(set(g.tensors) ^
                                                                       set(tens))))
    for n, (ne, tt) in tens.items():
        info = g.tensors.get(n)
        check(info is not None and list(info.ne) == ne and info.ggml_type == tt,
              "%s: %s is %r type %r, %r type %r expected" % (
                  name, n, info and list(info.ne), info and info.ggml_type, ne, tt))
# the f16 file is the f32 one rounded
a, o = GGUFFile(sys.argv[2] + "/fh.gguf"), GGUFFile(sys.argv[2] + "/fh-f16.gguf")
for n, info in a.tensors.items():
    x = a.tensor(n)
    if o.tensors[n].ggml_type == F16:
        x = x.astype(np.float16).astype(np.float64)
    check(np.array_equal(x, o.tensor(n)), "fh-f16: %s is not fh's rounded" % n)
print("python: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
EOF
    status=$?
    py=$(grep -o 'python: [0-9]* passed, [0-9]* failed' "$tmp/py")
    if [ -n "$py" ]; then
        set -- $py
        passed=$((passed + $2))
        failed=$((failed + $4))
        [ "$status" -eq 0 ] || [ "$4" -gt 0 ] || bad "falcon-h1 python checks: exit $status after '$py'"
    else
        bad "falcon-h1 python checks did not finish (exit $status)"
    fi
    grep -v '^python:' "$tmp/py"
fi

# ---- nemotron_h (tools/dev/mk_nemotron.c) -----------------------------------------------------
# Models in the layout of llama.cpp's converter for Nemotron-H (dense): the key set its
# NemotronHModel writes, head_count_kv nonzero exactly at the attention layers and
# feed_forward_length exactly at the MLP layers, the tensors of src/models/nemotron-h.cpp's
# loader with their shapes and types.
n=(--arch nemotron_h --embd 32 --layers 6 --vocab 300 --state 8 --seed 21)
mk nh "${n[@]}"
mk nh-f16 "${n[@]}" --type f16
mk nh-opts --arch nemotron_h --embd 48 --layers 5 --vocab 400 --state 6 --seed 22 \
    --pattern 'M-*M-' --attn-heads 6 --attn-kv-heads 2 --attn-head-dim 5 --inner 72 --heads 12 \
    --groups 3 --conv 3 --ff 40 --eps 1e-6 --tied
mk nh-one --arch nemotron_h --embd 16 --layers 1 --vocab 256 --state 4 --seed 23 --type bf16
nm=("${m[@]}" --arch nemotron_h --embd 32 --layers 4 --vocab 300 --state 8 --seed 21)
expect 2 "--attn-layers is for --arch granitehybrid, not nemotron_h" "${nm[@]}" --attn-layers 1
expect 2 "--logit-scale is for --arch granitehybrid, not nemotron_h" "${nm[@]}" --logit-scale 2
expect 2 "--pattern is for --arch nemotron_h, not granitehybrid" "${gm[@]}" --pattern 'M*M*'
expect 2 "--attn-head-dim is for --arch falcon-h1 or nemotron_h, not mamba" "${m[@]}" "${base[@]}" \
    --attn-head-dim 8
expect 2 "--state is required" "${m[@]}" --arch nemotron_h --embd 32 --layers 4 --vocab 300 \
    --seed 1
expect 2 "--pattern: 'E' in 'M*E-' is not a layer kind" "${nm[@]}" --pattern 'M*E-'
expect 2 "--pattern: 'M*-' has 3 layers, --layers is 4" "${nm[@]}" --pattern 'M*-'
expect 2 "--pattern: '' has 0 layers, --layers is 4" "${nm[@]}" --pattern ''
expect 2 "--attn-kv-heads 3 does not divide the 4 attention heads" "${nm[@]}" --attn-heads 4 \
    --attn-kv-heads 3
expect 2 "--attn-head-dim" "${nm[@]}" --attn-head-dim 0
expect 2 "--heads 5 does not divide d_inner 64" "${nm[@]}" --heads 5
expect 2 "--heads 7 does not divide d_inner 48" "${nm[@]}" --inner 48 --heads 7
expect 2 "--groups 3 does not divide the 4 heads" "${nm[@]}" --heads 4 --groups 3
expect 2 "--ff" "${nm[@]}" --ff 0
[ -e "$tmp/x.gguf" ] && bad "a refused nemotron_h command left $tmp/x.gguf" || ok
for f in --pattern --attn-head-dim nemotron_h Nemotron-H; do
    grep -qF -- "$f" "$tmp/help" && ok || bad "mkmodel --help does not list $f"
done

if "$pyn" -c "import numpy" 2>/dev/null; then
    # NAME TYPE EMBD LAYERS VOCAB STATE PATTERN HEADS KV-HEADS HEAD-DIM INNER SSM-HEADS GROUPS
    # CONV FF EPS TIED
    "$pyn" - "$here/../ref" "$tmp" \
        "nh f32 32 6 300 8 M*-M*- 2 1 16 64 1 1 4 128 1e-5 0" \
        "nh-opts f32 48 5 400 6 M-*M- 6 2 5 72 12 3 3 40 1e-6 1" \
        "nh-one bf16 16 1 256 4 M 1 1 16 32 1 1 4 64 1e-5 0" \
        <<'EOF' >"$tmp/py" 2>&1
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from gguf_reader import GGUFFile

passed = failed = 0
def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)

U32, F32KEY, BOOL, STR, ARR = 4, 6, 7, 8, 9
F32, F16, BF16 = 0, 1, 30
ttype = {"f32": F32, "f16": F16, "bf16": BF16}
ftype = {"f32": 0, "f16": 1, "bf16": 32}
for spec in sys.argv[3:]:
    f = spec.split()
    name, t = f[0], f[1]
    E, L, V, N = map(int, f[2:6])
    pat = f[6]
    H, Hkv, hd, Di, Hs, G, K, FF = map(int, f[7:15])
    eps = float(f[15])
    tied = f[16] == "1"
    g = GGUFFile("%s/%s.gguf" % (sys.argv[2], name))
    kv, ty = g.kv, g.kv_types
    A = "nemotron_h."
    # llama.cpp: load_arch_hparams of src/models/nemotron-h.cpp and llama_model_base::
    # load_hparams; the values the converter's NemotronHModel writes
    want = {
        "general.architecture": (STR, "nemotron_h"), "general.file_type": (U32, ftype[t]),
        A + "block_count": (U32, L), A + "context_length": (U32, 1 << 20),
        A + "embedding_length": (U32, E), A + "attention.head_count": (U32, H),
        A + "attention.key_length": (U32, hd), A + "attention.value_length": (U32, hd),
        A + "vocab_size": (U32, V), A + "rope.dimension_count": (U32, hd),
        A + "ssm.conv_kernel": (U32, K), A + "ssm.state_size": (U32, N),
        A + "ssm.group_count": (U32, G), A + "ssm.inner_size": (U32, Di),
        A + "ssm.time_step_rank": (U32, Hs), A + "rope.scaling.finetuned": (BOOL, False),
        "tokenizer.ggml.model": (STR, "gpt2"),
    }
    for k, v in want.items():
        check((ty.get(k), kv.get(k)) == v,
              "%s: %s = %r (type %r), %r expected" % (name, k, kv.get(k), ty.get(k), v))
    floats = {A + "attention.layer_norm_epsilon": eps, A + "rope.freq_base": 10000.0}
    for k, v in floats.items():
        check(ty.get(k) == F32KEY and kv.get(k) == np.float32(v),
              "%s: %s = %r, %r expected" % (name, k, kv.get(k), v))
    arrays = {A + "attention.head_count_kv": [Hkv if c == "*" else 0 for c in pat],
              A + "feed_forward_length": [FF if c == "-" else 0 for c in pat]}
    for k, v in arrays.items():
        got = [int(x) for x in kv.get(k, [])]
        check(ty.get(k) == ARR and got == v, "%s: %s = %r, %r expected" % (name, k, got, v))
    keys = set(want) | set(floats) | set(arrays) | {"general.name"}
    tok = {k for k in kv if k.startswith("tokenizer.")}
    check(set(kv) - tok == keys - tok, "%s: keys %s" % (name, sorted((set(kv) - tok) ^
                                                                       (keys - tok))))
    # tensors: llama.cpp's load_arch_tensors, GGUF order {ne0, ne1}
    wt = ttype[t]
    tens = {"token_embd.weight": ([E, V], wt), "output_norm.weight": ([E], F32)}
    if not tied:
        tens["output.weight"] = ([E, V], wt)
    for l, c in enumerate(pat):
        b = "blk.%d." % l
        tens[b + "attn_norm.weight"] = ([E], F32)
        if c == "*":
            tens[b + "attn_q.weight"] = ([E, H * hd], wt)
            tens[b + "attn_k.weight"] = ([E, Hkv * hd], wt)
            tens[b + "attn_v.weight"] = ([E, Hkv * hd], wt)
            tens[b + "attn_output.weight"] = ([H * hd, E], wt)
        elif c == "M":
            tens[b + "ssm_in.weight"] = ([E, 2 * Di + 2 * G * N + Hs], wt)
            tens[b + "ssm_conv1d.weight"] = ([K, Di + 2 * G * N], F32)
            tens[b + "ssm_conv1d.bias"] = ([Di + 2 * G * N], F32)
            tens[b + "ssm_dt.bias"] = ([Hs], F32)
            tens[b + "ssm_a"] = ([1, Hs], F32)
            tens[b + "ssm_d"] = ([1, Hs], F32)
            tens[b + "ssm_norm.weight"] = ([Di // G, G], F32)
            tens[b + "ssm_out.weight"] = ([Di, E], wt)
        else:
            tens[b + "ffn_up.weight"] = ([E, FF], wt)
            tens[b + "ffn_down.weight"] = ([FF, E], wt)
    check(set(g.tensors) == set(tens), "%s: tensors %s" % (name, sorted(set(g.tensors) ^
                                                                       set(tens))))
    for n, (ne, tt) in tens.items():
        info = g.tensors.get(n)
        check(info is not None and list(info.ne) == ne and info.ggml_type == tt,
              "%s: %s is %r type %r, %r type %r expected" % (
                  name, n, info and list(info.ne), info and info.ggml_type, ne, tt))
# the f16 file is the f32 one rounded; the F32 tensors are equal
a, o = GGUFFile(sys.argv[2] + "/nh.gguf"), GGUFFile(sys.argv[2] + "/nh-f16.gguf")
for n, info in a.tensors.items():
    x = a.tensor(n)
    if o.tensors[n].ggml_type == F16:
        x = x.astype(np.float16).astype(np.float64)
    check(np.array_equal(x, o.tensor(n)), "nh-f16: %s is not nh's rounded" % n)
print("python: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
EOF
    status=$?
    py=$(grep -o 'python: [0-9]* passed, [0-9]* failed' "$tmp/py")
    if [ -n "$py" ]; then
        set -- $py
        passed=$((passed + $2))
        failed=$((failed + $4))
        [ "$status" -eq 0 ] || [ "$4" -gt 0 ] || bad "nemotron python checks: exit $status after '$py'"
    else
        bad "nemotron python checks did not finish (exit $status)"
    fi
    grep -v '^python:' "$tmp/py"
fi

# ---- --qk-norm (the three hybrids) -----------------------------------------------------------
# attn_q_norm.weight and attn_k_norm.weight in every attention layer and nowhere else: f32,
# {head_dim} (head) or the whole q and k vectors (vector), near 1 but not 1; every other tensor
# the same as without the flag (each is drawn from its own name's generator)
qg=(--arch granitehybrid --embd 32 --layers 4 --vocab 300 --state 8 --seed 31 --attn-layers 1,2)
mk qk-g "${qg[@]}"
mk qk-g-head "${qg[@]}" --qk-norm head
grep -qF "q/k norms per head" "$tmp/out" && ok || bad "mkmodel --qk-norm head: summary: $(cat "$tmp/out")"
qf=(--arch falcon-h1 --embd 32 --layers 2 --vocab 300 --state 8 --seed 32 --attn-heads 4
    --attn-kv-heads 2 --attn-head-dim 6)
mk qk-f "${qf[@]}"
mk qk-f-vector "${qf[@]}" --qk-norm vector
qn=(--arch nemotron_h --embd 32 --layers 4 --vocab 300 --state 8 --seed 33 --pattern 'M*-*'
    --attn-heads 2 --attn-kv-heads 1)
mk qk-n "${qn[@]}"
mk qk-n-head "${qn[@]}" --qk-norm head
expect 2 "--qk-norm is for --arch granitehybrid or falcon-h1 or nemotron_h, not mamba" \
    "${m[@]}" "${base[@]}" --qk-norm head
expect 2 "--qk-norm is for --arch granitehybrid or falcon-h1 or nemotron_h, not rwkv7" \
    "${m[@]}" --arch rwkv7 --embd 32 --layers 2 --vocab 300 --seed 1 --qk-norm head
expect 2 "--qk-norm: unknown form 'each' (known: head, vector)" "${m[@]}" "${qg[@]}" --qk-norm each
expect 2 "--qk-norm needs a value" "${m[@]}" "${qg[@]}" --qk-norm
grep -qF -- "--qk-norm" "$tmp/help" && ok || bad "mkmodel --help does not list --qk-norm"
if "$pyn" -c "import numpy" 2>/dev/null; then
    # NAME PLAIN (the same without the flag) FORM ATTENTION-LAYERS HEADS KV-HEADS HEAD-DIM
    "$pyn" - "$here/../ref" "$tmp" "qk-g-head qk-g head 1,2 2 1 16" \
        "qk-f-vector qk-f vector 0,1 4 2 6" "qk-n-head qk-n head 1,3 2 1 16" <<'EOF' >"$tmp/py" 2>&1
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from gguf_reader import GGUFFile

passed = failed = 0
def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)

for spec in sys.argv[3:]:
    name, plain, form, layers, H, Hkv, hd = spec.split()
    layers = [int(i) for i in layers.split(",")]
    H, Hkv, hd = int(H), int(Hkv), int(hd)
    g = GGUFFile("%s/%s.gguf" % (sys.argv[2], name))
    o = GGUFFile("%s/%s.gguf" % (sys.argv[2], plain))
    want = {}
    for i in layers:
        want["blk.%d.attn_q_norm.weight" % i] = hd if form == "head" else H * hd
        want["blk.%d.attn_k_norm.weight" % i] = hd if form == "head" else Hkv * hd
    extra = sorted(set(g.tensors) - set(o.tensors))
    check(extra == sorted(want), "%s: the tensors beyond %s's are %r, %r expected" % (
        name, plain, extra, sorted(want)))
    for n, size in want.items():
        info = g.tensors.get(n)
        check(info is not None and list(info.ne) == [size] and info.ggml_type == 0,
              "%s: %s is %r type %r, [%d] f32 expected" % (
                  name, n, info and list(info.ne), info and info.ggml_type, size))
        if info is not None:
            x = g.tensor(n)
            check(abs(float(np.mean(x)) - 1) < 0.1 and 0.02 < float(np.std(x)) < 0.3,
                  "%s: %s is not near 1 (mean %g, std %g)" % (name, n, np.mean(x), np.std(x)))
    for n in o.tensors:
        check(np.array_equal(g.tensor(n), o.tensor(n)), "%s: %s differs from %s's" % (
            name, n, plain))
print("python: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
EOF
    status=$?
    py=$(grep -o 'python: [0-9]* passed, [0-9]* failed' "$tmp/py")
    if [ -n "$py" ]; then
        set -- $py
        passed=$((passed + $2))
        failed=$((failed + $4))
        [ "$status" -eq 0 ] || [ "$4" -gt 0 ] || bad "qk-norm python checks: exit $status after '$py'"
    else
        bad "qk-norm python checks did not finish (exit $status)"
    fi
    grep -v '^python:' "$tmp/py"
fi

finish test_mkmodel
