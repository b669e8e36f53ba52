"""granite_ref.py: the float64 reference of llama.cpp's granitehybrid (IBM Granite 4.0-H), for
mamba_ref.py's command line, which loads it when general.architecture is "granitehybrid".

The model, as llama.cpp builds it (src/models/granite-hybrid.cpp, the embedding scale in
llama-graph.cpp's build_inp_embd), for one token at a time:

    x = token_embd[t] * embedding_scale
    per layer i:
        h = rmsnorm(x) * attn_norm
        a = Mamba-2 mixer of h            when head_count_kv[i] == 0 (mamba2_ref.mixer_step)
          = attention of h over the past  otherwise (attention_step below)
        x = x + residual_scale * a
        h = rmsnorm(x) * ffn_norm
        x = x + residual_scale * ffn_down . (silu(ffn_gate . h) * (ffn_up . h))
    logits = output . (rmsnorm(x) * output_norm) / logit_scale

A scale key that is absent or 0 is not applied (llama.cpp tests each against 0); a missing
attention.scale is 1/sqrt(head_dim). The attention is GQA with head_dim = n_embd / head_count
(or attention.key_length), query head h reading K/V head h // (head_count / head_count_kv[i]),
causal, with no positional encoding: Granite 4.0-H writes rope.scaling.finetuned = false, and
llama.cpp applies RoPE when that key is true or missing, which this reference refuses.

When the file has blk.i.attn_q_norm.weight and attn_k_norm.weight (none of the three families'
checkpoints does; recur takes them, docs/hybrid.md), q and k are RMS-normed after their
projections and before RoPE, with the model's eps:

    q_h = q_h / sqrt(mean(q_h^2) + eps) * q_norm      for each head h, q_norm of head_dim
    q   = q   / sqrt(mean(q^2)   + eps) * q_norm      q_norm of n_head * head_dim: all of q
    (and k the same with k_norm, n_head_kv heads)

as llama.cpp's Qwen3 (each head) and OLMo2 (the whole vector) graphs apply them. This module's
attention_step is the one of nemotron_ref and falcon_h1_ref too.

The state of a sequence is, per layer, a Mamba-2 state (conv window and SSM state) or the K
and V rows of every past token (an attention cache that grows with the sequence).

To compare with llama.cpp itself: tests/ref/llama_logits.c writes llama.cpp's logits of the
same token lists (its header says how to build it); its float32 logits and this reference's
float64 ones (mamba_ref.py --out) agree to float32 rounding on f32 models.
"""

import numpy as np

from mamba_ref import ModelError, rmsnorm, silu
from mamba2_ref import Mamba2Layer, Mamba2State, load_ends, mixer_step, tensor_access
from gguf_reader import GGUFFile

ARCH = "granitehybrid"


class AttentionLayer:
    """The weights of one attention layer (numpy order: a projection is (out, in))."""

    def __init__(self, get, matrix, i, m, n_head_kv):
        p = "blk.%d." % i
        hd = m.head_dim
        self.n_head_kv = n_head_kv
        self.attn_norm = get(p + "attn_norm.weight", (m.n_embd,))
        self.wq = matrix(p + "attn_q.weight", (m.n_head * hd, m.n_embd))
        self.wk = matrix(p + "attn_k.weight", (n_head_kv * hd, m.n_embd))
        self.wv = matrix(p + "attn_v.weight", (n_head_kv * hd, m.n_embd))
        self.wo = matrix(p + "attn_output.weight", (m.n_embd, m.n_head * hd))
        # the RMS norms of q and k before RoPE (llama.cpp's attn_q_norm / attn_k_norm), as a
        # pair or not at all; each weight is (head_dim,), every head normed on its own with it
        # (Qwen3's form), or the whole vector's size, one norm over all of it (OLMo2's)
        names = [p + "attn_q_norm.weight", p + "attn_k_norm.weight"]
        have = [n in get.tensors for n in names]
        self.q_norm = self.k_norm = None
        if any(have):
            if not all(have):
                raise ModelError("tensor %s without %s: the Q and K norms come as a pair"
                                 % ((names[0], names[1]) if have[0] else (names[1], names[0])))
            self.q_norm = qk_norm_weight(get, names[0], hd, m.n_head * hd)
            self.k_norm = qk_norm_weight(get, names[1], hd, n_head_kv * hd)


def qk_norm_weight(get, name, hd, whole):
    """The weight of a Q or K norm: (hd,) or (whole,), any other shape refused."""
    t = get(name, (None,))
    if t.shape[0] not in (hd, whole):
        raise ModelError("tensor %s has numpy shape %s: a Q/K norm is (%d,) or (%d,)"
                         % (name, t.shape, hd, whole))
    return np.asarray(t, dtype=np.float64)


def qk_normed(v, weight, eps):
    """v (heads, head_dim) through a Q/K norm: with a (head_dim,) weight each head (row) is
    divided by the root of its own mean square plus eps, then scaled by the weight; with a
    weight of every value, the mean square is over all of v at once."""
    if weight is None:
        return v
    if weight.shape[0] == v.shape[1]:
        ms = np.mean(v * v, axis=1, keepdims=True)      # (heads, 1): each head's own
        return v / np.sqrt(ms + eps) * weight
    flat = v.reshape(-1)
    return (flat / np.sqrt(np.mean(flat * flat) + eps) * weight).reshape(v.shape)


class FFN:
    """The SwiGLU feed-forward of one layer."""

    def __init__(self, get, matrix, i, m, norm_name="ffn_norm.weight"):
        p = "blk.%d." % i
        self.norm = get(p + norm_name, (m.n_embd,))
        self.gate = matrix(p + "ffn_gate.weight", (m.n_ff[i], m.n_embd))
        self.up = matrix(p + "ffn_up.weight", (m.n_ff[i], m.n_embd))
        self.down = matrix(p + "ffn_down.weight", (m.n_embd, m.n_ff[i]))


class GraniteModel:
    kind = ARCH

    def __init__(self, path):
        f = GGUFFile(path)
        kv = f.kv

        def key(name, default=None):
            if ARCH + "." + name not in kv:
                if default is not None:
                    return default
                raise ModelError("%s: missing key %s.%s" % (path, ARCH, name))
            return kv[ARCH + "." + name]

        def per_layer(name, default=None):
            """A key that is one value for every layer or an array of one per layer."""
            v = key(name, default)
            if isinstance(v, (list, tuple, np.ndarray)):
                if len(v) != self.n_layer:
                    raise ModelError("%s: %s.%s has %d entries for %d layers"
                                     % (path, ARCH, name, len(v), self.n_layer))
                return [int(e) for e in v]
            return [int(v)] * self.n_layer

        self.n_embd = int(key("embedding_length"))
        self.n_layer = int(key("block_count"))
        self.eps = float(key("attention.layer_norm_rms_epsilon"))
        self.n_ff = per_layer("feed_forward_length")
        n_head = per_layer("attention.head_count")
        # a missing head_count_kv means head_count (no Mamba-2 layer at all)
        self.n_head_kv = per_layer("attention.head_count_kv", n_head)
        if len(set(n_head)) != 1 or n_head[0] < 1:
            raise ModelError("%s: this reference takes one positive attention.head_count" % path)
        self.n_head = n_head[0]
        hd_k = int(key("attention.key_length", self.n_embd // self.n_head))
        hd_v = int(key("attention.value_length", self.n_embd // self.n_head))
        if hd_k != hd_v or hd_k < 1:
            raise ModelError("%s: key and value head sizes differ (%d, %d)" % (path, hd_k, hd_v))
        self.head_dim = hd_k
        if int(key("expert_count", 0)):
            raise ModelError("%s: mixture-of-experts Granite is not in this reference" % path)
        if bool(key("rope.scaling.finetuned", True)):
            raise ModelError("%s: %s.rope.scaling.finetuned is true or missing, so llama.cpp "
                             "applies RoPE, which this reference does not" % (path, ARCH))
        # 0: not applied (llama.cpp's tests); attention: 1/sqrt(head_dim) instead
        self.embd_scale = float(key("embedding_scale", 0.0))
        self.residual_scale = float(key("residual_scale", 0.0))
        self.logit_scale = float(key("logit_scale", 0.0))
        self.attn_scale = float(key("attention.scale", 0.0)) or 1.0 / np.sqrt(self.head_dim)

        # the Mamba-2 sizes (mamba2_ref.Mamba2Model's names, which Mamba2Layer and
        # mixer_step read)
        self.d_conv = int(key("ssm.conv_kernel"))
        self.d_inner = int(key("ssm.inner_size"))
        self.d_state = int(key("ssm.state_size"))
        self.n_ssm_head = int(key("ssm.time_step_rank"))
        self.n_group = int(key("ssm.group_count"))
        if min(self.n_embd, self.n_layer, self.d_conv, self.d_inner, self.d_state,
               self.n_ssm_head, self.n_group) < 1 or self.d_inner % self.n_ssm_head or \
                self.n_ssm_head % self.n_group:
            raise ModelError("%s: inconsistent Mamba-2 sizes" % path)
        if self.d_inner != 2 * self.n_embd:
            raise ModelError("%s: ssm.inner_size %d is not 2*embedding_length (llama.cpp "
                             "asserts it)" % (path, self.d_inner))
        for i, k in enumerate(self.n_head_kv):
            if k and (k < 0 or self.n_head % k):
                raise ModelError("%s: layer %d: %d K/V heads do not divide %d heads"
                                 % (path, i, k, self.n_head))
        self.ssm_head_dim = self.d_inner // self.n_ssm_head
        self.conv_dim = self.d_inner + 2 * self.n_group * self.d_state
        self.d_in_proj = 2 * self.d_inner + 2 * self.n_group * self.d_state + self.n_ssm_head

        unsupported = [n for n in f.tensors if n.endswith(".bias") and (
            ".attn_" in n or ".ffn_" in n) or ".attn_qkv." in n]
        if unsupported:
            raise ModelError("%s: tensor %s (biases, fused QKV) is not in this reference"
                             % (path, unsupported[0]))

        get, matrix = tensor_access(f, path)
        load_ends(self, f, get, matrix)
        # Mamba2Layer reads the SSM head count as n_head; hand it a view with those names
        ssm = SSMSizes(self)
        self.mixers = [Mamba2Layer(get, matrix, i, ssm) if k == 0 else
                       AttentionLayer(get, matrix, i, self, k)
                       for i, k in enumerate(self.n_head_kv)]
        self.ssm = ssm
        self.ffns = [FFN(get, matrix, i, self) for i in range(self.n_layer)]
        self.layers = list(zip(self.mixers, self.ffns))


class SSMSizes:
    """The Mamba-2 sizes under mamba2_ref's names (n_head is the SSM heads there)."""

    def __init__(self, m):
        self.n_embd, self.eps = m.n_embd, m.eps
        self.d_conv, self.d_inner, self.d_state = m.d_conv, m.d_inner, m.d_state
        self.n_head, self.n_group = m.n_ssm_head, m.n_group
        self.head_dim, self.conv_dim, self.d_in_proj = m.ssm_head_dim, m.conv_dim, m.d_in_proj


def load(path):
    """mamba_ref.load_model's entry for general.architecture "granitehybrid"."""
    return GraniteModel(path)


class KVCache:
    """The K and V rows of every past token of one attention layer, oldest first."""

    def __init__(self):
        self.k = []  # each (n_head_kv, head_dim)
        self.v = []


def new_state(model):
    """A fresh sequence: zero Mamba-2 states, empty attention caches."""
    return [KVCache() if isinstance(mixer, AttentionLayer) else Mamba2State(model.ssm)
            for mixer in model.mixers]


def softmax(s):
    e = np.exp(s - np.max(s))
    return e / np.sum(e)


def attention_step(m, layer, cache, h, rope=None):
    """Causal GQA attention of the newest token (normed input h, n_embd) over every token so
    far, itself included; appends its K and V rows to cache. Returns attn_output . o. q and k
    go through the layer's Q/K norms (qk_normed) when it has them, then rope.
    rope(v, pos): the positional rotation of the (heads, head_dim) rows of q and k at position
    pos (the token's index in the sequence); None for none (Granite)."""
    H, Hkv, hd = m.n_head, layer.n_head_kv, m.head_dim
    pos = len(cache.k)
    q = (layer.wq @ h).reshape(H, hd)                   # (H, hd)
    k = (layer.wk @ h).reshape(Hkv, hd)                 # (Hkv, hd)
    q = qk_normed(q, layer.q_norm, m.eps)               # before RoPE, as llama.cpp's graphs
    k = qk_normed(k, layer.k_norm, m.eps)
    if rope is not None:
        q, k = rope(q, pos), rope(k, pos)
    cache.k.append(k)                                   # (Hkv, hd) per token
    cache.v.append((layer.wv @ h).reshape(Hkv, hd))
    K = np.stack(cache.k)                               # (T, Hkv, hd)
    V = np.stack(cache.v)                               # (T, Hkv, hd)
    o = np.empty((H, hd))
    for hq in range(H):
        g = hq // (H // Hkv)                            # the K/V head this query head reads
        p = softmax(K[:, g, :] @ q[hq] * m.attn_scale)  # (T,)
        o[hq] = p @ V[:, g, :]                          # (hd,)
    return layer.wo @ o.reshape(H * hd)                 # (n_embd,)


def ffn_step(m, ffn, x):
    """SwiGLU of the normed residual: ffn_down . (silu(ffn_gate . h) * (ffn_up . h))."""
    h = rmsnorm(x, ffn.norm, m.eps)
    return ffn.down @ (silu(ffn.gate @ h) * (ffn.up @ h))


def scaled(v, scale):
    """v * scale, or v itself when scale is 0 (not applied, as in llama.cpp)."""
    return v * scale if scale else v


def forward(model, state, token):
    """One token through the model, updating state; returns the n_vocab logits."""
    m = model
    x = scaled(m.token_embd[token].copy(), m.embd_scale)          # (n_embd,)
    for (mixer, ffn), st in zip(m.layers, state):
        h = rmsnorm(x, mixer.attn_norm, m.eps)
        if isinstance(mixer, AttentionLayer):
            a = attention_step(m, mixer, st, h)
        else:
            a = mixer_step(m.ssm, mixer, st, h)
        x = x + scaled(a, m.residual_scale)
        x = x + scaled(ffn_step(m, ffn, x), m.residual_scale)
    logits = m.output @ rmsnorm(x, m.output_norm, m.eps)          # (n_vocab,)
    return logits / m.logit_scale if m.logit_scale else logits
