#!/usr/bin/env python3
"""mamba_ref.py: an independent float64 reference of the Mamba-1 forward pass (the equations
at the top of src/model/mamba.c), and the command line of every architecture's reference.

Reads a GGUF model as llama.cpp writes it (general.architecture = "mamba") with the small
reader in gguf_reader.py, and runs tokens one at a time, the way recur does, keeping a
recurrent state per layer: conv_state (d_conv-1, d_inner) and ssm_state (d_inner, d_state),
both zero at the start of a sequence. Each step of the layer is its own function and reads
like those equations; everything is float64 numpy, vectorised over channels.

Other architectures live in their own modules, chosen by general.architecture (ARCHS below):
mamba2 (mamba2_ref.py, docs/mamba2.md), rwkv6 (rwkv6_ref.py, docs/rwkv6.md), rwkv7
(rwkv7_ref.py, docs/rwkv7.md), granitehybrid (granite_ref.py: Granite 4.0-H, Mamba-2 and
attention layers), falcon-h1 (falcon_h1_ref.py: Falcon-H1, attention with RoPE and Mamba-2
in parallel in every layer) and nemotron_h (nemotron_ref.py: Nemotron-H, Mamba-2, attention and
MLP layers). Each module has a model class (attribute `kind` = the
architecture, plus n_vocab), new_state(model) and forward(model, state, token); load_model,
new_state and forward below dispatch to them, so the command line and run_sequence / greedy
work for every architecture.

Weights are numpy arrays in numpy order (GGUF {ne0, ne1} -> shape (ne1, ne0)), so a
projection from n inputs to m outputs is an (m, n) matrix and is applied as W @ v.

Command line:
    python3 tests/ref/mamba_ref.py MODEL.gguf --tokens 1,2,3 [--tokens 4,5 ...]
                                   [--out FILE] [--print] [--greedy N] [--mean-nll]
                                   [--score-from K]
Each --tokens list is its own sequence from a zero state. --out writes, for every sequence
and every token in order, the n_vocab logits as little-endian float64 (so the file holds
sum(len) * n_vocab doubles). --print prints the first logits of every token. --greedy N
continues the one sequence by N argmax tokens and prints their ids (the golden test of the
shipped model). --mean-nll prints the mean next-token loss over the sequences (what
`recur perplexity` reports as its mean loss): of every token after the first (`recur
perplexity --score-all`), or with --score-from K only of the tokens after position K, predicted
by the logits at K .. len-2 (llama-perplexity's second half: K = len/2, `recur perplexity`).
"""

import argparse
import os
import sys

try:
    import numpy as np
except ImportError:
    # The pyenv python3 that may come first in PATH has no numpy; Debian's python3-numpy
    # lives with /usr/bin/python3. Re-run there once, else say what is missing.
    if os.path.exists("/usr/bin/python3") and not os.environ.get("RECUR_REF_REEXEC"):
        os.environ["RECUR_REF_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    sys.exit("mamba_ref: numpy is required (Debian: apt-get install python3-numpy)")

# Run as a script this file is __main__; the architecture modules import it as mamba_ref.
# Make that the same module, so their ModelError is the one main() catches.
if __name__ == "__main__":
    sys.modules.setdefault("mamba_ref", sys.modules[__name__])

import ggml_quants  # noqa: E402
from gguf_reader import GGUFError, GGUFFile  # noqa: E402


class ModelError(Exception):
    """The GGUF file is readable but is not a model this reference can run."""


# general.architecture -> the module that runs it (mamba itself is this file)
ARCHS = {"mamba2": "mamba2_ref", "rwkv6": "rwkv6_ref", "rwkv7": "rwkv7_ref",
         "granitehybrid": "granite_ref", "falcon-h1": "falcon_h1_ref",
         "nemotron_h": "nemotron_ref"}


def arch_module(kind):
    """The reference module of architecture `kind` (None for mamba: this module)."""
    if kind == "mamba":
        return None
    if kind not in ARCHS:
        raise ModelError("general.architecture %r is not one of %s"
                         % (kind, ", ".join(["mamba"] + sorted(ARCHS))))
    import importlib
    return importlib.import_module(ARCHS[kind])


# ---------------------------------------------------------------------------------------
# Elementwise functions


def rmsnorm(x, weight, eps):
    """x / sqrt(mean(x^2) + eps) * weight (weight None: no scaling)."""
    y = x / np.sqrt(np.mean(x * x) + eps)
    return y if weight is None else y * weight


def silu(x):
    """x * sigmoid(x), with sigmoid written through tanh so no exp can overflow."""
    return x * 0.5 * (1.0 + np.tanh(0.5 * x))


def softplus(x):
    """log(1 + exp(x)), computed as log1p(exp(-|x|)) + max(x, 0) so it cannot overflow."""
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0.0)


# The smallest distance of any quantized input seen since the last reset from a rounding
# boundary (x.5), relative to the input (in steps / |steps|): rounding is discontinuous there,
# so an engine whose input differs from this one's by that relative error may round the other
# way, and its logits differ from then on by a whole step's effect. --comparable uses it.
TIE = ggml_quants.TIE


class Matrix:
    """A projection's weights (float64, numpy order); `W @ v` is the product recur and
    llama.cpp compute: with block weights, on v quantized to the type's input type
    (ggml_quants: q8_0, q8_1 with its minimums' term, or q8_K)."""

    def __init__(self, w, ggml_type, mins=None):
        self.w = w
        self.shape = w.shape
        self.partner = ggml_quants.PARTNER.get(ggml_type)
        self.mins = mins  # q4_1 / q5_1: (rows, blocks) minimums

    def __matmul__(self, v):
        if self.partner == ggml_quants.Q8_0:
            return self.w @ ggml_quants.q8_0_input(v)
        if self.partner == ggml_quants.Q8_K:
            return self.w @ ggml_quants.q8_K_input(v)
        if self.partner == ggml_quants.Q8_1:
            vals, fix = ggml_quants.q8_1_input(v)
            return self.w @ vals + self.mins @ fix
        return self.w @ v


class Layer:
    """The weights of one Mamba-1 block, in numpy order."""

    def __init__(self, get, matrix, i, n_embd, d_conv, d_inner, d_state, dt_rank):
        p = "blk.%d." % i
        self.attn_norm = get(p + "attn_norm.weight", (n_embd,))
        self.ssm_in = matrix(p + "ssm_in.weight", (2 * d_inner, n_embd))
        self.conv1d = get(p + "ssm_conv1d.weight", (d_inner, d_conv))  # [c][k]
        self.conv_bias = get(p + "ssm_conv1d.bias", (d_inner,))
        self.ssm_x = matrix(p + "ssm_x.weight", (dt_rank + 2 * d_state, d_inner))
        self.ssm_dt = matrix(p + "ssm_dt.weight", (d_inner, dt_rank))
        self.dt_bias = get(p + "ssm_dt.bias", (d_inner,))
        self.A = get(p + "ssm_a", (d_inner, d_state))                  # A[c][n] = -exp(A_log)
        self.D = get(p + "ssm_d", (d_inner,))
        self.ssm_out = matrix(p + "ssm_out.weight", (n_embd, d_inner))


class MambaModel:
    """Hyperparameters and float64 weights of a Mamba-1 GGUF model."""

    kind = "mamba"

    def __init__(self, path):
        f = GGUFFile(path)
        kv = f.kv

        arch = kv.get("general.architecture")
        if arch != "mamba":
            raise ModelError("%s: general.architecture is %r, not 'mamba'" % (path, arch))

        def key(name):
            if name not in kv:
                raise ModelError("%s: missing key %s" % (path, name))
            return kv[name]

        self.n_embd = int(key("mamba.embedding_length"))
        self.n_layer = int(key("mamba.block_count"))
        self.d_conv = int(key("mamba.ssm.conv_kernel"))
        self.d_inner = int(key("mamba.ssm.inner_size"))
        self.d_state = int(key("mamba.ssm.state_size"))
        self.dt_rank = int(key("mamba.ssm.time_step_rank"))
        self.eps = float(key("mamba.attention.layer_norm_rms_epsilon"))
        self.dt_b_c_rms = bool(kv.get("mamba.ssm.dt_b_c_rms", False))
        if min(self.n_embd, self.n_layer, self.d_conv, self.d_inner,
               self.d_state, self.dt_rank) < 1:
            raise ModelError("%s: a Mamba size key is zero or negative" % path)

        def get(name, shape):
            """Tensor `name` as float64, checked to have numpy shape `shape` (None: any)."""
            if name not in f.tensors:
                raise ModelError("%s: missing tensor %s" % (path, name))
            t = f.tensor(name)
            if len(t.shape) != len(shape) or any(
                    want is not None and have != want for have, want in zip(t.shape, shape)):
                raise ModelError("%s: tensor %s has GGUF shape %s, expected %s" % (
                    path, name, list(reversed(t.shape)),
                    ["*" if d is None else d for d in reversed(shape)]))
            return t

        def matrix(name, shape):
            return Matrix(get(name, shape), f.tensors[name].ggml_type, f.minimums(name))

        self.token_embd = get("token_embd.weight", (None, self.n_embd))  # (n_vocab, n_embd)
        self.n_vocab = self.token_embd.shape[0]
        self.output_norm = get("output_norm.weight", (self.n_embd,))
        self.tied = "output.weight" not in f.tensors
        if self.tied:
            self.output = Matrix(self.token_embd, f.tensors["token_embd.weight"].ggml_type,
                                 f.minimums("token_embd.weight"))
        else:
            self.output = matrix("output.weight", (self.n_vocab, self.n_embd))
        self.layers = [Layer(get, matrix, i, self.n_embd, self.d_conv, self.d_inner,
                             self.d_state, self.dt_rank) for i in range(self.n_layer)]


class LayerState:
    """The recurrent state of one layer for one sequence."""

    def __init__(self, d_conv, d_inner, d_state):
        self.conv = np.zeros((d_conv - 1, d_inner))  # the last d_conv-1 inputs, oldest first
        self.ssm = np.zeros((d_inner, d_state))


def new_state(model):
    """A zero state for a new sequence: one LayerState (or the architecture's) per layer."""
    mod = arch_module(model.kind)
    if mod is not None:
        return mod.new_state(model)
    return [LayerState(model.d_conv, model.d_inner, model.d_state) for _ in model.layers]


# ---------------------------------------------------------------------------------------
# One Mamba-1 layer for one token, step by step


def in_projection(layer, h):
    """[xi, z] = ssm_in . h; each d_inner long."""
    xz = layer.ssm_in @ h
    d_inner = xz.shape[0] // 2
    return xz[:d_inner], xz[d_inner:]


def conv_step(conv_state, xi, conv1d, conv_bias):
    """Causal depthwise conv over the window w = [conv_state; xi] (d_conv rows).

    Returns (sum_k conv1d[c][k] * w[k][c] + conv_bias[c], new conv_state = last d_conv-1
    rows of w). No activation here: the caller applies silu.
    """
    w = np.vstack([conv_state, xi[None, :]])      # (d_conv, d_inner), newest row last
    out = np.sum(conv1d.T * w, axis=0) + conv_bias
    return out, w[1:]


def x_projection(layer, xc, dt_rank, d_state):
    """[dtr, B, C] = ssm_x . xc; lengths dt_rank, d_state, d_state."""
    dbc = layer.ssm_x @ xc
    return dbc[:dt_rank], dbc[dt_rank:dt_rank + d_state], dbc[dt_rank + d_state:]


def dt_projection(layer, dtr):
    """dt = softplus(ssm_dt . dtr + ssm_dt_bias); d_inner long."""
    return softplus(layer.ssm_dt @ dtr + layer.dt_bias)


def scan_step(ssm_state, xc, dt, A, B, C, D):
    """The selective scan for one token.

    s[c][n] = s[c][n] * exp(dt[c] * A[c][n]) + B[n] * xc[c] * dt[c]
    y[c]    = sum_n s[c][n] * C[n] + D[c] * xc[c]
    Returns (y, new ssm_state).
    """
    s = ssm_state * np.exp(dt[:, None] * A) + np.outer(dt * xc, B)
    y = s @ C + D * xc
    return y, s


def mamba_layer(model, layer, st, x):
    """One layer on the residual stream x for one token; updates st in place."""
    h = rmsnorm(x, layer.attn_norm, model.eps)
    xi, z = in_projection(layer, h)

    conv, st.conv = conv_step(st.conv, xi, layer.conv1d, layer.conv_bias)
    xc = silu(conv)

    dtr, B, C = x_projection(layer, xc, model.dt_rank, model.d_state)
    if model.dt_b_c_rms:  # Falcon-Mamba: each normalised over its own length, no weight
        dtr = rmsnorm(dtr, None, model.eps)
        B = rmsnorm(B, None, model.eps)
        C = rmsnorm(C, None, model.eps)
    dt = dt_projection(layer, dtr)

    y, st.ssm = scan_step(st.ssm, xc, dt, layer.A, B, C, layer.D)
    y = y * silu(z)
    return x + layer.ssm_out @ y


def forward(model, state, token):
    """Run one token through the model, updating `state`; returns the n_vocab logits."""
    mod = arch_module(model.kind)
    if mod is not None and hasattr(mod, "forward"):
        return mod.forward(model, state, token)
    # Mamba-1, and Mamba-2 (the same model around a different layer)
    x = model.token_embd[token].copy()
    step = mamba_layer if mod is None else mod.layer_step
    for layer, st in zip(model.layers, state):
        x = step(model, layer, st, x)
    return model.output @ rmsnorm(x, model.output_norm, model.eps)


def load_model(path):
    """The model of GGUF file `path`, by its general.architecture (ARCHS)."""
    kind = GGUFFile(path).kv.get("general.architecture")
    if kind == "mamba" or not isinstance(kind, str):
        return MambaModel(path)  # which names what is wrong with a non-string
    return arch_module(kind).load(path)


def check_tokens(model, tokens):
    for t in tokens:
        if not 0 <= t < model.n_vocab:
            raise ModelError("token id %d out of range [0, %d)" % (t, model.n_vocab))


def run_sequence(model, tokens, margins=None):
    """Logits for every token of one sequence from a zero state: shape (len, n_vocab).
    margins (a list): gets each token's smallest q8_0 rounding-tie distance (TIE)."""
    check_tokens(model, tokens)
    state = new_state(model)
    rows = []
    for t in tokens:
        TIE[0] = float("inf")
        rows.append(forward(model, state, t))
        if margins is not None:
            margins.append(TIE[0])
    return np.array(rows).reshape(len(tokens), model.n_vocab)


def log_softmax(logits):
    m = np.max(logits)
    return logits - m - np.log(np.sum(np.exp(logits - m)))


def greedy(model, prompt, n):
    """n tokens that follow prompt, each the argmax of the logits (no stop at EOS), and the
    smallest gap between the best and the second-best logit met on the way: a gap far above
    recur's rounding error means recur must pick the same tokens."""
    check_tokens(model, prompt)
    state = new_state(model)
    for t in prompt[:-1]:
        forward(model, state, t)
    token, out, gap = prompt[-1], [], np.inf
    for _ in range(n):
        logits = forward(model, state, token)
        top2 = np.sort(logits)[-2:]
        gap = min(gap, top2[1] - top2[0])
        token = int(np.argmax(logits))
        out.append(token)
    return out, gap


# ---------------------------------------------------------------------------------------
# Command line


def parse_tokens(text):
    try:
        tokens = [int(t) for t in text.replace(" ", "").split(",") if t != ""]
    except ValueError:
        raise argparse.ArgumentTypeError("bad token list %r (want e.g. 1,2,3)" % text)
    if not tokens:
        raise argparse.ArgumentTypeError("empty token list")
    return tokens


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="float64 reference of the forward pass of a mamba, mamba2, rwkv6, rwkv7, "
                    "granitehybrid, falcon-h1 or nemotron_h GGUF model (src/model/mamba.c, "
                    "docs/mamba2.md, docs/rwkv6.md, docs/rwkv7.md, tests/ref/granite_ref.py, "
                    "tests/ref/falcon_h1_ref.py, tests/ref/nemotron_ref.py)")
    ap.add_argument("model", help="GGUF file (general.architecture mamba, mamba2, rwkv6, rwkv7, "
                                  "granitehybrid, falcon-h1, nemotron_h)")
    ap.add_argument("--tokens", type=parse_tokens, action="append", required=True,
                    metavar="ID,ID,...", help="one sequence of token ids (repeatable)")
    ap.add_argument("--out", help="write all logits here as little-endian float64")
    ap.add_argument("--print", dest="print_", action="store_true",
                    help="print the first logits of every token")
    ap.add_argument("--greedy", type=int, default=0, metavar="N",
                    help="continue the one sequence by N argmax tokens; print their ids and "
                         "the smallest gap between the best and second-best logit")
    ap.add_argument("--mean-nll", action="store_true",
                    help="print the mean negative log-likelihood (nats) of every token after "
                         "the first of each sequence, given the tokens before it")
    ap.add_argument("--score-from", type=int, default=0, metavar="K",
                    help="--mean-nll: score only the tokens after position K of each sequence")
    ap.add_argument("--comparable", type=float, default=None, metavar="EPS",
                    help="print, per sequence, how many leading tokens come before the first "
                         "whose q8_0 input quantization passed within a relative EPS of a "
                         "rounding tie (after it a float32 engine may round differently)")
    args = ap.parse_args(argv)
    if args.greedy and len(args.tokens) != 1:
        ap.error("--greedy takes exactly one --tokens sequence")

    try:
        model = load_model(args.model)
        if args.greedy:
            ids, gap = greedy(model, args.tokens[0], args.greedy)
            print(",".join(str(t) for t in ids))
            print("smallest top-2 logit gap: %.6g" % gap, file=sys.stderr)
            return 0
        margins = [[] for _ in args.tokens]
        results = [run_sequence(model, seq, m) for seq, m in zip(args.tokens, margins)]
    except (GGUFError, ModelError, OSError) as e:
        print("mamba_ref: error: %s" % e, file=sys.stderr)
        return 1
    except (ValueError, TypeError) as e:  # e.g. a size key holding a string
        print("mamba_ref: error: %s: bad model file: %s" % (args.model, e), file=sys.stderr)
        return 1

    if args.comparable is not None:
        for m in margins:
            near = [i for i, v in enumerate(m) if v < args.comparable]
            print(near[0] if near else len(m))
    if args.mean_nll:
        nll = [log_softmax(row)[nxt] for seq, logits in zip(args.tokens, results)
               for row, nxt in list(zip(logits[:-1], seq[1:]))[args.score_from:]]
        print("%.9f" % -np.mean(nll))
    if args.out:
        try:
            np.concatenate(results).astype("<f8").tofile(args.out)
        except OSError as e:
            print("mamba_ref: error: %s" % e, file=sys.stderr)
            return 1
    if args.print_:
        for i, (seq, logits) in enumerate(zip(args.tokens, results)):
            for token, row in zip(seq, logits):
                print("seq %d token %d: argmax %d  %s" % (
                    i, token, int(np.argmax(row)),
                    " ".join("%.6g" % v for v in row[:8])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
