#!/usr/bin/env python3
"""What a hybrid model's file may not hold, and the attention cache's settings: each refused by
`recur run` with a message that names it (docs/hybrid.md section 3).

    test_hybrid_load.py RECUR_BIN MODELS_DIR

Files are written with tests/ref/test_ref.py's GGUF writer (Granite 4.0-H and Falcon-H1 in
llama.cpp's layout), each differing from a good one in one key or tensor; the good ones load.
"""

import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "ref"))
import test_ref as tr  # noqa: E402  (first: it re-executes with Debian's python3 for numpy)
import numpy as np  # noqa: E402

RECUR, MODELS = sys.argv[1], sys.argv[2]
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAILED: %s %s" % (name, detail))


def run(path, *args):
    r = subprocess.run([RECUR, "run", "-m", path, "-p", "hi", "-n", "2", "-t", "1"] + list(args),
                       capture_output=True, text=True, errors="replace")
    return r.returncode, r.stderr


work = tempfile.mkdtemp(prefix="recur-hybrid-load-")


def write(name, data):
    path = os.path.join(work, name)
    with open(path, "wb") as f:
        f.write(data[0] if isinstance(data, tuple) else data)
    return path


def refused(name, path, message, *args):
    rc, err = run(path, *args)
    check("%s: refused naming it" % name, rc != 0 and message in err, (rc, err[-400:]))


rng = np.random.default_rng(5)
g = tr.granite_weights(rng, **tr.HPG)
a = "granitehybrid."
# the good file loads (the weights come first) and stops only at its missing vocabulary, so
# each refusal below is its own key's or tensor's
rc, err = run(write("good.gguf", tr.granite_bytes(tr.HPG, g)))
check("a good granitehybrid file loads up to its missing vocabulary",
      rc == 1 and "key tokenizer.ggml.model is missing" in err, err[-300:])
refused("a mixture of experts", write("moe.gguf", tr.granite_bytes(
    tr.HPG, g, extra=[(a + "expert_count", tr.U32, 4)])),
    "granitehybrid with 4 experts (a mixture of experts) is not supported yet")
refused("rope.scaling.finetuned true", write("rope.gguf", tr.granite_bytes(
    tr.HPG, g, rope_finetuned=True)), "granitehybrid.rope.scaling.finetuned is true or missing")
refused("rope.scaling.finetuned missing", write("norope.gguf", tr.granite_bytes(
    tr.HPG, g, rope_finetuned=None)), "rope.scaling.finetuned is true or missing")
biased = dict(g)
biased["blk.1.attn_q.bias"] = np.zeros(tr.HPG["n_embd"])
refused("an attention bias", write("bias.gguf", tr.granite_bytes(tr.HPG, biased)),
        "tensor blk.1.attn_q.bias: attention with biases or a fused QKV is not supported")
# Q/K norms: a pair of {head_dim} (each head) or of the whole vectors loads; one alone, or a
# shape of neither form, is refused naming the tensor (their effect on the logits is
# test_model_ref's, on make_models.sh's *-qk models)
hd = tr.HPG["n_embd"] // tr.HPG["n_head"]
qn, kn = "blk.1.attn_q_norm.weight", "blk.1.attn_k_norm.weight"
for form, nq, nk in (("each head", hd, hd),
                     ("the whole vector", tr.HPG["n_head"] * hd, tr.HPG["n_head_kv"] * hd)):
    both = dict(g, **{qn: np.ones(nq), kn: np.ones(nk)})
    rc, err = run(write("qk.gguf", tr.granite_bytes(tr.HPG, both)))
    check("Q/K norms of %s load up to the missing vocabulary" % form,
          rc == 1 and "key tokenizer.ggml.model is missing" in err, err[-300:])
refused("a K norm without a Q norm", write("knorm.gguf", tr.granite_bytes(
    tr.HPG, dict(g, **{kn: np.ones(hd)}))),
    "tensor blk.1.attn_k_norm.weight without blk.1.attn_q_norm.weight: the Q and K norms come "
    "as a pair")
refused("a Q norm without a K norm", write("qnorm.gguf", tr.granite_bytes(
    tr.HPG, dict(g, **{qn: np.ones(hd)}))),
    "tensor blk.1.attn_q_norm.weight without blk.1.attn_k_norm.weight")
refused("a K norm of neither form", write("kshape.gguf", tr.granite_bytes(
    tr.HPG, dict(g, **{qn: np.ones(hd), kn: np.ones(hd + 1)}))),
    "tensor blk.1.attn_k_norm.weight has shape {%d}: a k norm is {%d} (each head) or {%d} "
    "(the whole vector)" % (hd + 1, hd, tr.HPG["n_head_kv"] * hd))
# K's whole-vector size for Q (Q's is n_head * head_dim)
refused("a Q norm of K's size", write("qshape.gguf", tr.granite_bytes(
    tr.HPG, dict(g, **{qn: np.ones(tr.HPG["n_head_kv"] * hd), kn: np.ones(hd)}))),
    "tensor blk.1.attn_q_norm.weight has shape {%d}" % (tr.HPG["n_head_kv"] * hd))
refused("a Q norm of two dimensions", write("q2d.gguf", tr.granite_bytes(
    tr.HPG, dict(g, **{qn: np.ones((tr.HPG["n_head"], hd)), kn: np.ones(hd)}))),
    "tensor blk.1.attn_q_norm.weight has shape")
# 3 K/V heads for 4 query heads
hp3 = dict(tr.HPG, n_head_kv=3)
refused("K/V heads that do not divide the heads", write("kv3.gguf", tr.granite_bytes(
    hp3, tr.granite_weights(np.random.default_rng(6), **hp3))),
    "layer 1: 3 K/V heads do not divide the 4 attention heads")

f = tr.falcon_h1_weights(np.random.default_rng(7), **tr.HPF)
refused("Falcon-H1's scaled RoPE", write("fscale.gguf", tr.falcon_h1_bytes(
    tr.HPF, f, extra=[("falcon-h1.rope.scaling.factor", tr.F32V, 4.0)])),
    "falcon-h1.rope.scaling.factor 4: scaled RoPE is not supported")
refused("Falcon-H1's odd rotary dimensions", write("frot.gguf", tr.falcon_h1_bytes(
    tr.HPF, f, extra=[("falcon-h1.rope.dimension_count", tr.U32, 3)])),
    "falcon-h1: rope.dimension_count 3 (even, 2 .. the head size 4)")

# the attention cache's settings, on a whole model of the battery (head size 16)
granite = os.path.join(MODELS, "f32-granite.gguf")
refused("a q8_0 cache for heads of 16", granite,
        "attn_type_k q8_0 needs an attention head size that is a multiple of 32; this model's "
        "is 16", "--cache-type-k", "q8_0")
rc, err = run(granite, "--cache-type-v", "q4_0")
check("--cache-type-v q4_0: a usage error naming the types", rc == 2 and
      "'q4_0' is not a type recur keeps attention rows in (f32, f16, q8_0)" in err, err[-300:])
rc, err = run(granite, "--cache-type-k", "f16", "--cache-type-v", "f16", "-c", "64")
check("f16 rows and -c 64 run", rc == 0, err[-300:])
# a cache of 32 tokens (2 pages with the spare): the run stops at its end, and says why
r = subprocess.run([RECUR, "run", "-m", granite, "-p", "hi", "-n", "200", "-t", "1", "-c", "32"],
                   capture_output=True, text=True, errors="replace")
check("a full attention cache stops the run cleanly", r.returncode == 0 and
      "the attention cache is full" in r.stderr and "raise -c" in r.stderr, r.stderr[-300:])

print("test_hybrid_load: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed or not passed else 0)
