"""rwkv7_ref.py: the float64 reference of llama.cpp's RWKV-7 "Goose" (docs/rwkv7.md), for
mamba_ref.py's command line, which loads it when general.architecture is "rwkv7".

Written from docs/rwkv7.md sections 1-4 only. Tokens run one at a time; each step below is its
own function named after the equation it computes ((0)-(17) of section 3). The layer state is
RWKV-6's (rwkv6_ref.RwkvLayerState): the two token-shift rows and the WKV matrix, here
S[h][i][j] with i = VALUE index, j = KEY index (the transpose of RWKV-6's). v_first (layer 0's
v of the current token, mixed into the later layers' v) lives for one token only and is not
part of the state. Shared pieces (LayerNorm, group norm, reader, state) come from rwkv6_ref.
"""

import numpy as np

import rwkv6_ref
from rwkv6_ref import (Reader, group_norm, layer_norm, lerp, read_common, read_layer_common,
                       relu_squared, sigmoid)

# the state is RWKV-6's (shift rows + one head_size^2 matrix per head), zero at the start
new_state = rwkv6_ref.new_state

DECAY_SCALE = 0.606531   # (8): the literal the graph uses (about e^-0.5)
L2_NORM_EPS = 1e-12      # (12): a floor on the norm, 1 / max(||t||, eps)


class Rwkv7Layer:
    def __init__(self, rd, i, m):
        p = "blk.%d." % i
        E = m.n_embd
        read_layer_common(self, rd, p, m)
        self.mu = rd.get(p + "time_mix_lerp_fused.weight", (E, 1, 1, 6)).reshape(6, E)
        self.w0 = rd.get(p + "time_mix_w0.weight", (E,))
        self.w1 = rd.matrix(p + "time_mix_w1.weight", (E, m.r_w))
        self.w2 = rd.matrix(p + "time_mix_w2.weight", (m.r_w, E))
        self.a0 = rd.get(p + "time_mix_a0.weight", (E,))
        self.a1 = rd.matrix(p + "time_mix_a1.weight", (E, m.r_a))
        self.a2 = rd.matrix(p + "time_mix_a2.weight", (m.r_a, E))
        # layer 0's v0/v1/v2 are required (as llama.cpp's loader does) with R_a shapes and
        # never used: layer 0 sets v_first instead of mixing it in
        r_v = m.r_a if i == 0 else m.r_v
        self.v0 = rd.get(p + "time_mix_v0.weight", (E,))
        self.v1 = rd.matrix(p + "time_mix_v1.weight", (E, r_v))
        self.v2 = rd.matrix(p + "time_mix_v2.weight", (r_v, E))
        self.g1 = rd.matrix(p + "time_mix_g1.weight", (E, m.r_g))
        self.g2 = rd.matrix(p + "time_mix_g2.weight", (m.r_g, E))
        self.k_k = rd.get(p + "time_mix_k_k.weight", (E,))
        self.k_a = rd.get(p + "time_mix_k_a.weight", (E,))
        self.r_k = rd.get(p + "time_mix_r_k.weight", (E,))


class Rwkv7Model:
    kind = "rwkv7"

    def __init__(self, path):
        rd = Reader(path, "rwkv7")
        self.r_w = rd.u32("attention.decay_lora_rank")
        self.r_a = rd.u32("attention.iclr_lora_rank")
        self.r_v = rd.u32("attention.value_residual_mix_lora_rank")
        read_common(self, rd)
        # the gate rank key is optional; without it the rank is g1's (g1 / g2 are required)
        self.r_g = rd.u32("attention.gate_lora_rank", None, required=False)
        if self.r_g is None:
            name = "blk.0.time_mix_g1.weight"
            self.r_g = rd.get(name, (self.n_embd, None)).shape[0]
        if min(self.r_w, self.r_a, self.r_v, self.r_g) < 1:
            raise rd.error("a LoRA rank is zero")
        self.layers = [Rwkv7Layer(rd, i, self) for i in range(self.n_layer)]


def load(path):
    """mamba_ref.load_model's entry for general.architecture "rwkv7"."""
    return Rwkv7Model(path)


# ---------------------------------------------------------------------------------------
# TimeMix (6)-(17)


def token_shift_mix(layer, x, x_prev):
    """(6): x_c = x + (x_prev - x) * lerp_fused[c] for c = r, w, k, v, a, g."""
    return [lerp(x, x_prev, layer.mu[c]) for c in range(6)]


def decay(layer, x_w):
    """(8): w = exp(-0.606531 * sigmoid(w0 + w2 . tanh(w1 . x_w)))."""
    return np.exp(-DECAY_SCALE * sigmoid(layer.w0 + layer.w2 @ np.tanh(layer.w1 @ x_w)))


def value_residual(layer, v, v_first, x_v):
    """(9), layers after the first: v + (v_first - v) * sigmoid(v0 + v2 . (v1 . x_v))."""
    return v + (v_first - v) * sigmoid(layer.v0 + layer.v2 @ (layer.v1 @ x_v))


def gate(layer, x_g):
    """(10): g = g2 . sigmoid(g1 . x_g)."""
    return layer.g2 @ sigmoid(layer.g1 @ x_g)


def iclr(layer, x_a):
    """(11): a = sigmoid(a0 + a2 . (a1 . x_a))."""
    return sigmoid(layer.a0 + layer.a2 @ (layer.a1 @ x_a))


def l2_normalise_heads(t, n_head):
    """(12): each head's t_h / max(||t_h||_2, 1e-12)."""
    th = t.reshape(n_head, -1)
    norm = np.sqrt(np.sum(th * th, axis=1, keepdims=True))
    return (th / np.maximum(norm, L2_NORM_EPS)).reshape(-1)


def wkv7(S, r, w, k, v, alpha, beta):
    """(14) for every head at once. S: (n_head, hs, hs) [value i][key j]; the vectors are
    (n_embd,). Returns (y (n_embd,), the new S).

      sa[i]   = sum_j alpha[j] S[i][j]
      S[i][j] = S[i][j] w[j] + v[i] k[j] + sa[i] beta[j]
      y[i]    = sum_j S[i][j] r[j]
    """
    H, N = S.shape[0], S.shape[1]
    r, w, k, v, alpha, beta = (t.reshape(H, N) for t in (r, w, k, v, alpha, beta))
    sa = np.einsum("hij,hj->hi", S, alpha)
    S = S * w[:, None, :] + v[:, :, None] * k[:, None, :] + sa[:, :, None] * beta[:, None, :]
    y = np.einsum("hij,hj->hi", S, r)
    return y.reshape(-1), S


def bonus(r, k, v, r_k, n_head):
    """(16): per head, v_h * sum_j r[j] k[j] r_k[j]."""
    s = np.sum((r * k * r_k).reshape(n_head, -1), axis=1)
    return (v.reshape(n_head, -1) * s[:, None]).reshape(-1)


def time_mix(m, il, layer, st, x, x_prev, v_first):
    """(6)-(17) for one token of layer il; updates st.wkv. Returns (TimeMix, v_first)."""
    x_r, x_w, x_k, x_v, x_a, x_g = token_shift_mix(layer, x, x_prev)        # (6)
    r = layer.W_r @ x_r                                                      # (7)
    k = layer.W_k @ x_k
    v = layer.W_v @ x_v
    w = decay(layer, x_w)                                                    # (8)
    if il == 0:                                                              # (9)
        v_first = v
    else:
        v = value_residual(layer, v, v_first, x_v)
    g = gate(layer, x_g)                                                     # (10)
    a = iclr(layer, x_a)                                                     # (11)
    kk = l2_normalise_heads(k * layer.k_k, m.n_head)                         # (12)
    k = k + (a * k * layer.k_a - k * layer.k_a)                              # (13)
    y, st.wkv = wkv7(st.wkv, r, w, k, v, -kk, kk * a)                        # (14)
    o = group_norm(y, m.n_head, layer.ln_x_w, layer.ln_x_b)                  # (15)
    o = o + bonus(r, k, v, layer.r_k, m.n_head)                              # (16)
    return layer.W_o @ (o * g), v_first                                      # (17)


def channel_mix(layer, f, f_prev):
    """(4): W_v' . relu(W_k' . (f + (f_prev - f) * mu_k))^2 (no receptance in RWKV-7)."""
    return layer.cm_W_v @ relu_squared(layer.cm_W_k @ lerp(f, f_prev, layer.cm_mu_k))


# ---------------------------------------------------------------------------------------
# The model, (0)-(5)


def block(m, il, layer, st, x, v_first):
    """(1)-(5): layer il on the residual stream x for one token; updates st.
    Returns (x, v_first)."""
    a_in = layer_norm(x, layer.attn_norm_w, layer.attn_norm_b, m.eps)             # (1)
    tm, v_first = time_mix(m, il, layer, st, a_in, st.shift_att, v_first)
    x = x + tm                                                                    # (2)
    f = layer_norm(x, layer.attn_norm_2_w, layer.attn_norm_2_b, m.eps)            # (3)
    x = x + channel_mix(layer, f, st.shift_ffn)                                   # (4)
    st.shift_att, st.shift_ffn = a_in, f                                          # (5)
    return x, v_first


def forward(m, state, token):
    """Run one token through the model, updating `state`; returns the n_vocab logits."""
    x = layer_norm(m.token_embd[token], m.ln0_w, m.ln0_b, m.eps)                 # (0)
    v_first = None
    for il, (layer, st) in enumerate(zip(m.layers, state)):
        x, v_first = block(m, il, layer, st, x, v_first)
    return m.output @ layer_norm(x, m.output_norm_w, m.output_norm_b, m.eps)
