#!/usr/bin/env python3
"""Train a small Mamba-1 language model on CPU and export it to GGUF in llama.cpp's layout.

Data: the English texts of Debian's `fortunes` packages (fortune-mod's collections: quips,
quotations, jokes, short stories), split into fortunes at the "%" lines; 5% of the fortunes,
chosen with a fixed seed, are held out. Tokens: the GPT-NeoX-20B vocabulary of
tests/data/ggml-vocab-gpt-neox.gguf, tokenised by `recur tokenize` itself, so that the model is
trained on exactly the ids recur will give it.

Model (one layer, as src/model/mamba.c and the Mamba paper write it):
    h = rmsnorm(x) * norm;  [xi, z] = in_proj(h)
    xc = silu(causal depthwise conv(xi) + bias)
    [dtr, B, C] = x_proj(xc);  dt = softplus(dt_proj(dtr) + dt_bias)
    s_t = s_{t-1} * exp(dt A) + dt xc B;   y = (s_t . C + D xc) * silu(z)
    x = x + out_proj(y)
with tied input / output embeddings.

The scan runs in parallel over time: the sequence is cut into chunks of T steps; inside a chunk
the decays multiply as a cumulative sum of exponents, s_t = exp(S_t) (s_0 + sum_{u<=t}
exp(-S_u) dt_u x_u B_u), so one chunk is a few tensor operations, and only the chunks run one
after another. exp(-S_u) stays finite because a chunk is short and a step's decay exponent is
clamped at -MAX_DECAY (a state scaled by less than e^-8 per step is forgotten anyway): the
exponents stay within CHUNK * MAX_DECAY = 64, far from float32's limit of 88;
recur computes without the clamp, and the held-out loss of both is compared in ctest.

Usage: /usr/bin/python3 tools/dev/train/train_mamba.py --recur build/tools/recur --out models/
"""
import argparse
import json
import math
import os
import random
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "ref"))
import gguf_reader  # noqa: E402  (our own reader, for the vocabulary's keys)

CHUNK = 8         # scan chunk length
MAX_DECAY = 8.0   # clamp of dt * A per step, see above
FORTUNE_DIR = "/usr/share/games/fortunes"


# ---- data --------------------------------------------------------------------------------

def read_fortunes():
    texts = []
    for name in sorted(os.listdir(FORTUNE_DIR)):
        path = os.path.join(FORTUNE_DIR, name)
        if "." in name or not os.path.isfile(path) or name in ("art", "ascii-art"):
            continue  # .dat indexes, .u8 duplicates, and pictures made of characters
        with open(path, encoding="utf-8", errors="replace") as f:
            for piece in f.read().split("\n%\n"):
                piece = piece.strip("\n%")
                if piece.strip():
                    texts.append(piece)
    return texts


# The pre-tokenizer the text is split with, written into the model as tokenizer.ggml.pre: the
# GPT-2 pattern (GPT-NeoX's own). The vocabulary file names none, which llama.cpp and recur
# read as 'default', so the text is tokenised with a copy that names it.
PRE = "gpt-2"


def tokenize(recur, vocab, text):
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.txt"), os.path.join(d, "ids.bin")
        named = os.path.join(d, "vocab.gguf")
        subprocess.run([recur, "setmeta", vocab, named, "tokenizer.ggml.pre=" + PRE],
                       check=True, stdout=subprocess.DEVNULL)
        with open(src, "w", encoding="utf-8") as f:
            f.write(text)
        subprocess.run([recur, "tokenize", "-m", named, "-f", src, "--out", dst, "--no-bos"],
                       check=True, stderr=subprocess.DEVNULL)
        return np.fromfile(dst, dtype="<i4").astype(np.int64)


# ---- model -------------------------------------------------------------------------------

def rmsnorm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def selective_scan(xc, dt, A, B, C, D):
    """xc, dt: (b, L, Di); A: (Di, N); B, C: (b, L, N). Returns y: (b, L, Di).

    All chunks are computed at once from a zero state, then one short loop over the chunks
    (on (b, Di, N) tensors only) carries each chunk's final state into the next."""
    b, L, Di = xc.shape
    pad = (-L) % CHUNK  # zero steps at the end change nothing before them
    if pad:
        xc_p, dt_p = F.pad(xc, (0, 0, 0, pad)), F.pad(dt, (0, 0, 0, pad))
        B, C = F.pad(B, (0, 0, 0, pad)), F.pad(C, (0, 0, 0, pad))
    else:
        xc_p, dt_p = xc, dt
    nc, N = (L + pad) // CHUNK, A.shape[1]
    dA = (dt_p.unsqueeze(-1) * A).clamp(min=-MAX_DECAY).view(b, nc, CHUNK, Di, N)
    dBx = ((dt_p * xc_p).unsqueeze(-1) * B.unsqueeze(2)).view(b, nc, CHUNK, Di, N)
    # Prefix sums over a chunk as a product with a lower-triangular matrix of ones: BLAS does
    # that faster than cumsum does along an inner axis, forwards and backwards.
    tril = torch.tril(xc.new_ones(CHUNK, CHUNK))
    csum = lambda t: torch.matmul(tril, t.view(b, nc, CHUNK, Di * N)).view(t.shape)  # noqa: E731
    S = csum(dA)                                    # log of the decay since the chunk began
    E = torch.exp(S)  # in [e^-64, 1]: neither it nor 1 / E leaves float32's normal range
    h_local = E * csum(dBx * torch.exp(-S))
    # Slicing the big tensors once, and the small ones with unbind, keeps autograd from
    # materialising a full-size gradient per chunk.
    decay = torch.exp(S[:, :, -1]).unbind(1)        # per chunk (b, Di, N): its whole decay
    ends = h_local[:, :, -1].unbind(1)
    s, starts = xc.new_zeros(b, Di, N), []
    for c in range(nc):
        starts.append(s)
        s = decay[c] * s + ends[c]
    h = h_local + E * torch.stack(starts, 1).unsqueeze(2)
    y = (h * C.view(b, nc, CHUNK, 1, N)).sum(-1).view(b, nc * CHUNK, Di)[:, :L]
    return y + xc * D


class MambaLayer(torch.nn.Module):
    def __init__(self, E, Di, N, R, K, eps):
        super().__init__()
        self.Di, self.N, self.R, self.K, self.eps = Di, N, R, K, eps
        self.norm = torch.nn.Parameter(torch.ones(E))
        self.in_proj = torch.nn.Linear(E, 2 * Di, bias=False)
        self.conv_w = torch.nn.Parameter(torch.randn(Di, K) / math.sqrt(K))
        self.conv_b = torch.nn.Parameter(torch.zeros(Di))
        self.x_proj = torch.nn.Linear(Di, R + 2 * N, bias=False)
        self.dt_proj = torch.nn.Linear(R, Di, bias=True)
        dt = torch.exp(torch.rand(Di) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
        with torch.no_grad():
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1(dt)
            self.dt_proj.weight.mul_(R ** -0.5 / self.dt_proj.weight.std())
        self.A_log = torch.nn.Parameter(torch.log(torch.arange(1, N + 1).float()).repeat(Di, 1))
        self.D = torch.nn.Parameter(torch.ones(Di))
        self.out_proj = torch.nn.Linear(Di, E, bias=False)

    def forward(self, x):
        h = rmsnorm(x, self.norm, self.eps)
        xi, z = self.in_proj(h).split(self.Di, dim=-1)
        conv = F.conv1d(xi.transpose(1, 2), self.conv_w.unsqueeze(1), self.conv_b,
                        padding=self.K - 1, groups=self.Di)[..., :x.shape[1]]
        xc = F.silu(conv.transpose(1, 2))
        dtr, B, C = self.x_proj(xc).split([self.R, self.N, self.N], dim=-1)
        dt = F.softplus(self.dt_proj(dtr))
        y = selective_scan(xc, dt, -torch.exp(self.A_log), B, C, self.D)
        return x + self.out_proj(y * F.silu(z))


class Mamba(torch.nn.Module):
    def __init__(self, V, E, n_layer, Di, N, R, K, eps):
        super().__init__()
        self.eps = eps
        self.embed = torch.nn.Embedding(V, E)
        torch.nn.init.normal_(self.embed.weight, std=0.02)
        self.layers = torch.nn.ModuleList(MambaLayer(E, Di, N, R, K, eps) for _ in range(n_layer))
        for layer in self.layers:
            with torch.no_grad():
                layer.out_proj.weight.mul_(1 / math.sqrt(2 * n_layer))
        self.norm_f = torch.nn.Parameter(torch.ones(E))

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return rmsnorm(x, self.norm_f, self.eps) @ self.embed.weight.t()


def cross_entropy(logits, targets):
    """Mean next-token loss; written out because its backward pass is twice as fast as
    F.cross_entropy's on this torch."""
    return (torch.logsumexp(logits, -1) - logits.gather(1, targets[:, None])[:, 0]).mean()


def window_losses(model, data, ctx, batch=16):
    """Mean next-token loss of each non-overlapping window of ctx tokens, each from a zero
    state, every token after the first of a window predicted: what `recur perplexity -c ctx`
    scores (its mean over the windows is the held-out loss; the test compares a few windows)."""
    model.eval()
    out = []
    n = (len(data) // ctx) * ctx
    windows = torch.from_numpy(data[:n].reshape(-1, ctx))
    with torch.no_grad():
        for i in range(0, len(windows), batch):
            w = windows[i:i + batch]
            logits = model(w[:, :-1])
            nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1),
                                  reduction="none").view(len(w), -1)
            out += nll.double().mean(1).tolist()
    model.train()
    return out


def loss_on(model, data, ctx):
    w = window_losses(model, data, ctx)
    return sum(w) / len(w)


# ---- GGUF export ---------------------------------------------------------------------------

def gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def gguf_value(vtype, v):
    fmt = {4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q"}
    if vtype == 8:
        return gguf_string(v)
    if vtype == 9:
        etype, items = v
        out = struct.pack("<IQ", etype, len(items))
        return out + b"".join(gguf_value(etype, i) for i in items)
    return struct.pack(fmt[vtype], v)


def write_gguf(path, kvs, tensors, alignment=32):
    """kvs: [(key, vtype, value)]; tensors: [(name, np.ndarray float16/float32)]: GGUF v3 as
    llama.cpp's writer lays it out (infos, padding, each tensor aligned)."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for key, vtype, value in kvs:
        head += gguf_string(key) + struct.pack("<I", vtype) + gguf_value(vtype, value)
    offset, infos, blobs = 0, b"", []
    for name, arr in tensors:
        ttype = {np.dtype(np.float32): 0, np.dtype(np.float16): 1}[arr.dtype]
        ne = list(reversed(arr.shape))
        infos += gguf_string(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
        infos += struct.pack("<IQ", ttype, offset)
        blob = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        pad = (-len(blob)) % alignment
        blobs.append(blob + b"\0" * pad)
        offset += len(blob) + pad
    meta = head + infos
    meta += b"\0" * ((-len(meta)) % alignment)
    with open(path + ".tmp", "wb") as f:
        f.write(meta)
        for blob in blobs:
            f.write(blob)
    os.replace(path + ".tmp", path)


def export(model, hp, vocab_path, path):
    voc = gguf_reader.GGUFFile(vocab_path).kv
    kvs = [
        ("general.architecture", 8, "mamba"),
        ("general.name", 8, hp["name"]),
        ("general.file_type", 4, 1),
        ("mamba.context_length", 4, 1048576),
        ("mamba.embedding_length", 4, hp["embd"]),
        ("mamba.feed_forward_length", 4, 0),
        ("mamba.attention.head_count", 4, 0),
        ("mamba.block_count", 4, hp["layers"]),
        ("mamba.ssm.conv_kernel", 4, hp["conv"]),
        ("mamba.ssm.inner_size", 4, hp["inner"]),
        ("mamba.ssm.state_size", 4, hp["state"]),
        ("mamba.ssm.time_step_rank", 4, hp["dt_rank"]),
        ("mamba.attention.layer_norm_rms_epsilon", 6, hp["eps"]),
        ("tokenizer.ggml.model", 8, voc["tokenizer.ggml.model"]),
        ("tokenizer.ggml.pre", 8, PRE),
        ("tokenizer.ggml.tokens", 9, (8, list(voc["tokenizer.ggml.tokens"]))),
        ("tokenizer.ggml.token_type", 9, (5, [int(t) for t in voc["tokenizer.ggml.token_type"]])),
        ("tokenizer.ggml.merges", 9, (8, list(voc["tokenizer.ggml.merges"]))),
        ("tokenizer.ggml.bos_token_id", 4, int(voc["tokenizer.ggml.bos_token_id"])),
        ("tokenizer.ggml.eos_token_id", 4, int(voc["tokenizer.ggml.eos_token_id"])),
        ("tokenizer.ggml.unknown_token_id", 4, int(voc["tokenizer.ggml.unknown_token_id"])),
    ]
    f16 = lambda t: t.detach().numpy().astype(np.float16)  # noqa: E731
    f32 = lambda t: t.detach().numpy().astype(np.float32)  # noqa: E731
    tensors = [("token_embd.weight", f16(model.embed.weight)),
               ("output_norm.weight", f32(model.norm_f))]
    for i, L in enumerate(model.layers):
        p = f"blk.{i}."
        tensors += [
            (p + "attn_norm.weight", f32(L.norm)),
            (p + "ssm_in.weight", f16(L.in_proj.weight)),
            (p + "ssm_conv1d.weight", f32(L.conv_w)),
            (p + "ssm_conv1d.bias", f32(L.conv_b)),
            (p + "ssm_x.weight", f16(L.x_proj.weight)),
            (p + "ssm_dt.weight", f16(L.dt_proj.weight)),
            (p + "ssm_dt.bias", f32(L.dt_proj.bias)),
            (p + "ssm_a", f32(-torch.exp(L.A_log))),
            (p + "ssm_d", f32(L.D)),
            (p + "ssm_out.weight", f16(L.out_proj.weight)),
        ]
    write_gguf(path, kvs, tensors)


def round_to_file_types(model):
    """The weights as the file stores them (matrices in f16), so that the held-out loss the
    script reports is that of the exported model."""
    with torch.no_grad():
        mats = [model.embed.weight] + [w for L in model.layers for w in
                                       (L.in_proj.weight, L.x_proj.weight, L.dt_proj.weight,
                                        L.out_proj.weight)]
        for w in mats:
            w.copy_(w.half().float())


# ---- main ----------------------------------------------------------------------------------

def use_fast_malloc():
    """Re-run this script with tcmalloc (Debian's libtcmalloc-minimal4) when it is there: with
    glibc's malloc every tensor over 32 MB is a fresh mmap whose pages fault in one by one,
    which made each training step ten times slower on these machines."""
    lib = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"
    if os.path.exists(lib) and lib not in os.environ.get("LD_PRELOAD", ""):
        env = dict(os.environ, LD_PRELOAD=lib)
        env.setdefault("OPENBLAS_NUM_THREADS", "2")
        os.execve(sys.executable, [sys.executable] + sys.argv, env)


def main():
    use_fast_malloc()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recur", required=True, help="the recur program (for tokenize)")
    ap.add_argument("--vocab", default=os.path.join(ROOT, "tests/data/ggml-vocab-gpt-neox.gguf"))
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--minutes", type=float, default=50.0, help="training time budget")
    ap.add_argument("--embd", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--state", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=256, help="training and evaluation window")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)

    texts = read_fortunes()
    random.Random(args.seed).shuffle(texts)
    n_val = len(texts) // 20
    val_text = "\n\n".join(texts[:n_val]) + "\n"
    train_text = "\n\n".join(texts[n_val:]) + "\n"
    with open(os.path.join(args.out, "heldout.txt"), "w", encoding="utf-8") as f:
        f.write(val_text)
    train = tokenize(args.recur, args.vocab, train_text)
    val = tokenize(args.recur, args.vocab, val_text)
    n_vocab = len(gguf_reader.GGUFFile(args.vocab).kv["tokenizer.ggml.tokens"])
    print(f"data: {len(texts)} fortunes, {len(train)} training and {len(val)} held-out tokens",
          flush=True)

    hp = dict(name="recur-mamba-fortunes", embd=args.embd, layers=args.layers,
              inner=2 * args.embd, state=args.state, conv=4, dt_rank=math.ceil(args.embd / 16),
              eps=1e-5, vocab=n_vocab)
    model = Mamba(n_vocab, hp["embd"], hp["layers"], hp["inner"], hp["state"], hp["dt_rank"],
                  hp["conv"], hp["eps"])
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f} M parameters ({model.embed.weight.numel() / 1e6:.2f} M "
          "in the tied embedding)", flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "A_log" not in n
             and "conv_w" not in n]
    no_decay = [p for n, p in model.named_parameters() if not any(p is q for q in decay)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))

    budget = args.minutes * 60
    rng = np.random.default_rng(args.seed)
    curve = []  # (step, seconds, train loss (smoothed), held-out loss or None)
    t0 = time.time()
    step, smooth = 0, None
    warmup = 100
    while True:
        elapsed = time.time() - t0
        if elapsed > budget:
            break
        frac = elapsed / budget
        lr = args.lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = rng.integers(0, len(train) - args.ctx - 1, size=args.batch)
        batch = torch.from_numpy(np.stack([train[s:s + args.ctx + 1] for s in starts]))
        logits = model(batch[:, :-1])
        loss = cross_entropy(logits.reshape(-1, n_vocab), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if not math.isfinite(loss.item()):
            sys.exit(f"train_mamba: the loss is {loss.item()} at step {step}; stopping")
        smooth = loss.item() if smooth is None else 0.98 * smooth + 0.02 * loss.item()
        val_loss = None
        if step % 200 == 0:
            val_loss = loss_on(model, val, args.ctx)
        if step % 20 == 0 or val_loss is not None:
            curve.append((step, time.time() - t0, smooth, val_loss))
            print(f"step {step} {time.time() - t0:.0f}s lr {lr:.2e} train {smooth:.3f}"
                  + (f" held-out {val_loss:.3f}" if val_loss is not None else ""), flush=True)
    train_seconds = time.time() - t0

    round_to_file_types(model)
    val_windows = window_losses(model, val, args.ctx)
    val_loss = sum(val_windows) / len(val_windows)
    train_loss = loss_on(model, train[: len(val) * 4], args.ctx)
    model_path = os.path.join(args.out, "recur-mamba-fortunes.gguf")
    export(model, hp, args.vocab, model_path)
    stats = dict(hp, params=n_params, steps=step, batch=args.batch, ctx=args.ctx,
                 tokens_seen=step * args.batch * args.ctx, train_tokens=int(len(train)),
                 heldout_tokens=int(len(val)), train_seconds=round(train_seconds),
                 threads=args.threads, lr=args.lr, seed=args.seed,
                 train_loss=round(train_loss, 4), heldout_loss=round(val_loss, 4),
                 heldout_ppl=round(math.exp(val_loss), 3), torch=torch.__version__,
                 heldout_window_losses=[round(v, 6) for v in val_windows])
    with open(os.path.join(args.out, "recur-mamba-fortunes.json"), "w") as f:
        json.dump(stats, f, indent=1)
    print(json.dumps(stats, indent=1), flush=True)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.plot([c[0] for c in curve], [c[2] for c in curve], label="training (smoothed)")
    pts = [(c[0], c[3]) for c in curve if c[3] is not None]
    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label="held-out")
    ax.set_xlabel("step (batch of %d x %d tokens)" % (args.batch, args.ctx))
    ax.set_ylabel("cross-entropy (nats / token)")
    ax.set_title("recur-mamba-fortunes: %d layers, width %d, %.1f M parameters"
                 % (hp["layers"], hp["embd"], n_params / 1e6))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "loss.png"))


if __name__ == "__main__":
    main()
