"""falcon_h1_ref.py: the float64 reference of llama.cpp's falcon-h1 (TII Falcon-H1), for
mamba_ref.py's command line, which loads it when general.architecture is "falcon-h1".

The model, as llama.cpp builds it (src/models/falcon-h1.cpp; the Mamba-2 mixer is
mamba-base.cpp's build_mamba2_layer), for one token at position pos of its sequence:

    x = token_embd[t]
    per layer i:
        h = rmsnorm(x) * attn_norm
        x = x + attention(h) + mamba2(h)      both branches in parallel on the same h
        h = rmsnorm(x) * ffn_norm             (the tensor blk.i.ffn_norm, without .weight)
        x = x + ffn_down . (silu(ffn_gate . h) * (ffn_up . h))
    logits = output . (rmsnorm(x) * output_norm)

The attention is granite_ref.attention_step's causal GQA with head_dim attention.key_length,
scale 1/sqrt(head_dim) (the converter writes no attention.scale), and NeoX RoPE on q and k
(rope below). The Mamba-2 mixer is mamba2_ref.mixer_step, with the grouped RMS norm after the
gate only when the file has ssm_norm.weight (llama.cpp loads it as not required; Falcon-H1's
mamba_rms_norm). d_inner is free of n_embd. Falcon-H1's multipliers are folded into the
weights by the converter (conversion/falcon_h1.py), so there are no scale keys.

The state of a sequence is, per layer, both a Mamba-2 state and the K and V rows of every
past token.

To compare with llama.cpp itself: tests/ref/llama_logits.c (docs/development.md).
"""

import numpy as np

from mamba_ref import ModelError, rmsnorm
from mamba2_ref import Mamba2Layer, Mamba2State, load_ends, mixer_step, tensor_access
from granite_ref import FFN, AttentionLayer, KVCache, SSMSizes, attention_step, ffn_step
from gguf_reader import GGUFFile

ARCH = "falcon-h1"


class FalconH1Model:
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

        def one(name):
            """A key this reference takes as one value for every layer."""
            v = key(name)
            if isinstance(v, (list, tuple, np.ndarray)):
                if len(set(int(e) for e in v)) != 1:
                    raise ModelError("%s: %s.%s differs between layers" % (path, ARCH, name))
                v = v[0]
            return int(v)

        self.n_embd = int(key("embedding_length"))
        self.n_layer = int(key("block_count"))
        self.eps = float(key("attention.layer_norm_rms_epsilon"))
        self.n_ff = [one("feed_forward_length")] * self.n_layer
        self.n_head = one("attention.head_count")
        n_head_kv = one("attention.head_count_kv")
        hd_k = int(key("attention.key_length", self.n_embd // max(self.n_head, 1)))
        hd_v = int(key("attention.value_length", self.n_embd // max(self.n_head, 1)))
        if self.n_head < 1 or n_head_kv < 1 or self.n_head % n_head_kv:
            raise ModelError("%s: %d K/V heads do not divide %d heads"
                             % (path, n_head_kv, self.n_head))
        if hd_k != hd_v or hd_k < 2 or hd_k % 2:
            raise ModelError("%s: key and value head sizes (%d, %d) differ or are odd"
                             % (path, hd_k, hd_v))
        self.head_dim = hd_k
        # llama.cpp: n_rot defaults to the head size; a partial rotation is not in this reference
        self.n_rot = int(key("rope.dimension_count", self.head_dim))
        if self.n_rot != self.head_dim:
            raise ModelError("%s: rope.dimension_count %d is not the head size %d"
                             % (path, self.n_rot, self.head_dim))
        self.rope_base = float(key("rope.freq_base", 10000.0))
        self.attn_scale = float(key("attention.scale", 0.0)) or 1.0 / np.sqrt(self.head_dim)

        self.d_conv = int(key("ssm.conv_kernel"))
        self.d_inner = int(key("ssm.inner_size"))
        self.d_state = int(key("ssm.state_size"))
        self.n_ssm_head = int(key("ssm.time_step_rank"))
        self.n_group = int(key("ssm.group_count"))
        if min(self.n_embd, self.n_layer, self.d_conv, self.d_inner, self.d_state,
               self.n_ssm_head, self.n_group) < 1 or self.d_inner % self.n_ssm_head or \
                self.n_ssm_head % self.n_group:
            raise ModelError("%s: inconsistent Mamba-2 sizes" % path)
        self.ssm_head_dim = self.d_inner // self.n_ssm_head
        self.conv_dim = self.d_inner + 2 * self.n_group * self.d_state
        self.d_in_proj = 2 * self.d_inner + 2 * self.n_group * self.d_state + self.n_ssm_head

        unsupported = [n for n in f.tensors if n.endswith(".bias") and (
            ".attn_" in n or ".ffn_" in n) or ".attn_qkv." in n or "rope_freqs" in n]
        if unsupported:
            raise ModelError("%s: tensor %s (biases, fused QKV, rope factors) is not in this "
                             "reference" % (path, unsupported[0]))

        get, matrix = tensor_access(f, path)
        load_ends(self, f, get, matrix)
        self.ssm = SSMSizes(self)
        self.attns = [AttentionLayer(get, matrix, i, self, n_head_kv) for i in range(self.n_layer)]
        self.mambas = [Mamba2Layer(get, matrix, i, self.ssm, norm_optional=True)
                       for i in range(self.n_layer)]
        self.ffns = [FFN(get, matrix, i, self, norm_name="ffn_norm") for i in range(self.n_layer)]


def load(path):
    """mamba_ref.load_model's entry for general.architecture "falcon-h1"."""
    return FalconH1Model(path)


def new_state(model):
    """A fresh sequence: per layer an empty attention cache and a zero Mamba-2 state."""
    return [(KVCache(), Mamba2State(model.ssm)) for _ in range(model.n_layer)]


def rope_neox(v, pos, base):
    """NeoX RoPE of the rows of v (heads, n_rot) at position pos: value i and value
    i + n_rot/2 turn together by pos * base^(-2i/n_rot), i < n_rot/2."""
    half = v.shape[-1] // 2
    theta = pos * base ** (-2.0 * np.arange(half) / v.shape[-1])
    c, s = np.cos(theta), np.sin(theta)
    a, b = v[..., :half], v[..., half:]
    return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)


def forward(model, state, token):
    """One token through the model, updating state; returns the n_vocab logits."""
    m = model

    def rope(v, pos):
        return rope_neox(v, pos, m.rope_base)

    x = m.token_embd[token].copy()                                 # (n_embd,)
    for i, (cache, ssm_state) in enumerate(state):
        # attention and the Mamba-2 mixer read the same normed input (llama.cpp normalises
        # twice with attn_norm, the same values)
        h = rmsnorm(x, m.attns[i].attn_norm, m.eps)
        a = attention_step(m, m.attns[i], cache, h, rope)
        s = mixer_step(m.ssm, m.mambas[i], ssm_state, h)
        x = x + a + s
        x = x + ffn_step(m, m.ffns[i], x)
    return m.output @ rmsnorm(x, m.output_norm, m.eps)             # (n_vocab,)
