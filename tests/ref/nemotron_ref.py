"""nemotron_ref.py: the float64 reference of llama.cpp's nemotron_h (NVIDIA Nemotron-H, dense),
for mamba_ref.py's command line, which loads it when general.architecture is "nemotron_h".

The model, as llama.cpp builds it (src/models/nemotron-h.cpp), for one token at a time:

    x = token_embd[t]
    per layer i:
        h = rmsnorm(x) * attn_norm
        x = x + Mamba-2 mixer of h      when head_count_kv[i] == 0 and feed_forward_length[i] == 0
                                        (mamba2_ref.mixer_step)
              + attention of h          when only feed_forward_length[i] == 0
                                        (granite_ref.attention_step)
              + ffn_down . relu(ffn_up . h)^2   otherwise (an MLP layer, no gate)
    logits = output . (rmsnorm(x) * output_norm)

Each layer has one branch and one norm; there are no scales (no embedding, residual or logit
multiplier) and no positional encoding (rope.scaling.finetuned = false, which this reference
requires, as granite_ref does). The attention scale is attention.scale or 1/sqrt(head_dim),
head_dim = attention.key_length (which must equal value_length). The norms' epsilon is
attention.layer_norm_rms_epsilon, or attention.layer_norm_epsilon when that is absent (as in
the converter's files): llama.cpp's load_arch_hparams requires the latter and falls back to it.

The state of a sequence is, per layer, a Mamba-2 state, an attention cache (K and V of every
past token), or nothing (MLP layers).
"""

import numpy as np

from mamba_ref import ModelError, rmsnorm
from mamba2_ref import Mamba2Layer, Mamba2State, load_ends, mixer_step, tensor_access
from granite_ref import AttentionLayer, KVCache, SSMSizes, attention_step
from gguf_reader import GGUFFile

ARCH = "nemotron_h"


class MLPLayer:
    """The ReLU^2 MLP of one layer (numpy order: a projection is (out, in))."""

    def __init__(self, get, matrix, i, m):
        p = "blk.%d." % i
        self.attn_norm = get(p + "attn_norm.weight", (m.n_embd,))
        self.up = matrix(p + "ffn_up.weight", (m.n_ff[i], m.n_embd))
        self.down = matrix(p + "ffn_down.weight", (m.n_embd, m.n_ff[i]))


class NemotronModel:
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

        def per_layer(name):
            """A key that is one value for every layer or an array of one per layer."""
            v = key(name)
            if isinstance(v, (list, tuple, np.ndarray)):
                if len(v) != self.n_layer:
                    raise ModelError("%s: %s.%s has %d entries for %d layers"
                                     % (path, ARCH, name, len(v), self.n_layer))
                return [int(e) for e in v]
            return [int(v)] * self.n_layer

        self.n_embd = int(key("embedding_length"))
        self.n_layer = int(key("block_count"))
        eps = float(key("attention.layer_norm_epsilon"))  # llama.cpp requires it
        self.eps = float(key("attention.layer_norm_rms_epsilon", eps))
        self.n_ff = per_layer("feed_forward_length")
        self.n_head_kv = per_layer("attention.head_count_kv")
        n_head = per_layer("attention.head_count")
        if len(set(n_head)) != 1 or n_head[0] < 1:
            raise ModelError("%s: this reference takes one positive attention.head_count" % path)
        self.n_head = n_head[0]
        hd_k = int(key("attention.key_length", self.n_embd // self.n_head))
        hd_v = int(key("attention.value_length", hd_k))
        if hd_k != hd_v or hd_k < 1:
            raise ModelError("%s: key and value head sizes differ (%d, %d)" % (path, hd_k, hd_v))
        self.head_dim = hd_k
        if int(key("expert_count", 0)):
            raise ModelError("%s: mixture-of-experts Nemotron-H is not in this reference" % path)
        if bool(key("rope.scaling.finetuned", True)):
            raise ModelError("%s: %s.rope.scaling.finetuned is true or missing; this reference "
                             "has no RoPE" % (path, ARCH))
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
        self.ssm = SSMSizes(self)
        # llama.cpp's rule (load_arch_hparams, load_arch_tensors of nemotron-h.cpp)
        self.layers = []
        for i, (k, ff) in enumerate(zip(self.n_head_kv, self.n_ff)):
            if k == 0 and ff == 0:
                self.layers.append(Mamba2Layer(get, matrix, i, self.ssm))
            elif ff == 0:
                self.layers.append(AttentionLayer(get, matrix, i, self, k))
            else:
                self.layers.append(MLPLayer(get, matrix, i, self))


def load(path):
    """mamba_ref.load_model's entry for general.architecture "nemotron_h"."""
    return NemotronModel(path)


def new_state(model):
    """A fresh sequence: zero Mamba-2 states, empty attention caches, nothing for MLPs."""
    return [KVCache() if isinstance(layer, AttentionLayer) else
            Mamba2State(model.ssm) if isinstance(layer, Mamba2Layer) else None
            for layer in model.layers]


def mlp_step(layer, h):
    """ffn_down . relu(ffn_up . h)^2 of the normed input h."""
    return layer.down @ np.square(np.maximum(layer.up @ h, 0.0))


def forward(model, state, token):
    """One token through the model, updating state; returns the n_vocab logits."""
    m = model
    x = m.token_embd[token].copy()                                # (n_embd,)
    for layer, st in zip(m.layers, state):
        h = rmsnorm(x, layer.attn_norm, m.eps)
        if isinstance(layer, AttentionLayer):
            x = x + attention_step(m, layer, st, h)
        elif isinstance(layer, Mamba2Layer):
            x = x + mixer_step(m.ssm, layer, st, h)
        else:
            x = x + mlp_step(layer, h)
    return m.output @ rmsnorm(x, m.output_norm, m.eps)            # (n_vocab,)
