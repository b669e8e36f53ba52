"""mamba2_ref.py: the float64 reference of llama.cpp's Mamba-2 (docs/mamba2.md), for
mamba_ref.py's command line, which loads it when general.architecture is "mamba2".

Per layer and token, docs/mamba2.md section 3, step by step: the input projection splits into
z, xBC and dt; the causal depthwise conv runs over xBC; each head h (group h // (n_head /
n_group)) has a scalar A and D; the state is [n_head][head_dim][d_state]; the output is gated
by silu(z) and then RMS-normalised per group with ssm_norm.
"""

import numpy as np

from mamba_ref import Matrix, ModelError, conv_step, rmsnorm, silu, softplus
from gguf_reader import GGUFFile


def tensor_access(f, path):
    """get(name, shape): the tensor, its numpy shape checked (None: any); matrix(name, shape):
    the same as a Matrix of its stored type."""
    def get(name, shape):
        if name not in f.tensors:
            raise ModelError("%s: missing tensor %s" % (path, name))
        t = f.tensor(name)
        if t.shape != tuple(s if s is not None else t.shape[i] for i, s in enumerate(shape)):
            raise ModelError("%s: tensor %s has numpy shape %s, expected %s" % (
                path, name, t.shape, shape))
        return t

    get.tensors = f.tensors  # for optional tensors: whether a name is there

    def matrix(name, shape):
        return Matrix(get(name, shape), f.tensors[name].ggml_type, f.minimums(name))
    return get, matrix


def load_ends(model, f, get, matrix):
    """The embedding, the final norm and the output (the embedding when tied) of model."""
    model.token_embd = get("token_embd.weight", (None, model.n_embd))
    model.n_vocab = model.token_embd.shape[0]
    model.output_norm = get("output_norm.weight", (model.n_embd,))
    model.tied = "output.weight" not in f.tensors
    model.output = (Matrix(model.token_embd, f.tensors["token_embd.weight"].ggml_type,
                           f.minimums("token_embd.weight"))
                    if model.tied else matrix("output.weight", (model.n_vocab, model.n_embd)))


class Mamba2Layer:
    def __init__(self, get, matrix, i, m, norm_optional=False):
        """norm_optional: a missing ssm_norm.weight is None, no grouped norm (Falcon-H1 without
        mamba_rms_norm; llama.cpp loads it as TENSOR_NOT_REQUIRED there)."""
        p = "blk.%d." % i
        self.attn_norm = get(p + "attn_norm.weight", (m.n_embd,))
        self.ssm_in = matrix(p + "ssm_in.weight", (m.d_in_proj, m.n_embd))
        self.conv1d = get(p + "ssm_conv1d.weight", (m.conv_dim, m.d_conv))
        self.conv_bias = get(p + "ssm_conv1d.bias", (m.conv_dim,))
        self.dt_bias = get(p + "ssm_dt.bias", (m.n_head,))
        self.A = get(p + "ssm_a", (m.n_head, 1)).reshape(m.n_head)
        self.D = get(p + "ssm_d", (m.n_head, 1)).reshape(m.n_head)
        self.norm = (get(p + "ssm_norm.weight", (m.n_group, m.d_inner // m.n_group))
                     if not norm_optional or p + "ssm_norm.weight" in get.tensors else None)
        self.ssm_out = matrix(p + "ssm_out.weight", (m.n_embd, m.d_inner))


class Mamba2Model:
    kind = "mamba2"

    def __init__(self, path):
        f = GGUFFile(path)
        kv = f.kv

        def key(name):
            if "mamba2." + name not in kv:
                raise ModelError("%s: missing key mamba2.%s" % (path, name))
            return kv["mamba2." + name]

        self.n_embd = int(key("embedding_length"))
        self.n_layer = int(key("block_count"))
        self.d_conv = int(key("ssm.conv_kernel"))
        self.d_inner = int(key("ssm.inner_size"))
        self.d_state = int(key("ssm.state_size"))
        self.n_head = int(key("ssm.time_step_rank"))
        self.n_group = int(key("ssm.group_count"))
        self.eps = float(key("attention.layer_norm_rms_epsilon"))
        if min(self.n_embd, self.n_layer, self.d_conv, self.d_inner, self.d_state, self.n_head,
               self.n_group) < 1 or self.d_inner % self.n_head or self.n_head % self.n_group:
            raise ModelError("%s: inconsistent Mamba-2 sizes" % path)
        self.head_dim = self.d_inner // self.n_head
        self.conv_dim = self.d_inner + 2 * self.n_group * self.d_state
        self.d_in_proj = 2 * self.d_inner + 2 * self.n_group * self.d_state + self.n_head

        get, matrix = tensor_access(f, path)
        load_ends(self, f, get, matrix)
        self.layers = [Mamba2Layer(get, matrix, i, self) for i in range(self.n_layer)]


def load(path):
    """mamba_ref.load_model's entry for general.architecture "mamba2"."""
    return Mamba2Model(path)


class Mamba2State:
    def __init__(self, m):
        self.conv = np.zeros((m.d_conv - 1, m.conv_dim))
        self.ssm = np.zeros((m.n_head, m.head_dim, m.d_state))


def new_state(model):
    return [Mamba2State(model) for _ in model.layers]


def layer_step(m, layer, st, x):
    """One Mamba-2 layer on the residual stream x for one token (docs/mamba2.md (1)-(12))."""
    return x + mixer_step(m, layer, st, rmsnorm(x, layer.attn_norm, m.eps))


def mixer_step(m, layer, st, h):
    """The Mamba-2 mixer on the normed input h (n_embd) for one token: ssm_out . y, before the
    residual add (granite_ref.py scales it first). Updates st in place."""
    Di, G, N, H, P = m.d_inner, m.n_group, m.d_state, m.n_head, m.head_dim
    zxbcdt = layer.ssm_in @ h
    z = zxbcdt[:Di]
    xBC = zxbcdt[Di:Di + m.conv_dim]
    dt = zxbcdt[2 * Di + 2 * G * N:]
    conv, st.conv = conv_step(st.conv, xBC, layer.conv1d, layer.conv_bias)
    u = silu(conv)
    xs = u[:Di].reshape(H, P)
    B = u[Di:Di + G * N].reshape(G, N)
    C = u[Di + G * N:].reshape(G, N)
    dt = softplus(dt + layer.dt_bias)
    y = np.empty((H, P))
    for hd in range(H):
        g = hd // (H // G)
        st.ssm[hd] = st.ssm[hd] * np.exp(dt[hd] * layer.A[hd]) + np.outer(xs[hd] * dt[hd], B[g])
        y[hd] = st.ssm[hd] @ C[g] + layer.D[hd] * xs[hd]
    y = y.reshape(Di) * silu(z)
    if layer.norm is not None:
        y = y.reshape(G, Di // G)
        y = y / np.sqrt(np.mean(y * y, axis=1) + m.eps)[:, None] * layer.norm
    return layer.ssm_out @ y.reshape(Di)
