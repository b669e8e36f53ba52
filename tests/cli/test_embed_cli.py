#!/usr/bin/env python3
"""recur embed (tools/cli/embed.c), checked against what python computes independently:

    test_embed_cli.py RECUR_BIN MODELS_DIR

On random-weight models of tests/model/make_models.sh (a Mamba, a Mamba-2, an RWKV-6):
  - pooling none's per-token rows (--embd-normalize -1) pooled here, in float64, as mean, cls
    (first token) and last, then normalised here as llama.cpp's common_embd_normalize (-1, 0, 1,
    2, 3), equal the CLI's pooled answers within 1e-5 (0: 1e-5 of the int16 range);
  - pooling last (not normalised) is the float64 reference's final normed hidden state (the
    reference models of tests/ref with their output projection replaced by the identity: what
    they would project to logits), within 1e-4 of its rms;
  - the output formats parse (array, json, json+ with its cosine matrix, raw, the text lines);
  - bad flags and inputs are refused (exit 2 or 1, the message naming them).
Prints the largest differences measured.
"""

import json
import math
import os
import subprocess
import sys

try:
    import numpy as np
except ImportError:  # the system's python has it (python3-numpy) where a pyenv one may not
    if os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") and \
            os.path.exists("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    print("SKIP: numpy is not installed (the reference needs it)")
    sys.exit(77)

RECUR, MODELS = sys.argv[1:3]
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "ref"))
import mamba_ref  # noqa: E402

passed = failed = 0


def check(name, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAILED: %s %s" % (name, detail), file=sys.stderr)


def embed(model, text, *flags):
    r = subprocess.run([RECUR, "embed", "-m", model, "-t", "2", "-p", text] + list(flags),
                       capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def embed_array(model, text, pooling, norm):
    rc, out, err = embed(model, text, "--pooling", pooling, "--embd-normalize", str(norm),
                         "--embd-output-format", "array")
    assert rc == 0, err
    return np.array(json.loads(out), dtype=np.float64)


def normalize(v, norm):
    if norm == -1:
        s = 1.0
    elif norm == 0:
        s = np.max(np.abs(v)) / 32760.0
    elif norm == 2:
        s = math.sqrt(float(np.sum(v * v)))
    else:
        s = float(np.sum(np.abs(v) ** norm)) ** (1.0 / norm)
    return v / s if s > 0 else v * 0


class Identity:
    """In place of a reference model's output matrix: forward then returns the normed hidden
    state it would have projected to logits."""

    def __matmul__(self, v):
        return v


TEXTS = ["hello world", "the cat sat on the mat", "a"]
worst_pool = worst_ref = 0.0
for name in ("f32-untied", "f32-mamba2", "f32-rwkv6"):
    model = os.path.join(MODELS, name + ".gguf")
    text = "\n".join(TEXTS)
    ids = []
    for t in TEXTS:
        r = subprocess.run([RECUR, "tokenize", "-m", model, "-p", t], capture_output=True,
                           text=True, check=True)
        ids.append([int(x) for x in r.stdout.split()])
    rows = embed_array(model, text, "none", -1)
    check("%s: pooling none gives a row per token" % name, len(rows) == sum(map(len, ids)),
          (len(rows), [len(i) for i in ids]))
    per_input, at = [], 0
    for i in ids:
        per_input.append(rows[at:at + len(i)])
        at += len(i)
    for pooling in ("mean", "cls", "last"):
        for norm in (-1, 0, 1, 2, 3):
            got = embed_array(model, text, pooling, norm)
            want = []
            for r in per_input:
                pooled = r.mean(axis=0) if pooling == "mean" else r[0] if pooling == "cls" else r[-1]
                want.append(normalize(pooled, norm))
            want = np.array(want)
            d = float(np.max(np.abs(got - want))) / (32760.0 if norm == 0 else 1.0)
            worst_pool = max(worst_pool, d)
            check("%s: pooling %s, embd_normalize %d, as pooled here (%.2g)" % (name, pooling,
                  norm, d), got.shape == want.shape and d < 1e-5)
    # the float64 reference's final normed hidden state of each input's last token
    ref = mamba_ref.load_model(model)
    ref.output = Identity()
    last = embed_array(model, text, "last", -1)
    for k, toks in enumerate(ids):
        state = mamba_ref.new_state(ref)
        for t in toks:
            h = np.asarray(mamba_ref.forward(ref, state, t), dtype=np.float64)
        rel = float(np.max(np.abs(last[k] - h)) / math.sqrt(float(np.mean(h * h))))
        worst_ref = max(worst_ref, rel)
        check("%s: input %d's last hidden state is the reference's (%.2g of its rms)"
              % (name, k, rel), rel < 1e-4)

# output formats and refusals, on one model
model = os.path.join(MODELS, "f32-untied.gguf")
rc, out, err = embed(model, "one\ntwo", "--embd-output-format", "json")
j = json.loads(out) if rc == 0 else {}
check("json: OpenAI's shape", rc == 0 and j.get("object") == "list" and
      [d["index"] for d in j["data"]] == [0, 1] and j["data"][0]["object"] == "embedding", out)
rc, out, err = embed(model, "one\ntwo", "--embd-output-format", "json+")
j = json.loads(out) if rc == 0 else {}
if rc == 0:
    a, b = (np.array(d["embedding"]) for d in j["data"])
    cos = float(a @ b / math.sqrt(float(a @ a) * float(b @ b)))
    m = j["cosineSimilarity"]
    check("json+: the cosine matrix (%.6f)" % cos, abs(m[0][1] - cos) < 1e-5 and
          abs(m[1][0] - cos) < 1e-5 and abs(m[0][0] - 1) < 1e-5, m)
else:
    check("json+ runs", False, err)
rc, out, err = embed(model, "one\ntwo", "--embd-output-format", "raw")
lines = out.strip().split("\n")
check("raw: a line of numbers per input", rc == 0 and len(lines) == 2 and
      all(len(l.split()) == len(a) for l in lines), out[:200])
rc, out, err = embed(model, "one\ntwo\n")
check("text: 'embedding N:' lines; a final newline is no input", rc == 0 and
      out.startswith("embedding 0:") and out.count("embedding ") == 2, out[:200])
rc, out, err = embed(model, "one|two", "--embd-separator", "|", "--embd-output-format", "raw")
check("--embd-separator splits", rc == 0 and len(out.strip().split("\n")) == 2, err)

for flags, code, needle in ((["--pooling", "rank"], 2, "--pooling"),
                            (["--embd-output-format", "xml"], 2, "--embd-output-format"),
                            (["--embd-normalize", "-2"], 2, "--embd-normalize"),
                            (["-b", "2", "-ub", "2"], 1, "more than --batch-size")):
    rc, out, err = embed(model, "one two three four", *flags)
    check("%s: exit %d naming it" % (" ".join(flags), code), rc == code and needle in err,
          (rc, err[:300]))
rc, out, err = embed(model, "one\n\ntwo")
check("an empty input: exit 1 naming it", rc == 1 and "input 1 is empty" in err, (rc, err))

print("test_embed_cli: pooled vs pooled here: max %.3g; last vs the float64 reference: max %.3g "
      "of its rms" % (worst_pool, worst_ref))
print("test_embed_cli: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed or not passed else 0)
