"""rwkv6_ref.py: the float64 reference of llama.cpp's RWKV-6 "Finch" (docs/rwkv6.md), for
mamba_ref.py's command line, which loads it when general.architecture is "rwkv6".

Written from docs/rwkv6.md sections 1-4 only. Tokens run one at a time; each step below is its
own function named after the equation it computes ((0)-(18) of section 3). The state of one
layer (section 4) is the two token-shift rows (the previous token's LayerNorm'd time-mix and
channel-mix inputs, zero at a sequence start) and the WKV matrix S[h][i][j] (i = key index,
j = value index). Everything is float64 numpy, vectorised over channels and heads.

The parts RWKV-7 shares (LayerNorm with bias, the per-head group norm, the state, the tensor
reader with llama.cpp's shape rule) are here and rwkv7_ref.py imports them.

Weights are numpy arrays in numpy order (GGUF {ne0, ne1} -> shape (ne1, ne0)); a projection
from n inputs to m outputs is an (m, n) mamba_ref.Matrix, applied as W @ v (q8_0 / q4_0
weights quantize their inputs to q8_0 as ggml does).
"""

import numpy as np

from mamba_ref import Matrix, ModelError, silu
from gguf_reader import GGUFFile

GROUP_NORM_EPS = 64e-5   # (15): fixed in the graph, not the GGUF eps


# ---------------------------------------------------------------------------------------
# Elementwise pieces shared with RWKV-7


def layer_norm(x, weight, bias, eps):
    """LN(x; w, b) = (x - mean(x)) / sqrt(var(x) + eps) * w + b over the last axis (var: the
    mean of the squared deviations); weight None: no affine part."""
    d = x - np.mean(x, axis=-1, keepdims=True)
    y = d / np.sqrt(np.mean(d * d, axis=-1, keepdims=True) + eps)
    return y if weight is None else y * weight + bias


def group_norm(y, n_head, weight, bias):
    """(15): a LayerNorm of each head's head_size values (eps 64e-5, no affine), then the
    affine time_mix_ln over all n_embd channels."""
    return layer_norm(y.reshape(n_head, -1), None, None, GROUP_NORM_EPS).reshape(-1) \
        * weight + bias


def sigmoid(x):
    """1 / (1 + exp(-x)), written through tanh so no exp can overflow."""
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def relu_squared(x):
    return np.square(np.maximum(x, 0.0))


def lerp(x, x_prev, mu):
    """The token-shift mix x + (x_prev - x) * mu."""
    return x + (x_prev - x) * mu


# ---------------------------------------------------------------------------------------
# Reading a GGUF file the way llama.cpp's loader checks it


def _padded(ne):
    return list(ne) + [1] * (4 - len(ne))


class Reader:
    """Keys `ARCH.name` and tensors of one GGUF file, with ModelErrors that name what is wrong.

    Tensor shapes are given in GGUF order (fastest first, None: any size) and compared as
    llama.cpp compares them: both padded to 4 dimensions with 1s, so {n} == {n, 1, 1}. A tensor
    comes back as float64 in the numpy order of the shape asked for; so a lerp vector, {n_embd,
    1, 1} in llama.cpp's files, is asked for as {n_embd} and comes back as (n_embd,).
    """

    def __init__(self, path, arch):
        self.path = path
        self.arch = arch
        self.f = GGUFFile(path)
        kind = self.f.kv.get("general.architecture")
        if kind != arch:
            raise ModelError("%s: general.architecture is %r, not %r" % (path, kind, arch))

    def error(self, what):
        return ModelError("%s: %s" % (self.path, what))

    def key(self, name, default=None, required=True):
        full = "%s.%s" % (self.arch, name)
        if full not in self.f.kv:
            if required:
                raise self.error("missing key %s" % full)
            return default
        return self.f.kv[full]

    def u32(self, name, default=None, required=True):
        v = self.key(name, default, required)
        return None if v is None else int(v)

    def has(self, name):
        return name in self.f.tensors

    def get(self, name, ne):
        if name not in self.f.tensors:
            raise self.error("missing tensor %s" % name)
        have = self.f.tensors[name].ne
        want = [h if w is None else w for w, h in zip(_padded(ne), _padded(have))]
        if len(have) > 4 or _padded(have) != want:
            raise self.error("tensor %s has GGUF shape %s, expected %s" % (
                name, list(have), ["*" if w is None else w for w in ne]))
        return self.f.tensor(name).reshape(tuple(reversed(want[:len(ne)])))

    def matrix(self, name, ne):
        """A projection (GGUF {n_in, n_out}) as a Matrix."""
        return Matrix(self.get(name, ne), self.f.tensors[name].ggml_type, self.f.minimums(name))


def read_common(m, rd):
    """The keys and tensors RWKV-6 and RWKV-7 share (sections 1-2 of both notes)."""
    m.n_embd = rd.u32("embedding_length")
    m.n_layer = rd.u32("block_count")
    m.n_ff = rd.u32("feed_forward_length")
    m.head_size = rd.u32("wkv.head_size")
    # optional in llama.cpp's loader; absent, its zero-initialised hparams give eps 0
    m.eps = float(rd.key("attention.layer_norm_epsilon", 0.0, required=False))
    shift = rd.u32("token_shift_count", 2, required=False)
    if shift != 2:
        raise rd.error("%s.token_shift_count is %d; the graph needs 2" % (rd.arch, shift))
    if min(m.n_embd, m.n_layer, m.n_ff, m.head_size) < 1 or m.n_embd % m.head_size:
        raise rd.error("inconsistent sizes: n_embd %d, n_layer %d, n_ff %d, head_size %d "
                       "(n_embd must be a multiple of head_size)"
                       % (m.n_embd, m.n_layer, m.n_ff, m.head_size))
    m.n_head = m.n_embd // m.head_size

    E = m.n_embd
    m.token_embd = rd.get("token_embd.weight", (E, None))          # (n_vocab, n_embd)
    m.n_vocab = m.token_embd.shape[0]
    m.ln0_w = rd.get("token_embd_norm.weight", (E,))
    m.ln0_b = rd.get("token_embd_norm.bias", (E,))
    m.output_norm_w = rd.get("output_norm.weight", (E,))
    m.output_norm_b = rd.get("output_norm.bias", (E,))
    m.output = rd.matrix("output.weight", (E, m.n_vocab))         # required, never tied


def read_layer_common(L, rd, p, m):
    """Per-layer tensors of both versions: the norms, W_r/k/v/o, the group norm affine, the
    channel-mix mu_k, W_k', W_v'."""
    E = m.n_embd
    L.attn_norm_w = rd.get(p + "attn_norm.weight", (E,))
    L.attn_norm_b = rd.get(p + "attn_norm.bias", (E,))
    L.attn_norm_2_w = rd.get(p + "attn_norm_2.weight", (E,))
    L.attn_norm_2_b = rd.get(p + "attn_norm_2.bias", (E,))
    L.W_r = rd.matrix(p + "time_mix_receptance.weight", (E, E))
    L.W_k = rd.matrix(p + "time_mix_key.weight", (E, E))
    L.W_v = rd.matrix(p + "time_mix_value.weight", (E, E))
    L.W_o = rd.matrix(p + "time_mix_output.weight", (E, E))
    L.ln_x_w = rd.get(p + "time_mix_ln.weight", (E,))
    L.ln_x_b = rd.get(p + "time_mix_ln.bias", (E,))
    L.cm_mu_k = rd.get(p + "channel_mix_lerp_k.weight", (E,))      # {n_embd, 1, 1}
    L.cm_W_k = rd.matrix(p + "channel_mix_key.weight", (E, m.n_ff))
    L.cm_W_v = rd.matrix(p + "channel_mix_value.weight", (m.n_ff, E))


# ---------------------------------------------------------------------------------------
# The model


LERP_NAMES = ("w", "k", "v", "r", "g")   # the order of time_mix_lerp_fused and of w1 / w2


class Rwkv6Layer:
    def __init__(self, rd, i, m):
        p = "blk.%d." % i
        E, D_mix, D_dec = m.n_embd, m.d_mix, m.d_dec
        read_layer_common(self, rd, p, m)
        self.mu_x = rd.get(p + "time_mix_lerp_x.weight", (E,))      # {n_embd, 1, 1}
        fused = p + "time_mix_lerp_fused.weight"
        if rd.has(fused):
            self.mu = rd.get(fused, (E, 1, 1, 5)).reshape(5, E)      # mu_w, mu_k, mu_v, mu_r, mu_g
        else:  # older files: five separate lerps; name the fused one when none is there
            names = [p + "time_mix_lerp_%s.weight" % c for c in LERP_NAMES]
            if not any(rd.has(n) for n in names):
                raise rd.error("missing tensor %s (nor the older time_mix_lerp_w/k/v/r/g)"
                               % fused)
            self.mu = np.array([rd.get(n, (E,)) for n in names])
        self.w1 = rd.matrix(p + "time_mix_w1.weight", (E, 5 * D_mix))
        w2 = rd.get(p + "time_mix_w2.weight", (D_mix, E, 5))          # (5, n_embd, D_mix)
        w2_type = rd.f.tensors[p + "time_mix_w2.weight"].ggml_type
        w2_mins = rd.f.minimums(p + "time_mix_w2.weight")               # (5, n_embd, blocks)
        self.w2 = [Matrix(w2[c], w2_type, None if w2_mins is None else w2_mins[c])
                   for c in range(5)]
        self.decay = rd.get(p + "time_mix_decay.weight", (E,))
        self.decay_w1 = rd.matrix(p + "time_mix_decay_w1.weight", (E, D_dec))
        self.decay_w2 = rd.matrix(p + "time_mix_decay_w2.weight", (D_dec, E))
        self.u = rd.get(p + "time_mix_first.weight", (m.head_size, m.n_head))  # (n_head, hs)
        self.W_g = rd.matrix(p + "time_mix_gate.weight", (E, E))
        self.cm_mu_r = rd.get(p + "channel_mix_lerp_r.weight", (E,))      # {n_embd, 1, 1}
        self.cm_W_r = rd.matrix(p + "channel_mix_receptance.weight", (E, E))


class Rwkv6Model:
    kind = "rwkv6"

    def __init__(self, path):
        rd = Reader(path, "rwkv6")
        self.d_mix = rd.u32("time_mix_extra_dim")
        self.d_dec = rd.u32("time_decay_extra_dim")
        self.rescale_every = rd.u32("rescale_every_n_layers", 0, required=False)
        read_common(self, rd)
        if min(self.d_mix, self.d_dec) < 1:
            raise rd.error("time_mix_extra_dim / time_decay_extra_dim is zero")
        self.layers = [Rwkv6Layer(rd, i, self) for i in range(self.n_layer)]


def load(path):
    """mamba_ref.load_model's entry for general.architecture "rwkv6"."""
    return Rwkv6Model(path)


class RwkvLayerState:
    """One layer's state for one sequence (section 4 of both notes): the token-shift rows
    shift_att (previous token's LN(x; attn_norm)) and shift_ffn (its LN(x; attn_norm_2)), and
    wkv[h] (head_size x head_size; RWKV-6 [key][value], RWKV-7 [value][key])."""

    def __init__(self, n_embd, n_head, head_size):
        self.shift_att = np.zeros(n_embd)
        self.shift_ffn = np.zeros(n_embd)
        self.wkv = np.zeros((n_head, head_size, head_size))

    def k_row(self):
        """The K row as llama.cpp stores it: [shift_att | shift_ffn], 2 * n_embd floats."""
        return np.concatenate([self.shift_att, self.shift_ffn])

    def v_row(self):
        """The V row: S[h][i][j] at h*head_size^2 + i*head_size + j."""
        return self.wkv.reshape(-1).copy()

    def set_rows(self, k_row, v_row):
        n = self.shift_att.size
        self.shift_att = np.array(k_row[:n], dtype=np.float64)
        self.shift_ffn = np.array(k_row[n:2 * n], dtype=np.float64)
        self.wkv = np.array(v_row, dtype=np.float64).reshape(self.wkv.shape)


def new_state(model):
    """A zero state for a new sequence: one RwkvLayerState per layer."""
    return [RwkvLayerState(model.n_embd, model.n_head, model.head_size) for _ in model.layers]


# ---------------------------------------------------------------------------------------
# TimeMix (7)-(16)


def ddlerp(layer, x, x_prev):
    """(7)-(11): the data-dependent lerp. Returns the mixed inputs x_w, x_k, x_v, x_r, x_g."""
    sx = x_prev - x                                                    # (7)
    xxx = x + sx * layer.mu_x                                          # (8)
    hh = np.tanh(layer.w1 @ xxx).reshape(5, -1)                        # (9) 5 chunks of D_mix
    m = [layer.w2[c] @ hh[c] for c in range(5)]                        # (10)
    return [x + sx * (layer.mu[c] + m[c]) for c in range(5)]           # (11)


def decay(layer, x_w):
    """(13): w = exp(-exp(d + decay_w2 . tanh(decay_w1 . x_w))), 0 < w < 1."""
    return np.exp(-np.exp(layer.decay + layer.decay_w2 @ np.tanh(layer.decay_w1 @ x_w)))


def wkv6(S, r, k, v, w, u):
    """(14) for every head at once. S: (n_head, hs, hs) [key i][value j]; r, k, v, w:
    (n_embd,); u: (n_head, hs). Returns (y (n_embd,), the new S).

      y[j]    = sum_i r[i] * (S[i][j] + u[i] k[i] v[j])
      S[i][j] = w[i] S[i][j] + k[i] v[j]
    """
    H, N = u.shape
    r, k, v, w = (t.reshape(H, N) for t in (r, k, v, w))
    y = np.einsum("hi,hij->hj", r, S) + np.sum(r * u * k, axis=1)[:, None] * v
    S = w[:, :, None] * S + k[:, :, None] * v[:, None, :]
    return y.reshape(-1), S


def time_mix(m, layer, st, x, x_prev):
    """(7)-(16) for one token; updates st.wkv."""
    x_w, x_k, x_v, x_r, x_g = ddlerp(layer, x, x_prev)
    r = layer.W_r @ x_r                                                # (12)
    k = layer.W_k @ x_k
    v = layer.W_v @ x_v
    g = silu(layer.W_g @ x_g)
    w = decay(layer, x_w)                                              # (13)
    y, st.wkv = wkv6(st.wkv, r, k, v, w, layer.u)                      # (14)
    o = group_norm(y, m.n_head, layer.ln_x_w, layer.ln_x_b)            # (15)
    return layer.W_o @ (o * g)                                         # (16)


def channel_mix(layer, f, f_prev):
    """(17)-(18): sigmoid(W_r' x_r) * (W_v' . relu(W_k' x_k)^2)."""
    x_k = lerp(f, f_prev, layer.cm_mu_k)
    x_r = lerp(f, f_prev, layer.cm_mu_r)
    return sigmoid(layer.cm_W_r @ x_r) * (layer.cm_W_v @ relu_squared(layer.cm_W_k @ x_k))


# ---------------------------------------------------------------------------------------
# The model, (0)-(6)


def block(m, il, layer, st, x):
    """(1)-(6): layer il on the residual stream x for one token; updates st."""
    a = layer_norm(x, layer.attn_norm_w, layer.attn_norm_b, m.eps)              # (1)
    x = x + time_mix(m, layer, st, a, st.shift_att)                             # (2)
    f = layer_norm(x, layer.attn_norm_2_w, layer.attn_norm_2_b, m.eps)          # (3)
    x = x + channel_mix(layer, f, st.shift_ffn)                                 # (4)
    if m.rescale_every and (il + 1) % m.rescale_every == 0:                     # (5)
        x = x * 0.5
    st.shift_att, st.shift_ffn = a, f                                           # (6)
    return x


def forward(m, state, token):
    """Run one token through the model, updating `state`; returns the n_vocab logits."""
    x = layer_norm(m.token_embd[token], m.ln0_w, m.ln0_b, m.eps)               # (0)
    for il, (layer, st) in enumerate(zip(m.layers, state)):
        x = block(m, il, layer, st, x)
    return m.output @ layer_norm(x, m.output_norm_w, m.output_norm_b, m.eps)
