#!/usr/bin/env python3
"""test_ref.py: self-tests of the Python reference (gguf_reader.py, mamba_ref.py).

They do not touch recur's C code. A minimal GGUF writer below (struct.pack) makes tiny
files; the reader must decode them to hand-computed values (F32, F16, BF16, Q8_0, Q4_0,
every metadata type, alignment, error cases). Single steps of the Mamba-1 math are checked
against hand-computed or closed-form values, two tokens through a random two-layer model
against a separately written, unrolled scalar computation, tied against untied output,
mixed weight types against F32, and the command line end to end. Mamba-2 (mamba2_ref.py) and
Granite 4.0-H (granite_ref.py: Mamba-2 and attention layers, the Granite scales), Falcon-H1
(falcon_h1_ref.py: attention with NeoX RoPE and Mamba-2 in parallel) and Nemotron-H
(nemotron_ref.py: Mamba-2, attention and ReLU^2 MLP layers) against closed forms and unrolled
computations.

Run: python3 tests/ref/test_ref.py     (last line: "test_ref: N passed, M failed")
"""

import math
import os
import struct
import subprocess
import sys
import tempfile
import time
import unittest

try:
    import numpy as np
except ImportError:
    # Debian's python3-numpy belongs to /usr/bin/python3, which may not be first in PATH.
    if os.path.exists("/usr/bin/python3") and not os.environ.get("RECUR_REF_REEXEC"):
        os.environ["RECUR_REF_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    sys.exit("test_ref: numpy is required (Debian: apt-get install python3-numpy)")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gguf_reader as gr  # noqa: E402
import ggml_quants as gq  # noqa: E402
import mamba_ref as mr    # noqa: E402

MAMBA_REF = os.path.join(HERE, "mamba_ref.py")

# ---------------------------------------------------------------------------------------
# A minimal GGUF v3 writer

F32, F16, Q4_0, Q8_0, BF16 = 0, 1, 2, 8, 30
U8, I8, U16, I16, U32, I32, F32V, BOOL, STR, ARR, U64, I64, F64 = range(13)
VALUE_FORMATS = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i",
                 F32V: "<f", BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}


def pack_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def pack_value(vtype, v):
    if vtype == STR:
        return pack_string(v)
    if vtype == ARR:
        etype, items = v
        return (struct.pack("<IQ", etype, len(items))
                + b"".join(pack_value(etype, x) for x in items))
    return struct.pack(VALUE_FORMATS[vtype], v)


def gguf_bytes(kvs, tensors, alignment=32, magic=b"GGUF", version=3):
    """kvs: [(key, vtype, value)]; tensors: [(name, ne (GGUF order), ggml type, raw bytes)]."""
    out = bytearray(magic + struct.pack("<IQQ", version, len(tensors), len(kvs)))
    for key, vtype, value in kvs:
        out += pack_string(key) + struct.pack("<I", vtype) + pack_value(vtype, value)
    offsets, off = [], 0
    for _, _, _, raw in tensors:
        off = (off + alignment - 1) // alignment * alignment
        offsets.append(off)
        off += len(raw)
    for (name, ne, gtype, _), off in zip(tensors, offsets):
        out += pack_string(name) + struct.pack("<I", len(ne))
        out += struct.pack("<%dQ" % len(ne), *ne) + struct.pack("<IQ", gtype, off)
    out += b"\0" * (-len(out) % alignment)
    start = len(out)
    for (_, _, _, raw), off in zip(tensors, offsets):
        out += b"\0" * (start + off - len(out))
        out += raw
    return bytes(out)


def encode(arr, gtype):
    """numpy array -> (raw bytes of `gtype`, the float64 values those bytes decode to)."""
    a = np.asarray(arr, dtype=np.float64)
    flat = a.reshape(-1)
    if gtype == F32:
        v = flat.astype("<f4")
        return v.tobytes(), v.astype(np.float64).reshape(a.shape)
    if gtype == F16:
        v = flat.astype("<f2")
        return v.tobytes(), v.astype(np.float64).reshape(a.shape)
    if gtype == BF16:  # truncate the f32 to its upper 16 bits
        bits = (flat.astype("<f4").view("<u4") >> 16).astype("<u2")
        dec = (bits.astype(np.uint32) << 16).view("<f4").astype(np.float64)
        return bits.tobytes(), dec.reshape(a.shape)
    raw, dec = bytearray(), []
    for blk in flat.reshape(-1, 32):
        amax = blk[np.argmax(np.abs(blk))]
        if gtype == Q8_0:
            d = np.float16(abs(amax) / 127.0)
            q = np.clip(np.round(blk / float(d)), -128, 127) if d else np.zeros(32)
            raw += d.astype("<f2").tobytes() + q.astype(np.int8).tobytes()
            dec.extend(float(d) * q)
        elif gtype == Q4_0:
            d = np.float16(amax / -8.0)
            q = np.clip(np.round(blk / float(d) + 8), 0, 15) if d else np.full(32, 8.0)
            q = q.astype(np.uint8)
            raw += d.astype("<f2").tobytes() + (q[:16] | (q[16:] << 4)).astype(np.uint8).tobytes()
            dec.extend(float(d) * (q.astype(np.float64) - 8))
        else:
            raise ValueError(gtype)
    return bytes(raw), np.array(dec).reshape(a.shape)


def ne_of(arr):
    return list(reversed(np.shape(arr)))


class TempDirCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, data):
        path = os.path.join(self.tmp.name, name)
        with open(path, "wb") as f:
            f.write(data)
        return path


# ---------------------------------------------------------------------------------------
# Random Mamba-1 models, written as GGUF


HP = dict(n_embd=4, n_layer=2, d_conv=4, d_inner=6, d_state=3, dt_rank=2, n_vocab=7)


def random_weights(rng, n_embd, n_layer, d_conv, d_inner, d_state, dt_rank, n_vocab,
                   tied=False):
    """Weights in numpy order, named like the GGUF tensors."""
    def mat(rows, cols):
        return rng.standard_normal((rows, cols)) / math.sqrt(cols)

    w = {"token_embd.weight": rng.standard_normal((n_vocab, n_embd)),
         "output_norm.weight": rng.uniform(0.5, 1.5, n_embd)}
    if not tied:
        w["output.weight"] = mat(n_vocab, n_embd)
    for i in range(n_layer):
        p = "blk.%d." % i
        w[p + "attn_norm.weight"] = rng.uniform(0.5, 1.5, n_embd)
        w[p + "ssm_in.weight"] = mat(2 * d_inner, n_embd)
        w[p + "ssm_conv1d.weight"] = rng.standard_normal((d_inner, d_conv)) * 0.5
        w[p + "ssm_conv1d.bias"] = rng.standard_normal(d_inner) * 0.1
        w[p + "ssm_x.weight"] = mat(dt_rank + 2 * d_state, d_inner)
        w[p + "ssm_dt.weight"] = mat(d_inner, dt_rank)
        w[p + "ssm_dt.bias"] = rng.uniform(-3, 0, d_inner)
        w[p + "ssm_a"] = -np.exp(rng.uniform(-1, 1.5, (d_inner, d_state)))
        w[p + "ssm_d"] = rng.standard_normal(d_inner)
        w[p + "ssm_out.weight"] = mat(n_embd, d_inner)
    return w


def model_bytes(hp, weights, eps=1e-5, dt_b_c_rms=None, types=None, arch="mamba"):
    """A Mamba-1 GGUF file. Returns (bytes, the float64 weights the file decodes to)."""
    kvs = [("general.architecture", STR, arch),
           ("general.name", STR, "ref-test"),
           ("mamba.context_length", U32, 1 << 20),
           ("mamba.embedding_length", U32, hp["n_embd"]),
           ("mamba.block_count", U32, hp["n_layer"]),
           ("mamba.ssm.conv_kernel", U32, hp["d_conv"]),
           ("mamba.ssm.inner_size", U32, hp["d_inner"]),
           ("mamba.ssm.state_size", U32, hp["d_state"]),
           ("mamba.ssm.time_step_rank", U32, hp["dt_rank"]),
           ("mamba.attention.layer_norm_rms_epsilon", F32V, eps)]
    if dt_b_c_rms is not None:
        kvs.append(("mamba.ssm.dt_b_c_rms", BOOL, dt_b_c_rms))
    return weights_gguf(kvs, weights, types)


def weights_gguf(kvs, weights, types=None):
    """A GGUF file of metadata `kvs` and tensors `weights` (numpy order; GGUF shape = the
    numpy shape reversed), each F32 unless `types` names it: by its full name, or for
    "blk.N.x" by "x". Returns (bytes, the float64 weights the file decodes to)."""
    tensors, decoded = [], {}
    for name, arr in weights.items():
        gtype = (types or {}).get(name.split(".", 2)[-1] if name.startswith("blk.") else name,
                                  F32)
        raw, decoded[name] = encode(arr, gtype)
        tensors.append((name, ne_of(arr), gtype, raw))
    return gguf_bytes(kvs, tensors), decoded


# ---------------------------------------------------------------------------------------
# The reader


class ReaderTests(TempDirCase):
    def test_metadata_all_value_types(self):
        kvs = [("a.u8", U8, 200), ("a.i8", I8, -5), ("a.u16", U16, 60000),
               ("a.i16", I16, -300), ("a.u32", U32, 4000000000), ("a.i32", I32, -7),
               ("a.f32", F32V, 1.5), ("a.bool", BOOL, True), ("a.str", STR, "h\u00e9llo"),
               ("a.arr_i32", ARR, (I32, [1, -2, 3])), ("a.arr_str", ARR, (STR, ["a", "bc"])),
               ("a.arr_bool", ARR, (BOOL, [True, False])), ("a.u64", U64, 2**40),
               ("a.i64", I64, -2**40), ("a.f64", F64, 0.1), ("a.empty", ARR, (U32, []))]
        f = gr.GGUFFile(self.write("kv.gguf", gguf_bytes(kvs, [])))
        self.assertEqual(f.version, 3)
        self.assertEqual(f.tensors, {})
        self.assertEqual(list(f.kv), [k for k, _, _ in kvs])
        for k, _, v in kvs:
            got = f.kv[k]
            if isinstance(v, tuple):
                self.assertEqual(list(got), v[1], k)
            else:
                self.assertEqual(got, v, k)

    def test_f32_shape_is_reversed(self):
        raw = struct.pack("<6f", 0, 1, 2, 3, 4, 5)
        f = gr.GGUFFile(self.write("f32.gguf", gguf_bytes([], [("t", [3, 2], F32, raw)])))
        t = f.tensor("t")
        self.assertEqual(t.dtype, np.float64)
        self.assertEqual(t.shape, (2, 3))
        np.testing.assert_array_equal(t, [[0, 1, 2], [3, 4, 5]])

    def test_f16_values(self):
        bits = [0x3C00, 0xC000, 0x3555, 0x7BFF, 0x0001, 0x3800]
        want = [1.0, -2.0, 0.333251953125, 65504.0, 2.0 ** -24, 0.5]
        raw = struct.pack("<6H", *bits)
        f = gr.GGUFFile(self.write("f16.gguf", gguf_bytes([], [("t", [2, 3], F16, raw)])))
        np.testing.assert_array_equal(f.tensor("t"), np.reshape(want, (3, 2)))

    def test_bf16_values(self):
        bits = [0x3F80, 0xC040, 0x4049, 0x3E20, 0x8000, 0x7F80]
        want = [1.0, -3.0, 3.140625, 0.15625, -0.0, np.inf]
        raw = struct.pack("<6H", *bits)
        f = gr.GGUFFile(self.write("bf16.gguf", gguf_bytes([], [("t", [6], BF16, raw)])))
        t = f.tensor("t")
        np.testing.assert_array_equal(t, want)
        self.assertTrue(np.signbit(t[4]))

    def test_q8_0_values(self):
        # block 0: d = 0.5 (f16 0x3800), q[i] = i - 16
        # block 1: d = -2 (f16 0xC000), q = 127, -128, 0, ...
        q1 = [127, -128] + [0] * 30
        raw = (struct.pack("<H", 0x3800) + struct.pack("<32b", *range(-16, 16))
               + struct.pack("<H", 0xC000) + struct.pack("<32b", *q1))
        f = gr.GGUFFile(self.write("q8.gguf", gguf_bytes([], [("t", [32, 2], Q8_0, raw)])))
        t = f.tensor("t")
        self.assertEqual(t.shape, (2, 32))
        np.testing.assert_array_equal(t[0], [0.5 * (i - 16) for i in range(32)])
        np.testing.assert_array_equal(t[1], [-254.0, 256.0] + [0.0] * 30)

    def test_q4_0_values(self):
        # d = 2 (f16 0x4000); byte j holds low nibble j (element j), high nibble 15-j (element 16+j)
        raw = struct.pack("<H", 0x4000) + bytes(j | ((15 - j) << 4) for j in range(16))
        f = gr.GGUFFile(self.write("q4.gguf", gguf_bytes([], [("t", [32], Q4_0, raw)])))
        want = [2.0 * (j - 8) for j in range(16)] + [2.0 * (7 - j) for j in range(16)]
        np.testing.assert_array_equal(f.tensor("t"), want)

    def test_alignment(self):
        a = struct.pack("<3f", 1, 2, 3)
        b = struct.pack("<2f", 4, 5)
        for alignment in (32, 64):
            kvs = [("x", U8, 1)]
            if alignment != 32:
                kvs.append(("general.alignment", U32, alignment))
            data = gguf_bytes(kvs, [("a", [3], F32, a), ("b", [2], F32, b)], alignment)
            f = gr.GGUFFile(self.write("al%d.gguf" % alignment, data))
            self.assertEqual(f.data_start % alignment, 0)
            self.assertEqual(f.tensors["b"].offset, alignment)
            np.testing.assert_array_equal(f.tensor("a"), [1, 2, 3])
            np.testing.assert_array_equal(f.tensor("b"), [4, 5])

    def test_errors(self):
        good = gguf_bytes([("k", STR, "v")], [("t", [4], F32, b"\0" * 16)])
        bad = {
            "magic": gguf_bytes([], [], magic=b"GGUG"),
            "version": gguf_bytes([], [], version=2),
            "truncated header": good[:30],
            "truncated data": good[:-4],
            "empty": b"",
            "type": gguf_bytes([], [("t", [256], 16, b"\0" * 66)]),  # IQ2_XXS: unsupported
            "block": gguf_bytes([], [("t", [16], Q8_0, b"\0" * 17)]),  # row not 32-aligned
            "value type": good[:24] + pack_string("k") + struct.pack("<I", 99),
        }
        gr.GGUFFile(self.write("good.gguf", good))
        for what, data in bad.items():
            with self.assertRaises(gr.GGUFError, msg=what):
                gr.GGUFFile(self.write("bad.gguf", data))


# ---------------------------------------------------------------------------------------
# Single steps of the math


class MathTests(unittest.TestCase):
    def test_rmsnorm(self):
        x = np.array([3.0, -4.0, 0.0, 0.0])  # mean(x^2) = 25/4, rms = 2.5
        np.testing.assert_allclose(mr.rmsnorm(x, None, 0.0), [1.2, -1.6, 0, 0], rtol=1e-15)
        np.testing.assert_allclose(mr.rmsnorm(x, np.array([1.0, 2, 3, 4]), 0.0),
                                   [1.2, -3.2, 0, 0], rtol=1e-15)
        # eps: x / sqrt(6.25 + 3.75) = x / sqrt(10)
        np.testing.assert_allclose(mr.rmsnorm(x, None, 3.75), x / math.sqrt(10), rtol=1e-15)
        np.testing.assert_array_equal(mr.rmsnorm(np.zeros(3), None, 1e-5), np.zeros(3))

    def test_softplus(self):
        x = np.array([0.0, 1.0, -1.0, 30.0, 1000.0, -50.0, -1000.0])
        with np.errstate(over="raise", invalid="raise", divide="raise"):
            y = mr.softplus(x)
        want = [math.log(2), math.log(1 + math.e), math.log(1 + 1 / math.e),
                30 + math.exp(-30), 1000.0, math.exp(-50), 0.0]
        np.testing.assert_allclose(y, want, rtol=1e-14, atol=0)

    def test_silu(self):
        x = np.array([0.0, 1.0, -1.0, 1000.0, -1000.0, 2.5])
        with np.errstate(over="raise", invalid="raise", divide="raise"):
            y = mr.silu(x)
        want = [0.0, 1 / (1 + math.exp(-1)), -1 / (1 + math.e), 1000.0, 0.0,
                2.5 / (1 + math.exp(-2.5))]
        np.testing.assert_allclose(y, want, rtol=1e-14, atol=1e-300)

    def test_conv_step_known_weights(self):
        state = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])  # oldest row first
        xi = np.array([4.0, 40.0])
        conv1d = np.array([[1.0, 0.0, 0.0, 0.0],        # channel 0 picks the oldest row
                           [0.5, 0.25, 0.125, 1.0]])    # channel 1: tap 3 is the newest
        bias = np.array([0.5, -1.0])
        out, new = mr.conv_step(state, xi, conv1d, bias)
        # channel 1: 10*.5 + 20*.25 + 30*.125 + 40*1 - 1 = 52.75
        np.testing.assert_array_equal(out, [1.5, 52.75])
        np.testing.assert_array_equal(new, [[2.0, 20.0], [3.0, 30.0], [4.0, 40.0]])
        np.testing.assert_array_equal(state, [[1, 10], [2, 20], [3, 30]])  # not modified

    def test_conv_is_causal_convolution(self):
        rng = np.random.default_rng(1)
        d_conv, d_inner, T = 4, 3, 9
        conv1d = rng.standard_normal((d_inner, d_conv))
        xs = rng.standard_normal((T, d_inner))
        state = np.zeros((d_conv - 1, d_inner))
        outs = []
        for t in range(T):
            o, state = mr.conv_step(state, xs[t], conv1d, np.zeros(d_inner))
            outs.append(o)
        for c in range(d_inner):
            # out[t] = sum_k w[k] x[t - (d_conv-1) + k]  ==  full convolution with w reversed
            want = np.convolve(xs[:, c], conv1d[c][::-1])[:T]
            np.testing.assert_allclose(np.array(outs)[:, c], want, rtol=1e-12, atol=1e-14)

    def test_scan_closed_form(self):
        # constant inputs: s_T = dt x B (1 - a^T) / (1 - a), a = exp(dt A); y = s C + D x
        dt, A, B, C, D, x = 0.3, -0.7, 1.3, -0.9, 0.25, 2.0
        a = math.exp(dt * A)
        s = np.zeros((1, 1))
        for T in range(1, 11):
            y, s = mr.scan_step(s, np.array([x]), np.array([dt]), np.array([[A]]),
                                np.array([B]), np.array([C]), np.array([D]))
            s_want = dt * x * B * (1 - a ** T) / (1 - a)
            self.assertAlmostEqual(s[0, 0], s_want, places=13)
            self.assertAlmostEqual(y[0], s_want * C + D * x, places=13)

    def test_scan_per_channel_and_state(self):
        # d_inner 2, d_state 3, one step from a known state: every (c, n) by hand
        s0 = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0]])
        xc, dt = np.array([2.0, -1.0]), np.array([0.5, 2.0])
        A = np.array([[-1.0, -2.0, -0.5], [-0.1, -1.0, -3.0]])
        B, C, D = np.array([1.0, -1.0, 0.5]), np.array([0.2, 0.3, -0.4]), np.array([1.5, 2.0])
        y, s = mr.scan_step(s0, xc, dt, A, B, C, D)
        for c in range(2):
            for n in range(3):
                want = s0[c][n] * math.exp(dt[c] * A[c][n]) + B[n] * xc[c] * dt[c]
                self.assertAlmostEqual(s[c][n], want, places=14)
            self.assertAlmostEqual(y[c], sum(s[c][n] * C[n] for n in range(3)) + D[c] * xc[c],
                                   places=14)

    def test_q8_0_inputs(self):
        # block 1: max 127 so d = 1: halves round away from zero, 0.49999997 down
        b1 = [127.0, 63.5, -63.5, 0.5, -0.5, np.float32(0.49999997), 1.49, -126.6] + [0.0] * 24
        # block 2: max 2.54 so d = 0.02 (float16 0.0200042...): q = round(x / d) in float32
        b2 = [2.54, -1.0, 0.004] + [0.0] * 29
        got = gq.q8_0_input(np.array(b1 + b2))
        np.testing.assert_array_equal(got[:8], [127, 64, -64, 1, -1, 0, 1, -127])
        d2 = float(np.float16(np.float32(2.54) / np.float32(127)))
        self.assertNotEqual(d2, 0.02)
        np.testing.assert_array_equal(got[32:35], [127 * d2, -50 * d2, 0.0])
        self.assertTrue(np.all(got[35:] == 0) and np.all(gq.q8_0_input(np.zeros(32)) == 0))
        m = mr.Matrix(np.eye(32), 8)
        np.testing.assert_array_equal(m @ np.array(b1), got[:32])
        np.testing.assert_array_equal(mr.Matrix(np.eye(32), 1) @ np.array(b1), b1)

    def test_ggml_block_types(self):
        # every block type's dequantization equals ggml's own (tests/data/quants, made by
        # llama.cpp) bit for bit, and q8_K inputs equal ggml's q8_K blocks
        data = os.path.join(HERE, "..", "data", "quants")
        names = {"q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "q2_K": 10, "q3_K": 11,
                 "q4_K": 12, "q5_K": 13, "q6_K": 14, "iq4_nl": 20, "iq4_xs": 23}
        for name, t in names.items():
            with open(os.path.join(data, name + ".q"), "rb") as f:
                raw = f.read()
            want = np.fromfile(os.path.join(data, name + ".f32"), dtype=np.float32)
            got = gq.dequantize(t, raw)
            self.assertEqual(got.dtype, np.float32, name)
            self.assertTrue(np.array_equal(got.view(np.uint32), want.view(np.uint32)), name)
        x = np.fromfile(os.path.join(data, "input.f32"), dtype=np.float32)
        with open(os.path.join(data, "q8_K.q"), "rb") as f:
            blk = np.frombuffer(f.read(), dtype=np.dtype([("d", "<f4"), ("q", "i1", 256),
                                                           ("s", "<i2", 16)]))
        want = (blk["d"].astype(np.float64)[:, None] * blk["q"]).reshape(-1)
        np.testing.assert_array_equal(gq.q8_K_input(x), want)
        # q8_K rounds half to even, q8_0 half away from zero
        v = np.zeros(256)
        v[:3] = [-127.0, 2.5, -3.5]
        np.testing.assert_array_equal(gq.q8_K_input(v)[:3], [-127, 2, -4])
        # q8_1: the minimums' term is s (f16 of d * sum q) less the values' own sum
        vals, fix = gq.q8_1_input(np.arange(32, dtype=np.float64) / 7)
        d = np.float32(np.float32(31 / 7) / np.float32(127))
        s = float(np.float16(np.float32(sum(np.round(np.arange(32) / 7 / d))) * d))
        self.assertAlmostEqual(fix[0], s - vals.sum(), places=12)

    def test_projections_split_in_order(self):
        class L:
            pass
        layer = L()
        layer.ssm_in = np.eye(6, 3) + 2 * np.eye(6, 3, -3)  # first half x = h, then z = 2h
        xi, z = mr.in_projection(layer, np.array([1.0, 2.0, 3.0]))
        np.testing.assert_array_equal(xi, [1, 2, 3])
        np.testing.assert_array_equal(z, [2, 4, 6])
        layer.ssm_x = np.diag(np.arange(1.0, 6.0))  # dt_rank 1, d_state 2
        dtr, B, C = mr.x_projection(layer, np.ones(5), 1, 2)
        np.testing.assert_array_equal(dtr, [1])
        np.testing.assert_array_equal(B, [2, 3])
        np.testing.assert_array_equal(C, [4, 5])
        layer.ssm_dt = np.array([[1.0], [-2.0]])
        layer.dt_bias = np.array([0.5, 0.0])
        np.testing.assert_allclose(mr.dt_projection(layer, np.array([0.5])),
                                   [math.log1p(math.e), math.log1p(math.exp(-1))], rtol=1e-15)


# ---------------------------------------------------------------------------------------
# Whole models


def unrolled_two_tokens(w, hp, eps, dt_b_c_rms, t1, t2):
    """Logits of tokens t1, t2 of one sequence, written out with scalar loops.

    Layer by layer for both tokens at once (the reference goes token by token): token 1
    sees a zero state, so its conv window is [0, ..., 0, xi1] and its scan state is
    dt1 xc1 B1; token 2's window is [0, ..., xi1, xi2] and its state
    s1 exp(dt2 A) + dt2 xc2 B2.
    """
    E, K = hp["d_inner"], hp["d_conv"]
    R, N = hp["dt_rank"], hp["d_state"]

    def rms(v, g):
        r = 1.0 / math.sqrt(sum(a * a for a in v) / len(v) + eps)
        return [v[i] * r * (1.0 if g is None else g[i]) for i in range(len(v))]

    def silu(a):
        return a / (1.0 + math.exp(-a))

    def softplus(a):
        return math.log(1.0 + math.exp(a))

    def matvec(W, v):
        return [sum(W[i][j] * v[j] for j in range(len(v))) for i in range(len(W))]

    def split_dbc(dbc):
        dtr, B, C = dbc[:R], dbc[R:R + N], dbc[R + N:]
        if dt_b_c_rms:
            dtr, B, C = rms(dtr, None), rms(B, None), rms(C, None)
        return dtr, B, C

    x1 = list(w["token_embd.weight"][t1])
    x2 = list(w["token_embd.weight"][t2])
    for i in range(hp["n_layer"]):
        p = "blk.%d." % i
        norm, Win = w[p + "attn_norm.weight"], w[p + "ssm_in.weight"]
        conv, cb = w[p + "ssm_conv1d.weight"], w[p + "ssm_conv1d.bias"]
        Wx, Wdt, dtb = w[p + "ssm_x.weight"], w[p + "ssm_dt.weight"], w[p + "ssm_dt.bias"]
        A, D, Wout = w[p + "ssm_a"], w[p + "ssm_d"], w[p + "ssm_out.weight"]

        # token 1
        xz = matvec(Win, rms(x1, norm))
        xi1, z1 = xz[:E], xz[E:]
        xc1 = [silu(conv[c][K - 1] * xi1[c] + cb[c]) for c in range(E)]
        dtr, B1, C1 = split_dbc(matvec(Wx, xc1))
        dt1 = [softplus(sum(Wdt[c][r] * dtr[r] for r in range(R)) + dtb[c]) for c in range(E)]
        s1 = [[dt1[c] * xc1[c] * B1[n] for n in range(N)] for c in range(E)]
        y1 = [(sum(s1[c][n] * C1[n] for n in range(N)) + D[c] * xc1[c]) * silu(z1[c])
              for c in range(E)]
        x1 = [x1[j] + sum(Wout[j][c] * y1[c] for c in range(E)) for j in range(len(x1))]

        # token 2
        xz = matvec(Win, rms(x2, norm))
        xi2, z2 = xz[:E], xz[E:]
        xc2 = [silu(conv[c][K - 2] * xi1[c] + conv[c][K - 1] * xi2[c] + cb[c])
               for c in range(E)]
        dtr, B2, C2 = split_dbc(matvec(Wx, xc2))
        dt2 = [softplus(sum(Wdt[c][r] * dtr[r] for r in range(R)) + dtb[c]) for c in range(E)]
        s2 = [[s1[c][n] * math.exp(dt2[c] * A[c][n]) + dt2[c] * xc2[c] * B2[n]
               for n in range(N)] for c in range(E)]
        y2 = [(sum(s2[c][n] * C2[n] for n in range(N)) + D[c] * xc2[c]) * silu(z2[c])
              for c in range(E)]
        x2 = [x2[j] + sum(Wout[j][c] * y2[c] for c in range(E)) for j in range(len(x2))]

    out = w.get("output.weight", w["token_embd.weight"])
    onorm = w["output_norm.weight"]
    return np.array([matvec(out, rms(x1, onorm)), matvec(out, rms(x2, onorm))])


class ModelTests(TempDirCase):
    def load(self, name, data):
        return mr.MambaModel(self.write(name, data))

    def test_hparams_and_shapes(self):
        rng = np.random.default_rng(2)
        data, _ = model_bytes(HP, random_weights(rng, **HP), dt_b_c_rms=True)
        m = self.load("m.gguf", data)
        self.assertEqual((m.n_embd, m.n_layer, m.d_conv, m.d_inner, m.d_state, m.dt_rank,
                          m.n_vocab), (4, 2, 4, 6, 3, 2, 7))
        self.assertTrue(m.dt_b_c_rms)
        self.assertAlmostEqual(m.eps, 1e-5, places=12)
        self.assertEqual(m.layers[1].conv1d.shape, (6, 4))
        self.assertEqual(m.layers[1].A.shape, (6, 3))
        st = mr.new_state(m)
        self.assertEqual(len(st), 2)
        self.assertEqual(st[0].conv.shape, (3, 6))
        self.assertEqual(st[0].ssm.shape, (6, 3))

    def check_two_tokens(self, dt_b_c_rms, seed):
        rng = np.random.default_rng(seed)
        data, w = model_bytes(HP, random_weights(rng, **HP), dt_b_c_rms=dt_b_c_rms)
        m = self.load("m.gguf", data)
        got = mr.run_sequence(m, [3, 5])
        want = unrolled_two_tokens(w, HP, m.eps, bool(dt_b_c_rms), 3, 5)
        self.assertEqual(got.shape, (2, 7))
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)

    def test_two_tokens_match_unrolled(self):
        for seed in (3, 4, 5):
            self.check_two_tokens(None, seed)

    def test_two_tokens_match_unrolled_dt_b_c_rms(self):
        for seed in (6, 7):
            self.check_two_tokens(True, seed)

    def test_dt_b_c_rms_false_is_off(self):
        rng = np.random.default_rng(8)
        w = random_weights(rng, **HP)
        a = mr.run_sequence(self.load("a.gguf", model_bytes(HP, w)[0]), [1, 2, 3])
        b = mr.run_sequence(self.load("b.gguf", model_bytes(HP, w, dt_b_c_rms=False)[0]),
                            [1, 2, 3])
        np.testing.assert_array_equal(a, b)

    def test_dt_b_c_rms_makes_ssm_x_scale_invariant(self):
        # with dt, B, C rms-normalised (tiny eps), scaling ssm_x changes nothing
        rng = np.random.default_rng(9)
        w = random_weights(rng, **HP)
        w8 = dict(w)
        for i in range(HP["n_layer"]):
            w8["blk.%d.ssm_x.weight" % i] = w["blk.%d.ssm_x.weight" % i] * 8.0
        runs = {}
        for flag in (True, False):
            for name, ws in (("w", w), ("w8", w8)):
                data, _ = model_bytes(HP, ws, eps=1e-20, dt_b_c_rms=flag)
                runs[flag, name] = mr.run_sequence(self.load("s.gguf", data), [0, 4, 6, 2])
        np.testing.assert_allclose(runs[True, "w"], runs[True, "w8"], rtol=1e-9, atol=1e-12)
        self.assertGreater(np.max(np.abs(runs[False, "w"] - runs[False, "w8"])), 1e-3)

    def test_tied_and_untied_output(self):
        rng = np.random.default_rng(10)
        w = random_weights(rng, tied=True, **HP)
        tied = self.load("t.gguf", model_bytes(HP, w)[0])
        self.assertTrue(tied.tied)
        self.assertIs(tied.output.w, tied.token_embd)

        same = dict(w, **{"output.weight": w["token_embd.weight"]})
        untied_same = self.load("u.gguf", model_bytes(HP, same)[0])
        self.assertFalse(untied_same.tied)
        tokens = [6, 0, 3]
        np.testing.assert_array_equal(mr.run_sequence(tied, tokens),
                                      mr.run_sequence(untied_same, tokens))

        other = dict(w, **{"output.weight": rng.standard_normal((7, 4))})
        data, dec = model_bytes(HP, other)
        untied = self.load("o.gguf", data)
        got = mr.run_sequence(untied, [6, 0])
        np.testing.assert_allclose(got, unrolled_two_tokens(dec, HP, untied.eps, False, 6, 0),
                                   rtol=1e-12, atol=1e-12)
        self.assertGreater(np.max(np.abs(got - mr.run_sequence(tied, [6, 0]))), 1e-3)
        # the logits are the output matrix times the final normalised stream: tied == E h
        st = mr.new_state(tied)
        x = tied.token_embd[6].copy()
        for layer, s in zip(tied.layers, st):
            x = mr.mamba_layer(tied, layer, s, x)
        h = mr.rmsnorm(x, tied.output_norm, tied.eps)
        np.testing.assert_allclose(mr.run_sequence(tied, [6])[0], tied.token_embd @ h,
                                   rtol=1e-13, atol=1e-13)

    def test_mixed_weight_types_equal_f32(self):
        hp = dict(n_embd=32, n_layer=2, d_conv=4, d_inner=64, d_state=4, dt_rank=2,
                  n_vocab=11)
        rng = np.random.default_rng(11)
        w = random_weights(rng, **hp)
        types = {"token_embd.weight": F16, "output.weight": BF16, "ssm_in.weight": Q8_0,
                 "ssm_out.weight": Q4_0, "ssm_x.weight": BF16, "ssm_dt.weight": F16,
                 "ssm_conv1d.weight": F16}
        data, dec = model_bytes(hp, w, types=types)
        mixed = self.load("mixed.gguf", data)
        plain = self.load("plain.gguf", model_bytes(hp, dec)[0])  # decoded values are exact f32
        np.testing.assert_array_equal(mixed.layers[0].ssm_in.w, dec["blk.0.ssm_in.weight"])
        np.testing.assert_array_equal(mixed.layers[1].ssm_out.w, dec["blk.1.ssm_out.weight"])
        # the q8_0 / q4_0 products quantize their inputs: a small, nonzero difference
        exact = mr.run_sequence(plain, [1, 10, 5])
        got = mr.run_sequence(mixed, [1, 10, 5])
        rel = np.max(np.abs(got - exact)) / np.sqrt(np.mean(exact ** 2))
        self.assertTrue(1e-6 < rel < 3e-2, rel)
        for layer in plain.layers:
            layer.ssm_in.partner = layer.ssm_out.partner = gq.Q8_0
        np.testing.assert_array_equal(got, mr.run_sequence(plain, [1, 10, 5]))

    def test_sequences_start_from_zero_state(self):
        rng = np.random.default_rng(12)
        m = self.load("m.gguf", model_bytes(HP, random_weights(rng, **HP))[0])
        long = mr.run_sequence(m, [2, 4, 1, 3])
        np.testing.assert_array_equal(mr.run_sequence(m, [2, 4]), long[:2])
        self.assertGreater(np.max(np.abs(mr.run_sequence(m, [1, 3]) - long[2:])), 1e-6)

    def test_bad_models(self):
        rng = np.random.default_rng(13)
        w = random_weights(rng, **HP)
        with self.assertRaises(mr.ModelError):
            self.load("arch.gguf", model_bytes(HP, w, arch="rwkv6")[0])
        wrong = dict(w, **{"blk.1.ssm_x.weight": np.zeros((7, 6))})
        with self.assertRaisesRegex(mr.ModelError, "blk.1.ssm_x.weight"):
            self.load("shape.gguf", model_bytes(HP, wrong)[0])
        missing = {k: v for k, v in w.items() if k != "blk.0.ssm_d"}
        with self.assertRaisesRegex(mr.ModelError, "blk.0.ssm_d"):
            self.load("missing.gguf", model_bytes(HP, missing)[0])
        m = self.load("ok.gguf", model_bytes(HP, w)[0])
        with self.assertRaises(mr.ModelError):
            mr.run_sequence(m, [1, 7])

    def test_speed(self):
        hp = dict(n_embd=128, n_layer=4, d_conv=4, d_inner=256, d_state=16, dt_rank=8,
                  n_vocab=1000)
        rng = np.random.default_rng(14)
        path = self.write("big.gguf", model_bytes(hp, random_weights(rng, **hp))[0])
        t0 = time.time()
        logits = mr.run_sequence(mr.MambaModel(path), list(range(0, 1000, 20)))
        elapsed = time.time() - t0
        self.assertEqual(logits.shape, (50, 1000))
        self.assertTrue(np.all(np.isfinite(logits)))
        self.assertLess(elapsed, 10.0)


# ---------------------------------------------------------------------------------------
# Mamba-2 (mamba2_ref.py, docs/mamba2.md), against a closed form and an unrolled computation


HP2 = dict(n_embd=8, n_layer=2, d_conv=4, d_inner=12, d_state=5, n_head=4, n_group=2,
           n_vocab=9)


def mamba2_weights(rng, n_embd, n_layer, d_conv, d_inner, d_state, n_head, n_group, n_vocab,
                   tied=False):
    """Random Mamba-2 weights in numpy order, named like the GGUF tensors."""
    conv_dim = d_inner + 2 * n_group * d_state
    d_in_proj = 2 * d_inner + 2 * n_group * d_state + n_head

    def mat(rows, cols):
        return rng.standard_normal((rows, cols)) / math.sqrt(cols)

    w = {"token_embd.weight": rng.standard_normal((n_vocab, n_embd)),
         "output_norm.weight": rng.uniform(0.5, 1.5, n_embd)}
    if not tied:
        w["output.weight"] = mat(n_vocab, n_embd)
    for i in range(n_layer):
        p = "blk.%d." % i
        w[p + "attn_norm.weight"] = rng.uniform(0.5, 1.5, n_embd)
        w[p + "ssm_in.weight"] = mat(d_in_proj, n_embd)
        w[p + "ssm_conv1d.weight"] = rng.standard_normal((conv_dim, d_conv)) * 0.5
        w[p + "ssm_conv1d.bias"] = rng.standard_normal(conv_dim) * 0.1
        w[p + "ssm_dt.bias"] = rng.uniform(-2, 0.5, n_head)
        w[p + "ssm_a"] = -np.exp(rng.uniform(-1, 1, (n_head, 1)))          # GGUF {1, n_head}
        w[p + "ssm_d"] = rng.standard_normal((n_head, 1))
        w[p + "ssm_norm.weight"] = rng.uniform(0.5, 1.5, (n_group, d_inner // n_group))
        w[p + "ssm_out.weight"] = mat(n_embd, d_inner)
    return w


def mamba2_bytes(hp, weights, eps=1e-5, types=None):
    kvs = [("general.architecture", STR, "mamba2"),
           ("mamba2.context_length", U32, 1 << 20),
           ("mamba2.embedding_length", U32, hp["n_embd"]),
           ("mamba2.block_count", U32, hp["n_layer"]),
           ("mamba2.ssm.conv_kernel", U32, hp["d_conv"]),
           ("mamba2.ssm.inner_size", U32, hp["d_inner"]),
           ("mamba2.ssm.state_size", U32, hp["d_state"]),
           ("mamba2.ssm.time_step_rank", U32, hp["n_head"]),
           ("mamba2.ssm.group_count", U32, hp["n_group"]),
           ("mamba2.attention.layer_norm_rms_epsilon", F32V, eps)]
    return weights_gguf(kvs, weights, types)


def mamba2_sequence(w, hp, eps, tokens):
    """Logits of a whole sequence at once (T x n_vocab), with the scan in its closed
    ("attention", SSD) form per head h of group g:

      y_t = sum_{s<=t} (C_t . B_s) exp(sum_{s<tau<=t} dt_tau A) dt_s x_s + D x_t

    and the conv as a sum over each token's window of the zero-padded sequence."""
    T = len(tokens)
    Di, N, H, G, K = hp["d_inner"], hp["d_state"], hp["n_head"], hp["n_group"], hp["d_conv"]
    P = Di // H

    def rms(X, g):
        return X / np.sqrt(np.mean(X * X, axis=-1, keepdims=True) + eps) * g

    def silu(v):
        return v / (1.0 + np.exp(-v))

    X = w["token_embd.weight"][tokens]
    for i in range(hp["n_layer"]):
        p = "blk.%d." % i
        Z = rms(X, w[p + "attn_norm.weight"]) @ w[p + "ssm_in.weight"].T
        z, xBC, dt = Z[:, :Di], Z[:, Di:2 * Di + 2 * G * N], Z[:, 2 * Di + 2 * G * N:]
        padded = np.vstack([np.zeros((K - 1, xBC.shape[1])), xBC])
        conv = w[p + "ssm_conv1d.weight"]
        U = silu(np.array([np.sum(conv.T * padded[t:t + K], axis=0) for t in range(T)])
                 + w[p + "ssm_conv1d.bias"])
        xs = U[:, :Di].reshape(T, H, P)
        B = U[:, Di:Di + G * N].reshape(T, G, N)
        C = U[:, Di + G * N:].reshape(T, G, N)
        dt = np.log1p(np.exp(dt + w[p + "ssm_dt.bias"]))                     # (T, H)
        A, D = w[p + "ssm_a"][:, 0], w[p + "ssm_d"][:, 0]
        Y = np.zeros((T, H, P))
        for h in range(H):
            g = h // (H // G)
            for t in range(T):
                for s in range(t + 1):
                    decay = math.exp(sum(dt[tau, h] * A[h] for tau in range(s + 1, t + 1)))
                    Y[t, h] += (C[t, g] @ B[s, g]) * decay * dt[s, h] * xs[s, h]
                Y[t, h] += D[h] * xs[t, h]
        Y = Y.reshape(T, Di) * silu(z)
        Y = rms(Y.reshape(T, G, Di // G), w[p + "ssm_norm.weight"]).reshape(T, Di)
        X = X + Y @ w[p + "ssm_out.weight"].T
    out = w.get("output.weight", w["token_embd.weight"])
    return rms(X, w["output_norm.weight"]) @ out.T


def mamba2_unrolled_two_tokens(w, hp, eps, t1, t2):
    """Logits of tokens t1, t2 of one sequence, written out with scalar loops, layer by layer
    for both tokens: token 1's conv window is [0, .., 0, xBC1] and its state dt1 x1 B1^T;
    token 2's window [0, .., xBC1, xBC2] and its state s1 exp(dt2 A) + dt2 x2 B2^T. Each
    layer: split in_proj into z | xBC | dt, conv + silu, split xBC into x | B | C, per-head
    scan with group g = h // (n_head / n_group), y * silu(z), then RMSNorm per group."""
    E, Di, N = hp["n_embd"], hp["d_inner"], hp["d_state"]
    H, G, K = hp["n_head"], hp["n_group"], hp["d_conv"]
    P, conv_dim = Di // H, Di + 2 * G * N

    def rms(v, g):
        r = 1.0 / math.sqrt(sum(a * a for a in v) / len(v) + eps)
        return [v[i] * r * g[i] for i in range(len(v))]

    def silu(a):
        return a / (1.0 + math.exp(-a))

    def matvec(W, v):
        return [sum(W[i][j] * v[j] for j in range(len(v))) for i in range(len(W))]

    def split(u):
        x = [[u[h * P + q] for q in range(P)] for h in range(H)]
        B = [[u[Di + g * N + n] for n in range(N)] for g in range(G)]
        C = [[u[Di + G * N + g * N + n] for n in range(N)] for g in range(G)]
        return x, B, C

    def gate_norm(y, z, norm):
        y = [y[c] * silu(z[c]) for c in range(Di)]
        q = Di // G
        out = []
        for g in range(G):
            out += rms(y[g * q:(g + 1) * q], norm[g])
        return out

    x1 = list(w["token_embd.weight"][t1])
    x2 = list(w["token_embd.weight"][t2])
    for i in range(hp["n_layer"]):
        p = "blk.%d." % i
        norm, Win = w[p + "attn_norm.weight"], w[p + "ssm_in.weight"]
        conv, cb = w[p + "ssm_conv1d.weight"], w[p + "ssm_conv1d.bias"]
        dtb, A, D = w[p + "ssm_dt.bias"], w[p + "ssm_a"], w[p + "ssm_d"]
        snorm, Wout = w[p + "ssm_norm.weight"], w[p + "ssm_out.weight"]

        zxbcdt1 = matvec(Win, rms(x1, norm))
        zxbcdt2 = matvec(Win, rms(x2, norm))
        z1, xBC1, dtr1 = zxbcdt1[:Di], zxbcdt1[Di:Di + conv_dim], zxbcdt1[Di + conv_dim:]
        z2, xBC2, dtr2 = zxbcdt2[:Di], zxbcdt2[Di:Di + conv_dim], zxbcdt2[Di + conv_dim:]
        u1 = [silu(conv[c][K - 1] * xBC1[c] + cb[c]) for c in range(conv_dim)]
        u2 = [silu(conv[c][K - 2] * xBC1[c] + conv[c][K - 1] * xBC2[c] + cb[c])
              for c in range(conv_dim)]
        xs1, B1, C1 = split(u1)
        xs2, B2, C2 = split(u2)
        y1, y2 = [0.0] * Di, [0.0] * Di
        for h in range(H):
            g = h // (H // G)
            dt1 = math.log(1.0 + math.exp(dtr1[h] + dtb[h]))
            dt2 = math.log(1.0 + math.exp(dtr2[h] + dtb[h]))
            for q in range(P):
                s1 = [dt1 * xs1[h][q] * B1[g][n] for n in range(N)]
                s2 = [s1[n] * math.exp(dt2 * A[h][0]) + dt2 * xs2[h][q] * B2[g][n]
                      for n in range(N)]
                y1[h * P + q] = sum(s1[n] * C1[g][n] for n in range(N)) + D[h][0] * xs1[h][q]
                y2[h * P + q] = sum(s2[n] * C2[g][n] for n in range(N)) + D[h][0] * xs2[h][q]
        o1, o2 = matvec(Wout, gate_norm(y1, z1, snorm)), matvec(Wout, gate_norm(y2, z2, snorm))
        x1 = [x1[j] + o1[j] for j in range(E)]
        x2 = [x2[j] + o2[j] for j in range(E)]

    out = w.get("output.weight", w["token_embd.weight"])
    onorm = w["output_norm.weight"]
    return np.array([matvec(out, rms(x1, onorm)), matvec(out, rms(x2, onorm))])


def rel_err(got, want):
    """max |got - want| / rms(want): the measure of test_model_ref.sh."""
    return np.max(np.abs(got - want)) / np.sqrt(np.mean(np.square(want)))


class Mamba2Tests(TempDirCase):
    """mamba2_ref's token-by-token logits against the closed (SSD) form of the scan over the
    whole sequence (relative error 1e-11: the two differ only in float64 summation order) and
    against a scalar, unrolled two-token computation (1e-12)."""

    def load(self, hp, w, **kw):
        data, dec = mamba2_bytes(hp, w, **kw)
        return mr.load_model(self.write("m2.gguf", data)), dec

    def test_hparams_and_state_shape(self):
        m, _ = self.load(HP2, mamba2_weights(np.random.default_rng(40), **HP2))
        self.assertEqual(m.kind, "mamba2")
        self.assertEqual((m.n_head, m.head_dim, m.n_group, m.conv_dim, m.d_in_proj, m.n_vocab),
                         (4, 3, 2, 32, 48, 9))
        st = mr.new_state(m)
        self.assertEqual((len(st), st[0].conv.shape, st[0].ssm.shape), (2, (3, 32), (4, 3, 5)))

    def test_closed_form_over_a_sequence(self):
        tokens = [3, 8, 0, 5, 5, 1, 7, 2, 6]
        for seed, hp in ((41, HP2), (42, dict(HP2, n_group=1, n_layer=3)),
                         (43, dict(HP2, n_group=4, d_state=3))):
            m, dec = self.load(hp, mamba2_weights(np.random.default_rng(seed), **hp))
            got = mr.run_sequence(m, tokens)
            want = mamba2_sequence(dec, hp, m.eps, tokens)
            self.assertLess(rel_err(got, want), 1e-11, hp)

    def test_unrolled_two_tokens(self):
        for seed, hp, tied in ((44, HP2, False), (45, dict(HP2, n_group=1), True)):
            m, dec = self.load(hp, mamba2_weights(np.random.default_rng(seed), tied=tied, **hp))
            self.assertEqual(m.tied, tied)
            got = mr.run_sequence(m, [4, 7])
            np.testing.assert_allclose(got, mamba2_unrolled_two_tokens(dec, hp, m.eps, 4, 7),
                                       rtol=1e-12, atol=1e-12)

    def test_state_round_trip(self):
        m, _ = self.load(HP2, mamba2_weights(np.random.default_rng(46), **HP2))
        st = mr.new_state(m)
        for t in (1, 2):
            mr.forward(m, st, t)
        saved = [(s.conv.copy(), s.ssm.copy()) for s in st]
        fresh = mr.new_state(m)
        for s, (conv, ssm) in zip(fresh, saved):
            s.conv, s.ssm = conv, ssm
        np.testing.assert_array_equal(mr.forward(m, fresh, 3), mr.run_sequence(m, [1, 2, 3])[2])

    def test_bad_models(self):
        w = mamba2_weights(np.random.default_rng(47), **HP2)
        missing = {k: v for k, v in w.items() if k != "blk.1.ssm_norm.weight"}
        with self.assertRaisesRegex(mr.ModelError, r"blk\.1\.ssm_norm\.weight"):
            self.load(HP2, missing)
        wrong = dict(w, **{"blk.0.ssm_d": np.zeros((HP2["n_head"] + 1, 1))})
        with self.assertRaisesRegex(mr.ModelError, r"blk\.0\.ssm_d"):
            self.load(HP2, wrong)


# ---------------------------------------------------------------------------------------
# Granite 4.0-H (granite_ref.py): Mamba-2 and attention layers, against an unrolled computation


# layer kinds: "m" Mamba-2, "a" attention (head_count_kv[i] = n_head_kv, else 0)
HPG = dict(n_embd=8, n_layer=2, d_conv=3, d_state=4, n_ssm_head=4, n_group=2, n_head=4,
           n_head_kv=2, n_ff=10, n_vocab=9, kinds="ma")
# Granite-4.0-H-350M's multipliers, and an attention scale of 1/head_dim
SCALES = {"embedding_scale": 12.0, "residual_scale": 0.246, "attention.scale": 0.5,
          "logit_scale": 3.0}


def granite_weights(rng, n_embd, n_layer, d_conv, d_state, n_ssm_head, n_group, n_head,
                    n_head_kv, n_ff, n_vocab, kinds, tied=False):
    """Random Granite 4.0-H weights in numpy order, named like the GGUF tensors: the
    Mamba-2 tensors of mamba2_weights in the "m" layers, attention in the "a" layers."""
    E, hd = n_embd, n_embd // n_head
    w = mamba2_weights(rng, n_embd, n_layer, d_conv, 2 * n_embd, d_state, n_ssm_head, n_group,
                       n_vocab, tied)

    def mat(rows, cols, gain=1.0):
        return rng.standard_normal((rows, cols)) * gain / math.sqrt(cols)

    for i, kind in enumerate(kinds):
        p = "blk.%d." % i
        if kind == "a":
            for name in [n for n in w if n.startswith(p + "ssm_")]:
                del w[name]
            # larger Q and K: scores of unit spread, so the softmax weights differ
            w[p + "attn_q.weight"] = mat(n_head * hd, E, 2.0)
            w[p + "attn_k.weight"] = mat(n_head_kv * hd, E, 2.0)
            w[p + "attn_v.weight"] = mat(n_head_kv * hd, E)
            w[p + "attn_output.weight"] = mat(E, n_head * hd)
        w[p + "ffn_norm.weight"] = rng.uniform(0.5, 1.5, E)
        w[p + "ffn_gate.weight"] = mat(n_ff, E)
        w[p + "ffn_up.weight"] = mat(n_ff, E)
        w[p + "ffn_down.weight"] = mat(E, n_ff)
    return w


def granite_bytes(hp, weights, scales=None, eps=1e-5, rope_finetuned=False, types=None,
                  extra=()):
    """A granitehybrid GGUF file with the keys of llama.cpp's converter (tools/dev/
    mk_granite.c); scales: the scale keys to write (None: SCALES); extra: more keys."""
    a = "granitehybrid."
    kv = [hp["n_head_kv"] if k == "a" else 0 for k in hp["kinds"]]
    kvs = [("general.architecture", STR, "granitehybrid"),
           (a + "context_length", U32, 1 << 20),
           (a + "embedding_length", U32, hp["n_embd"]),
           (a + "block_count", U32, hp["n_layer"]),
           (a + "feed_forward_length", U32, hp["n_ff"]),
           (a + "attention.head_count", U32, hp["n_head"]),
           (a + "attention.head_count_kv", ARR, (U32, kv)),
           (a + "attention.layer_norm_rms_epsilon", F32V, eps),
           (a + "ssm.conv_kernel", U32, hp["d_conv"]),
           (a + "ssm.inner_size", U32, 2 * hp["n_embd"]),
           (a + "ssm.state_size", U32, hp["d_state"]),
           (a + "ssm.time_step_rank", U32, hp["n_ssm_head"]),
           (a + "ssm.group_count", U32, hp["n_group"])]
    if rope_finetuned is not None:
        kvs.append((a + "rope.scaling.finetuned", BOOL, rope_finetuned))
    for k, v in (SCALES if scales is None else scales).items():
        kvs.append((a + k, F32V, v))
    return weights_gguf(kvs + list(extra), weights, types)


def _rms(v, g, eps):
    r = 1.0 / math.sqrt(sum(a * a for a in v) / len(v) + eps)
    return [v[i] * r * g[i] for i in range(len(v))]


def _silu(a):
    return a / (1.0 + math.exp(-a))


def _matvec(W, v):
    return [sum(W[i][j] * v[j] for j in range(len(v))) for i in range(len(W))]


def unrolled_mamba2_mixer(w, p, Di, N, Hs, G, K, eps, h1, h2):
    """The Mamba-2 mixer of layer prefix p on the normed inputs h1, h2 of the first two tokens,
    with scalar loops: ssm_out of each token's gated y, group-RMS-normed when the layer has
    ssm_norm.weight."""
    P, conv_dim = Di // Hs, Di + 2 * G * N
    Win, conv, cb = w[p + "ssm_in.weight"], w[p + "ssm_conv1d.weight"], w[p + "ssm_conv1d.bias"]
    dtb, A, D = w[p + "ssm_dt.bias"], w[p + "ssm_a"], w[p + "ssm_d"]
    zx1, zx2 = _matvec(Win, h1), _matvec(Win, h2)
    u1 = [_silu(conv[c][K - 1] * zx1[Di + c] + cb[c]) for c in range(conv_dim)]
    u2 = [_silu(conv[c][K - 2] * zx1[Di + c] + conv[c][K - 1] * zx2[Di + c] + cb[c])
          for c in range(conv_dim)]
    y1, y2 = [0.0] * Di, [0.0] * Di
    for h in range(Hs):
        g = h // (Hs // G)
        dt1 = math.log(1.0 + math.exp(zx1[Di + conv_dim + h] + dtb[h]))
        dt2 = math.log(1.0 + math.exp(zx2[Di + conv_dim + h] + dtb[h]))
        for q in range(P):
            c = h * P + q
            s1 = [dt1 * u1[c] * u1[Di + g * N + n] for n in range(N)]
            s2 = [s1[n] * math.exp(dt2 * A[h][0]) + dt2 * u2[c] * u2[Di + g * N + n]
                  for n in range(N)]
            y1[c] = sum(s1[n] * u1[Di + G * N + g * N + n] for n in range(N)) + D[h][0] * u1[c]
            y2[c] = sum(s2[n] * u2[Di + G * N + g * N + n] for n in range(N)) + D[h][0] * u2[c]
    out = []
    for y, zx in ((y1, zx1), (y2, zx2)):
        y = [y[c] * _silu(zx[c]) for c in range(Di)]
        if p + "ssm_norm.weight" in w:
            q = Di // G
            normed = []
            for g in range(G):
                normed += _rms(y[g * q:(g + 1) * q], w[p + "ssm_norm.weight"][g], eps)
            y = normed
        out.append(_matvec(w[p + "ssm_out.weight"], y))
    return out


def unrolled_qk_norm(w, name, hd, n_heads, eps, vec):
    """vec through the Q/K norm `name` when w has it: a weight of hd values norms each head's
    slice on its own, one of the whole vector's size norms all of vec at once."""
    if name not in w:
        return vec
    g = list(w[name])
    if len(g) == hd:
        out = []
        for i in range(n_heads):
            out += _rms(vec[i * hd:(i + 1) * hd], g, eps)
        return out
    return _rms(vec, g, eps)


def unrolled_attention(w, p, H, Hkv, hd, att, h1, h2, rope=None, eps=1e-5):
    """Causal GQA attention of layer prefix p for the first two tokens: token 1 sees only
    itself (its output is its own V row per head), token 2 weighs V1 and V2 by the softmax of
    q2.k1 and q2.k2 times att, query head h reading K/V head h // (H / Hkv). q and k go through
    the layer's Q/K norms (unrolled_qk_norm, epsilon eps) when it has them, then rope(vec, pos):
    the rotation of one head's q or k values at position pos (None: none)."""
    q2 = _matvec(w[p + "attn_q.weight"], h2)  # token 1 attends only to itself: q1 is not needed
    k1, k2 = _matvec(w[p + "attn_k.weight"], h1), _matvec(w[p + "attn_k.weight"], h2)
    q2 = unrolled_qk_norm(w, p + "attn_q_norm.weight", hd, H, eps, q2)
    k1 = unrolled_qk_norm(w, p + "attn_k_norm.weight", hd, Hkv, eps, k1)
    k2 = unrolled_qk_norm(w, p + "attn_k_norm.weight", hd, Hkv, eps, k2)
    v1, v2 = _matvec(w[p + "attn_v.weight"], h1), _matvec(w[p + "attn_v.weight"], h2)
    o1, o2 = [0.0] * (H * hd), [0.0] * (H * hd)

    def head(vec, i, pos):
        part = vec[i * hd:(i + 1) * hd]
        return rope(part, pos) if rope else part
    for h in range(H):
        g = h // (H // Hkv)
        qh, ka, kb = head(q2, h, 1), head(k1, g, 0), head(k2, g, 1)
        s1 = att * sum(qh[d] * ka[d] for d in range(hd))
        s2 = att * sum(qh[d] * kb[d] for d in range(hd))
        p1 = 1.0 / (1.0 + math.exp(s2 - s1))
        for d in range(hd):
            o1[h * hd + d] = v1[g * hd + d]
            o2[h * hd + d] = p1 * v1[g * hd + d] + (1.0 - p1) * v2[g * hd + d]
    return _matvec(w[p + "attn_output.weight"], o1), _matvec(w[p + "attn_output.weight"], o2)


def unrolled_ffn(w, p, eps, x):
    """The SwiGLU feed-forward of layer prefix p on residual x (norm: ffn_norm.weight, or
    Falcon-H1's ffn_norm)."""
    norm = w[p + "ffn_norm.weight"] if p + "ffn_norm.weight" in w else w[p + "ffn_norm"]
    h = _rms(x, norm, eps)
    gate, up = _matvec(w[p + "ffn_gate.weight"], h), _matvec(w[p + "ffn_up.weight"], h)
    return _matvec(w[p + "ffn_down.weight"],
                   [_silu(gate[k]) * up[k] for k in range(len(gate))])


def unrolled_logits(w, eps, x1, x2):
    out = w.get("output.weight", w["token_embd.weight"])
    onorm = w["output_norm.weight"]
    return np.array([_matvec(out, _rms(x1, onorm, eps)), _matvec(out, _rms(x2, onorm, eps))])


def unrolled_mixers(w, hp, eps, att):
    """The scalar-loop pieces for a model of hp's sizes: rms(v, g), silu, matvec, and the mixers
    mamba2(p, h1, h2) and attention(p, h1, h2) of layer prefix p (unrolled_mamba2_mixer and
    unrolled_attention; d_inner hp's or 2*n_embd, head_dim hp's or n_embd/n_head)."""
    E, H = hp["n_embd"], hp["n_head"]
    Di, hd = hp.get("d_inner", 2 * E), hp.get("head_dim", E // H)

    def mamba2(p, h1, h2):
        return unrolled_mamba2_mixer(w, p, Di, hp["d_state"], hp["n_ssm_head"], hp["n_group"],
                                     hp["d_conv"], eps, h1, h2)

    def attention(p, h1, h2):
        return unrolled_attention(w, p, H, hp["n_head_kv"], hd, att, h1, h2, eps=eps)
    return (lambda v, g: _rms(v, g, eps)), _silu, _matvec, mamba2, attention


def granite_unrolled_two_tokens(w, hp, eps, scales, t1, t2):
    """Logits of tokens t1, t2 of one sequence with scalar loops, both tokens layer by layer:
    Mamba-2 layers (unrolled_mamba2_mixer), attention layers without RoPE (unrolled_attention).
    Each branch is multiplied by residual_scale before it is added; the embedding by
    embedding_scale; the logits divided by logit_scale. A scale absent from `scales` is not
    applied (attention: 1/sqrt(head_dim))."""
    E, N, Hs, G, K = hp["n_embd"], hp["d_state"], hp["n_ssm_head"], hp["n_group"], hp["d_conv"]
    H, Hkv = hp["n_head"], hp["n_head_kv"]
    hd = E // H
    scales = {k: float(np.float32(v)) for k, v in scales.items()}  # as the file holds them
    es = scales.get("embedding_scale", 1.0)
    rs = scales.get("residual_scale", 1.0)
    ls = scales.get("logit_scale", 1.0)
    att = scales.get("attention.scale", 1.0 / math.sqrt(hd))

    x1 = [es * v for v in w["token_embd.weight"][t1]]
    x2 = [es * v for v in w["token_embd.weight"][t2]]
    for i, kind in enumerate(hp["kinds"]):
        p = "blk.%d." % i
        h1, h2 = _rms(x1, w[p + "attn_norm.weight"], eps), _rms(x2, w[p + "attn_norm.weight"], eps)
        if kind == "a":
            a1, a2 = unrolled_attention(w, p, H, Hkv, hd, att, h1, h2, eps=eps)
        else:
            a1, a2 = unrolled_mamba2_mixer(w, p, 2 * E, N, Hs, G, K, eps, h1, h2)
        x1 = [x1[j] + rs * a1[j] for j in range(E)]
        x2 = [x2[j] + rs * a2[j] for j in range(E)]
        f1, f2 = unrolled_ffn(w, p, eps, x1), unrolled_ffn(w, p, eps, x2)
        x1 = [x1[j] + rs * f1[j] for j in range(E)]
        x2 = [x2[j] + rs * f2[j] for j in range(E)]
    return unrolled_logits(w, eps, x1, x2) / ls


class GraniteTests(TempDirCase):
    """granite_ref's logits against the unrolled two-token computation above (1e-12), with
    each scale shown to change them, the layer kinds read from head_count_kv, and the
    attention cache carrying the past."""

    def load(self, hp, w, **kw):
        data, dec = granite_bytes(hp, w, **kw)
        return mr.load_model(self.write("g.gguf", data)), dec

    def test_hparams_and_layer_kinds(self):
        hp = dict(HPG, n_layer=4, kinds="amma")
        m, _ = self.load(hp, granite_weights(np.random.default_rng(60), **hp))
        self.assertEqual(m.kind, "granitehybrid")
        self.assertEqual((m.n_head_kv, m.head_dim, m.n_ssm_head, m.d_inner), ([2, 0, 0, 2], 2, 4,
                                                                               16))
        self.assertEqual([type(x).__name__ for x in m.mixers],
                         ["AttentionLayer", "Mamba2Layer", "Mamba2Layer", "AttentionLayer"])
        st = mr.new_state(m)
        self.assertEqual([type(s).__name__ for s in st],
                         ["KVCache", "Mamba2State", "Mamba2State", "KVCache"])
        self.assertEqual((m.embd_scale, m.residual_scale, m.attn_scale, m.logit_scale),
                         (12.0, np.float32(0.246), 0.5, 3.0))

    def test_unrolled_two_tokens(self):
        for seed, hp, tied in ((61, HPG, False), (62, dict(HPG, kinds="am"), True),
                               (63, dict(HPG, n_layer=3, kinds="mam", n_head_kv=1), False),
                               (64, dict(HPG, n_head_kv=4, n_group=1), False)):
            m, dec = self.load(hp, granite_weights(np.random.default_rng(seed), tied=tied, **hp))
            self.assertEqual(m.tied, tied)
            got = mr.run_sequence(m, [4, 7])
            want = granite_unrolled_two_tokens(dec, hp, m.eps, SCALES, 4, 7)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)

    def test_each_scale_matters(self):
        w = granite_weights(np.random.default_rng(65), **HPG)
        base, _ = self.load(HPG, w)
        base_logits = mr.run_sequence(base, [4, 7])
        for key, other in (("embedding_scale", 0.7), ("residual_scale", 1.3),
                           ("attention.scale", 0.05), ("logit_scale", 0.5)):
            scales = dict(SCALES, **{key: other})
            m, dec = self.load(HPG, w, scales=scales)
            got = mr.run_sequence(m, [4, 7])
            np.testing.assert_allclose(
                got, granite_unrolled_two_tokens(dec, HPG, m.eps, scales, 4, 7),
                rtol=1e-12, atol=1e-12)
            self.assertGreater(rel_err(got, base_logits), 1e-3, key)
            if key == "attention.scale":  # token 1 sees only itself: no scale acts on it
                np.testing.assert_allclose(got[0], base_logits[0], rtol=1e-12)

    def test_absent_scales(self):
        """An absent scale key is not applied; attention.scale falls back to 1/sqrt(head_dim)
        (llama.cpp's defaults)."""
        w = granite_weights(np.random.default_rng(66), **HPG)
        m, dec = self.load(HPG, w, scales={})
        self.assertAlmostEqual(m.attn_scale, 1 / math.sqrt(2))
        np.testing.assert_allclose(mr.run_sequence(m, [4, 7]),
                                   granite_unrolled_two_tokens(dec, HPG, m.eps, {}, 4, 7),
                                   rtol=1e-12, atol=1e-12)
        only_logit, _ = self.load(HPG, w, scales={"logit_scale": 4.0})
        np.testing.assert_allclose(mr.run_sequence(only_logit, [4, 7]) * 4.0,
                                   mr.run_sequence(m, [4, 7]), rtol=1e-12)

    def test_attention_carries_the_past(self):
        """With the Mamba-2 layer's output zeroed, only the attention cache links tokens: the
        last token's logits depend on the first token until attn_output is zeroed too."""
        w = granite_weights(np.random.default_rng(67), **HPG)
        w["blk.0.ssm_out.weight"] = np.zeros_like(w["blk.0.ssm_out.weight"])
        m, _ = self.load(HPG, w)
        a, b = mr.run_sequence(m, [1, 5, 7])[2], mr.run_sequence(m, [2, 5, 7])[2]
        self.assertGreater(rel_err(a, b), 1e-3)
        w["blk.1.attn_output.weight"] = np.zeros_like(w["blk.1.attn_output.weight"])
        m, _ = self.load(HPG, w)
        np.testing.assert_array_equal(mr.run_sequence(m, [1, 5, 7])[2],
                                      mr.run_sequence(m, [2, 5, 7])[2])

    def test_state_carries_over_and_sequences_start_fresh(self):
        m, _ = self.load(HPG, granite_weights(np.random.default_rng(68), **HPG))
        st = mr.new_state(m)
        rows = [mr.forward(m, st, t) for t in (3, 1, 4, 1, 5)]
        self.assertEqual(len(st[1].k), 5)
        np.testing.assert_array_equal(np.array(rows), mr.run_sequence(m, [3, 1, 4, 1, 5]))
        np.testing.assert_array_equal(mr.run_sequence(m, [4, 1, 5])[0],
                                      mr.run_sequence(m, [4])[0])

    def test_qk_norms(self):
        """Q/K norms of each head and of the whole vector against the unrolled computation;
        each changes the logits; one without the other, or a third size, is refused."""
        w = granite_weights(np.random.default_rng(70), **HPG)
        base = mr.run_sequence(self.load(HPG, w)[0], [4, 7])
        hd, rng = HPG["n_embd"] // HPG["n_head"], np.random.default_rng(71)
        for nq, nk in ((hd, hd), (HPG["n_head"] * hd, HPG["n_head_kv"] * hd)):
            normed = dict(w, **{"blk.1.attn_q_norm.weight": rng.uniform(0.5, 1.5, nq),
                                "blk.1.attn_k_norm.weight": rng.uniform(0.5, 1.5, nk)})
            m, dec = self.load(HPG, normed)
            got = mr.run_sequence(m, [4, 7])
            np.testing.assert_allclose(
                got, granite_unrolled_two_tokens(dec, HPG, m.eps, SCALES, 4, 7),
                rtol=1e-12, atol=1e-12)
            # token 2 only, through its one softmax weight under Granite's scales: 3e-4 for
            # heads of 2 values, far above the match's 1e-12
            self.assertGreater(rel_err(got, base), 1e-4, (nq, nk))
        with self.assertRaisesRegex(mr.ModelError, r"attn_k_norm\.weight without"):
            self.load(HPG, dict(w, **{"blk.1.attn_k_norm.weight": np.ones(hd)}))
        with self.assertRaisesRegex(mr.ModelError, r"attn_q_norm\.weight has numpy shape"):
            self.load(HPG, dict(w, **{"blk.1.attn_q_norm.weight": np.ones(hd + 1),
                                      "blk.1.attn_k_norm.weight": np.ones(hd)}))

    def test_bad_models(self):
        w = granite_weights(np.random.default_rng(69), **HPG)
        for rope in (True, None):  # llama.cpp applies RoPE when the key is true or missing
            with self.assertRaisesRegex(mr.ModelError, "rope.scaling.finetuned"):
                self.load(HPG, w, rope_finetuned=rope)
        missing = {k: v for k, v in w.items() if k != "blk.1.attn_k.weight"}
        with self.assertRaisesRegex(mr.ModelError, r"blk\.1\.attn_k\.weight"):
            self.load(HPG, missing)
        wrong = dict(w, **{"blk.1.ffn_up.weight": np.zeros((HPG["n_ff"] + 1, HPG["n_embd"]))})
        with self.assertRaisesRegex(mr.ModelError, r"blk\.1\.ffn_up\.weight"):
            self.load(HPG, wrong)
        biased = dict(w, **{"blk.1.attn_q.bias": np.zeros(HPG["n_embd"])})
        with self.assertRaisesRegex(mr.ModelError, r"blk\.1\.attn_q\.bias"):
            self.load(HPG, biased)


# ---------------------------------------------------------------------------------------
# Falcon-H1 (falcon_h1_ref.py): attention with NeoX RoPE and Mamba-2 in parallel in every layer


# head_dim (attention.key_length) 4 is not n_embd / n_head, d_inner 12 is not 2 * n_embd
HPF = dict(n_embd=8, n_layer=2, d_conv=3, d_inner=12, d_state=4, n_ssm_head=3, n_group=3,
           n_head=4, n_head_kv=2, head_dim=4, n_ff=10, n_vocab=9)


def falcon_h1_weights(rng, n_embd, n_layer, d_conv, d_inner, d_state, n_ssm_head, n_group,
                      n_head, n_head_kv, head_dim, n_ff, n_vocab, tied=False, ssm_norm=False):
    """Random Falcon-H1 weights in numpy order, named like the GGUF tensors: every layer has
    the Mamba-2 tensors of mamba2_weights (ssm_norm only when asked) and attention; the FFN
    norm is blk.N.ffn_norm."""
    E, hd = n_embd, head_dim
    w = mamba2_weights(rng, n_embd, n_layer, d_conv, d_inner, d_state, n_ssm_head, n_group,
                       n_vocab, tied)

    def mat(rows, cols, gain=1.0):
        return rng.standard_normal((rows, cols)) * gain / math.sqrt(cols)

    for i in range(n_layer):
        p = "blk.%d." % i
        if not ssm_norm:
            del w[p + "ssm_norm.weight"]
        w[p + "attn_q.weight"] = mat(n_head * hd, E, 2.0)
        w[p + "attn_k.weight"] = mat(n_head_kv * hd, E, 2.0)
        w[p + "attn_v.weight"] = mat(n_head_kv * hd, E)
        w[p + "attn_output.weight"] = mat(E, n_head * hd)
        w[p + "ffn_norm"] = rng.uniform(0.5, 1.5, E)
        w[p + "ffn_gate.weight"] = mat(n_ff, E)
        w[p + "ffn_up.weight"] = mat(n_ff, E)
        w[p + "ffn_down.weight"] = mat(E, n_ff)
    return w


def falcon_h1_bytes(hp, weights, eps=1e-5, rope_base=1e4, types=None, extra=()):
    """A falcon-h1 GGUF file with the keys of llama.cpp's converter (tools/dev/
    mk_falcon_h1.c); extra: more keys."""
    a = "falcon-h1."
    kvs = [("general.architecture", STR, "falcon-h1"),
           (a + "context_length", U32, 16384),
           (a + "embedding_length", U32, hp["n_embd"]),
           (a + "feed_forward_length", U32, hp["n_ff"]),
           (a + "attention.head_count", U32, hp["n_head"]),
           (a + "block_count", U32, hp["n_layer"]),
           (a + "ssm.conv_kernel", U32, hp["d_conv"]),
           (a + "ssm.inner_size", U32, hp["d_inner"]),
           (a + "ssm.state_size", U32, hp["d_state"]),
           (a + "ssm.time_step_rank", U32, hp["n_ssm_head"]),
           (a + "ssm.group_count", U32, hp["n_group"]),
           (a + "attention.layer_norm_rms_epsilon", F32V, eps),
           (a + "vocab_size", U32, hp["n_vocab"]),
           (a + "attention.head_count_kv", U32, hp["n_head_kv"]),
           (a + "attention.key_length", U32, hp["head_dim"]),
           (a + "attention.value_length", U32, hp["head_dim"]),
           (a + "rope.freq_base", F32V, rope_base)]
    return weights_gguf(kvs + list(extra), weights, types)


def unrolled_neox_rope(base):
    """NeoX RoPE of one head's values at position pos, written out pair by pair: value i and
    value i + n/2 turn by pos * base^(-2i/n)."""
    def rope(v, pos):
        n = len(v)
        out = list(v)
        for i in range(n // 2):
            t = pos * base ** (-2.0 * i / n)
            out[i] = v[i] * math.cos(t) - v[i + n // 2] * math.sin(t)
            out[i + n // 2] = v[i] * math.sin(t) + v[i + n // 2] * math.cos(t)
        return out
    return rope


def falcon_h1_unrolled_two_tokens(w, hp, eps, rope_base, t1, t2, attention=True, mamba=True):
    """Logits of tokens t1, t2 with scalar loops: per layer x += attention(h) + mamba2(h) on the
    same h = rmsnorm(x) * attn_norm, attention with NeoX RoPE at positions 0 and 1 and scale
    1/sqrt(head_dim), then x += ffn(x). attention/mamba False leaves that branch out (to show
    that each one matters)."""
    E, hd = hp["n_embd"], hp["head_dim"]
    rope_base = float(np.float32(rope_base))  # as the file holds it
    x1, x2 = list(w["token_embd.weight"][t1]), list(w["token_embd.weight"][t2])
    for i in range(hp["n_layer"]):
        p = "blk.%d." % i
        h1, h2 = _rms(x1, w[p + "attn_norm.weight"], eps), _rms(x2, w[p + "attn_norm.weight"], eps)
        branches = []
        if attention:
            branches.append(unrolled_attention(w, p, hp["n_head"], hp["n_head_kv"], hd,
                                               1.0 / math.sqrt(hd), h1, h2,
                                               unrolled_neox_rope(rope_base), eps))
        if mamba:
            branches.append(unrolled_mamba2_mixer(w, p, hp["d_inner"], hp["d_state"],
                                                  hp["n_ssm_head"], hp["n_group"], hp["d_conv"],
                                                  eps, h1, h2))
        for b1, b2 in branches:
            x1 = [x1[j] + b1[j] for j in range(E)]
            x2 = [x2[j] + b2[j] for j in range(E)]
        f1, f2 = unrolled_ffn(w, p, eps, x1), unrolled_ffn(w, p, eps, x2)
        x1 = [x1[j] + f1[j] for j in range(E)]
        x2 = [x2[j] + f2[j] for j in range(E)]
    return unrolled_logits(w, eps, x1, x2)


class FalconH1Tests(TempDirCase):
    """falcon_h1_ref's logits against the unrolled two-token computation above (1e-12), with
    RoPE, the attention branch, the Mamba-2 branch and the optional ssm_norm each shown to
    change them."""

    def load(self, hp, w, **kw):
        data, dec = falcon_h1_bytes(hp, w, **kw)
        return mr.load_model(self.write("f.gguf", data)), dec

    def test_hparams(self):
        m, _ = self.load(HPF, falcon_h1_weights(np.random.default_rng(80), **HPF),
                         rope_base=1e11)
        self.assertEqual(m.kind, "falcon-h1")
        self.assertEqual((m.n_head, m.head_dim, m.n_rot, m.d_inner, m.n_ssm_head, m.n_group),
                         (4, 4, 4, 12, 3, 3))
        self.assertEqual(m.rope_base, float(np.float32(1e11)))
        self.assertAlmostEqual(m.attn_scale, 0.5)
        self.assertEqual([x.norm for x in m.mambas], [None, None])
        st = mr.new_state(m)
        self.assertEqual([(type(a).__name__, type(b).__name__) for a, b in st],
                         [("KVCache", "Mamba2State")] * 2)

    def test_unrolled_two_tokens(self):
        for seed, hp, kw in ((81, HPF, {}), (82, dict(HPF, n_layer=3, n_head_kv=1), {"tied": True}),
                             (83, dict(HPF, n_group=1, head_dim=6), {"ssm_norm": True}),
                             (84, dict(HPF, n_head_kv=4, n_ssm_head=6), {})):
            for base in (1e4, 10.0):
                m, dec = self.load(hp, falcon_h1_weights(np.random.default_rng(seed), **hp, **kw),
                                   rope_base=base)
                got = mr.run_sequence(m, [4, 7])
                want = falcon_h1_unrolled_two_tokens(dec, hp, m.eps, base, 4, 7)
                np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)

    def test_rope_and_both_branches_matter(self):
        w = falcon_h1_weights(np.random.default_rng(85), **HPF)
        m, dec = self.load(HPF, w, rope_base=10.0)
        got = mr.run_sequence(m, [4, 7])
        for kw in ({"attention": False}, {"mamba": False}):
            other = falcon_h1_unrolled_two_tokens(dec, HPF, m.eps, 10.0, 4, 7, **kw)
            self.assertGreater(rel_err(got, other), 1e-3, kw)
        # RoPE turns q2 against k1 by one position: a different base changes token 2 only
        m2, _ = self.load(HPF, w, rope_base=1000.0)
        other = mr.run_sequence(m2, [4, 7])
        np.testing.assert_allclose(other[0], got[0], rtol=1e-12)
        self.assertGreater(rel_err(other[1], got[1]), 1e-3)
        # without the rotation (a reference with RoPE taken out) the logits differ too
        import falcon_h1_ref as fr
        keep = fr.rope_neox
        try:
            fr.rope_neox = lambda v, pos, base: v
            self.assertGreater(rel_err(mr.run_sequence(m, [4, 7])[1], got[1]), 1e-3)
        finally:
            fr.rope_neox = keep

    def test_qk_norms_before_rope(self):
        """Q/K norms of each head and of the whole vector, then RoPE, against the unrolled
        computation; the other order (RoPE, then the norm) gives other logits."""
        w = falcon_h1_weights(np.random.default_rng(86), **HPF)
        hd, rng = HPF["head_dim"], np.random.default_rng(87)
        for nq, nk in ((hd, hd), (HPF["n_head"] * hd, HPF["n_head_kv"] * hd)):
            normed = dict(w)
            for i in range(HPF["n_layer"]):
                normed["blk.%d.attn_q_norm.weight" % i] = rng.uniform(0.5, 1.5, nq)
                normed["blk.%d.attn_k_norm.weight" % i] = rng.uniform(0.5, 1.5, nk)
            m, dec = self.load(HPF, normed, rope_base=10.0)
            np.testing.assert_allclose(
                mr.run_sequence(m, [4, 7]),
                falcon_h1_unrolled_two_tokens(dec, HPF, m.eps, 10.0, 4, 7),
                rtol=1e-12, atol=1e-12)
        # one weight for q and k of each head, so that "RoPE, then the norm" is a rope function
        g = rng.uniform(0.5, 1.5, hd)
        normed = dict(w)
        for i in range(HPF["n_layer"]):
            normed["blk.%d.attn_q_norm.weight" % i] = normed["blk.%d.attn_k_norm.weight" % i] = g
        m, _ = self.load(HPF, normed, rope_base=10.0)
        got = mr.run_sequence(m, [4, 7])
        import falcon_h1_ref as fr
        import granite_ref as gref
        keep = fr.rope_neox
        try:
            for a in m.attns:
                a.q_norm = a.k_norm = None
            fr.rope_neox = lambda v, pos, base: gref.qk_normed(keep(v, pos, base), g, m.eps)
            other = mr.run_sequence(m, [4, 7])
        finally:
            fr.rope_neox = keep
        np.testing.assert_allclose(other[0], got[0], rtol=1e-12)  # position 0: no rotation
        self.assertGreater(rel_err(other[1], got[1]), 1e-3)

    def test_rope_is_neox_pairs(self):
        """rope_neox against closed forms: pairs (i, i + n/2), angle pos * base^(-2i/n)."""
        import falcon_h1_ref as fr
        v = np.array([[1.0, 2.0, 3.0, 4.0]])
        np.testing.assert_array_equal(fr.rope_neox(v, 0, 100.0), v)
        got = fr.rope_neox(v, 3, 100.0)[0]
        t0, t1 = 3.0, 3.0 / 10.0
        want = [1 * math.cos(t0) - 3 * math.sin(t0), 2 * math.cos(t1) - 4 * math.sin(t1),
                1 * math.sin(t0) + 3 * math.cos(t0), 2 * math.sin(t1) + 4 * math.cos(t1)]
        np.testing.assert_allclose(got, want, rtol=1e-14)

    def test_ssm_norm_is_optional_and_matters(self):
        hp = dict(HPF, n_group=1)
        w = falcon_h1_weights(np.random.default_rng(86), **hp, ssm_norm=True)
        m, _ = self.load(hp, w)
        self.assertEqual([x.norm is not None for x in m.mambas], [True, True])
        bare, _ = self.load(hp, {k: v for k, v in w.items() if "ssm_norm" not in k})
        self.assertGreater(rel_err(mr.run_sequence(m, [4, 7]), mr.run_sequence(bare, [4, 7])),
                           1e-3)

    def test_state_carries_over_and_sequences_start_fresh(self):
        m, _ = self.load(HPF, falcon_h1_weights(np.random.default_rng(87), **HPF))
        st = mr.new_state(m)
        rows = [mr.forward(m, st, t) for t in (3, 1, 4, 1, 5)]
        self.assertEqual(len(st[1][0].k), 5)
        np.testing.assert_array_equal(np.array(rows), mr.run_sequence(m, [3, 1, 4, 1, 5]))
        np.testing.assert_array_equal(mr.run_sequence(m, [4, 1, 5])[0],
                                      mr.run_sequence(m, [4])[0])

    def test_bad_models(self):
        w = falcon_h1_weights(np.random.default_rng(88), **HPF)
        no_norm = {k: v for k, v in w.items() if k != "blk.1.ffn_norm"}
        no_norm["blk.1.ffn_norm.weight"] = w["blk.1.ffn_norm"]
        with self.assertRaisesRegex(mr.ModelError, r"blk\.1\.ffn_norm"):
            self.load(HPF, no_norm)
        wrong = dict(w, **{"blk.0.attn_k.weight": np.zeros((12, HPF["n_embd"]))})
        with self.assertRaisesRegex(mr.ModelError, r"blk\.0\.attn_k\.weight"):
            self.load(HPF, wrong)
        with self.assertRaisesRegex(mr.ModelError, "odd"):
            self.load(dict(HPF, head_dim=3), falcon_h1_weights(np.random.default_rng(89),
                                                                **dict(HPF, head_dim=3)))
        biased = dict(w, **{"blk.1.attn_q.bias": np.zeros(16)})
        with self.assertRaisesRegex(mr.ModelError, r"blk\.1\.attn_q\.bias"):
            self.load(HPF, biased)


# ---------------------------------------------------------------------------------------
# Nemotron-H (nemotron_ref.py): Mamba-2, attention and ReLU^2 MLP layers


# layer kinds as hybrid_override_pattern: "M" Mamba-2, "*" attention, "-" MLP; d_inner is not
# 2*n_embd and head_dim * n_head is not n_embd, both allowed by llama.cpp's nemotron_h
HPN = dict(n_embd=8, n_layer=3, d_conv=3, d_inner=12, d_state=4, n_ssm_head=3, n_group=1,
           n_head=4, n_head_kv=2, head_dim=3, n_ff=10, n_vocab=9, kinds="M*-")


def nemotron_weights(rng, n_embd, n_layer, d_conv, d_inner, d_state, n_ssm_head, n_group,
                     n_head, n_head_kv, head_dim, n_ff, n_vocab, kinds, tied=False):
    """Random Nemotron-H weights in numpy order, named like the GGUF tensors: the Mamba-2
    tensors of mamba2_weights in the "M" layers, attention in the "*" layers, ffn_up and
    ffn_down in the "-" layers; attn_norm in every layer."""
    E = n_embd
    w = mamba2_weights(rng, n_embd, n_layer, d_conv, d_inner, d_state, n_ssm_head, n_group,
                       n_vocab, tied)

    def mat(rows, cols, gain=1.0):
        return rng.standard_normal((rows, cols)) * gain / math.sqrt(cols)

    for i, kind in enumerate(kinds):
        p = "blk.%d." % i
        if kind != "M":
            for name in [n for n in w if n.startswith(p + "ssm_")]:
                del w[name]
        if kind == "*":
            w[p + "attn_q.weight"] = mat(n_head * head_dim, E, 2.0)
            w[p + "attn_k.weight"] = mat(n_head_kv * head_dim, E, 2.0)
            w[p + "attn_v.weight"] = mat(n_head_kv * head_dim, E)
            w[p + "attn_output.weight"] = mat(E, n_head * head_dim)
        elif kind == "-":
            w[p + "ffn_up.weight"] = mat(n_ff, E)
            w[p + "ffn_down.weight"] = mat(E, n_ff)
    return w


def nemotron_bytes(hp, weights, eps=1e-5, rms_eps=None, rope_finetuned=False):
    """A nemotron_h GGUF file with the keys of llama.cpp's converter (tools/dev/mk_nemotron.c):
    per-layer head_count_kv and feed_forward_length, attention.layer_norm_epsilon; rms_eps:
    also write attention.layer_norm_rms_epsilon."""
    a = "nemotron_h."
    kinds = hp["kinds"]
    kvs = [("general.architecture", STR, "nemotron_h"),
           (a + "context_length", U32, 1 << 20),
           (a + "embedding_length", U32, hp["n_embd"]),
           (a + "block_count", U32, hp["n_layer"]),
           (a + "feed_forward_length", ARR, (U32, [hp["n_ff"] if k == "-" else 0
                                                    for k in kinds])),
           (a + "attention.head_count", U32, hp["n_head"]),
           (a + "attention.head_count_kv", ARR, (U32, [hp["n_head_kv"] if k == "*" else 0
                                                        for k in kinds])),
           (a + "attention.key_length", U32, hp["head_dim"]),
           (a + "attention.value_length", U32, hp["head_dim"]),
           (a + "attention.layer_norm_epsilon", F32V, eps),
           (a + "ssm.conv_kernel", U32, hp["d_conv"]),
           (a + "ssm.inner_size", U32, hp["d_inner"]),
           (a + "ssm.state_size", U32, hp["d_state"]),
           (a + "ssm.time_step_rank", U32, hp["n_ssm_head"]),
           (a + "ssm.group_count", U32, hp["n_group"])]
    if rms_eps is not None:
        kvs.append((a + "attention.layer_norm_rms_epsilon", F32V, rms_eps))
    if rope_finetuned is not None:
        kvs.append((a + "rope.scaling.finetuned", BOOL, rope_finetuned))
    return weights_gguf(kvs, weights)


def nemotron_unrolled_two_tokens(w, hp, eps, t1, t2):
    """Logits of tokens t1, t2 of one sequence with scalar loops: per layer one branch of the
    attn_norm'ed residual (unrolled_mixers' Mamba-2 or attention, or the MLP
    ffn_down . max(ffn_up . h, 0)^2), added unscaled; no scale anywhere, attention scale
    1/sqrt(head_dim)."""
    E = hp["n_embd"]
    rms, _, matvec, mamba2, attention = unrolled_mixers(w, hp, eps,
                                                        1.0 / math.sqrt(hp["head_dim"]))

    def mlp(p, h1, h2):
        return [matvec(w[p + "ffn_down.weight"],
                       [max(u, 0.0) ** 2 for u in matvec(w[p + "ffn_up.weight"], h)])
                for h in (h1, h2)]

    x1, x2 = list(w["token_embd.weight"][t1]), list(w["token_embd.weight"][t2])
    for i, kind in enumerate(hp["kinds"]):
        p = "blk.%d." % i
        h1, h2 = rms(x1, w[p + "attn_norm.weight"]), rms(x2, w[p + "attn_norm.weight"])
        a1, a2 = {"M": mamba2, "*": attention, "-": mlp}[kind](p, h1, h2)
        x1 = [x1[j] + a1[j] for j in range(E)]
        x2 = [x2[j] + a2[j] for j in range(E)]
    out = w.get("output.weight", w["token_embd.weight"])
    onorm = w["output_norm.weight"]
    return np.array([matvec(out, rms(x1, onorm)), matvec(out, rms(x2, onorm))])


class NemotronTests(TempDirCase):
    """nemotron_ref's logits against the unrolled two-token computation above (1e-12), the
    layer kinds read from the two per-layer arrays, each kind shown to matter."""

    def load(self, hp, w, **kw):
        data, dec = nemotron_bytes(hp, w, **kw)
        return mr.load_model(self.write("n.gguf", data)), dec

    def test_hparams_and_layer_kinds(self):
        hp = dict(HPN, n_layer=5, kinds="-M*M-")
        m, _ = self.load(hp, nemotron_weights(np.random.default_rng(80), **hp))
        self.assertEqual(m.kind, "nemotron_h")
        self.assertEqual((m.n_head_kv, m.n_ff, m.head_dim, m.n_ssm_head, m.d_inner),
                         ([0, 0, 2, 0, 0], [10, 0, 0, 0, 10], 3, 3, 12))
        self.assertEqual([type(x).__name__ for x in m.layers],
                         ["MLPLayer", "Mamba2Layer", "AttentionLayer", "Mamba2Layer", "MLPLayer"])
        self.assertEqual([type(s).__name__ for s in mr.new_state(m)],
                         ["NoneType", "Mamba2State", "KVCache", "Mamba2State", "NoneType"])
        self.assertAlmostEqual(m.attn_scale, 1 / math.sqrt(3))
        self.assertEqual(m.eps, np.float32(1e-5))

    def test_unrolled_two_tokens(self):
        for seed, hp, tied in ((81, HPN, False), (82, dict(HPN, kinds="-*M"), True),
                               (83, dict(HPN, n_layer=5, kinds="M-M*-", n_head_kv=1,
                                         n_ssm_head=6, n_group=2), False),
                               (84, dict(HPN, n_head_kv=4, d_inner=16, n_ssm_head=4), False)):
            m, dec = self.load(hp, nemotron_weights(np.random.default_rng(seed), tied=tied, **hp))
            self.assertEqual(m.tied, tied)
            got = mr.run_sequence(m, [4, 7])
            want = nemotron_unrolled_two_tokens(dec, hp, m.eps, 4, 7)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)

    def test_each_layer_kind_matters(self):
        """Zeroing the output projection of any one layer changes the logits."""
        w = nemotron_weights(np.random.default_rng(85), **HPN)
        base, _ = self.load(HPN, w)
        base_logits = mr.run_sequence(base, [4, 7])
        for name in ("blk.0.ssm_out.weight", "blk.1.attn_output.weight", "blk.2.ffn_down.weight"):
            m, _ = self.load(HPN, dict(w, **{name: np.zeros_like(w[name])}))
            self.assertGreater(rel_err(mr.run_sequence(m, [4, 7]), base_logits), 1e-3, name)

    def test_mlp_is_relu_squared(self):
        """With the other layers zeroed, an MLP layer whose up projection is doubled adds 4
        times its branch (a square, no gate), and the branch drops negative pre-activations."""
        w = nemotron_weights(np.random.default_rng(86), **HPN)
        for name in ("blk.0.ssm_out.weight", "blk.1.attn_output.weight"):
            w[name] = np.zeros_like(w[name])
        m, dec = self.load(HPN, w)
        x = dec["token_embd.weight"][4]
        h = mr.rmsnorm(x, dec["blk.2.attn_norm.weight"], m.eps)
        up, down = dec["blk.2.ffn_up.weight"] @ h, dec["blk.2.ffn_down.weight"]
        np.testing.assert_allclose(self.residual(m, 4) - x, down @ np.maximum(up, 0) ** 2,
                                   rtol=1e-12, atol=1e-12)
        self.assertGreater(rel_err(down @ np.maximum(up, 0) ** 2, down @ up ** 2), 1e-3)
        m2, _ = self.load(HPN, dict(w, **{"blk.2.ffn_up.weight": 2 * w["blk.2.ffn_up.weight"]}))
        np.testing.assert_allclose(self.residual(m2, 4) - x, 4 * (self.residual(m, 4) - x),
                                   rtol=1e-10, atol=1e-12)

    @staticmethod
    def residual(m, token):
        """The residual stream after every layer for one token (the MLP being the last)."""
        nr = sys.modules["nemotron_ref"]
        x = m.token_embd[token].copy()
        for layer, st in zip(m.layers, nr.new_state(m)):
            h = mr.rmsnorm(x, layer.attn_norm, m.eps)
            if isinstance(layer, nr.MLPLayer):
                x = x + nr.mlp_step(layer, h)
            elif isinstance(layer, nr.AttentionLayer):
                x = x + nr.attention_step(m, layer, st, h)
            else:
                x = x + nr.mixer_step(m.ssm, layer, st, h)
        return x

    def test_eps_keys(self):
        """layer_norm_epsilon is required and is the norms' epsilon unless
        layer_norm_rms_epsilon is present (llama.cpp's load_arch_hparams)."""
        w = nemotron_weights(np.random.default_rng(87), **HPN)
        m, _ = self.load(HPN, w, eps=0.5)
        self.assertEqual(m.eps, 0.5)
        m2, _ = self.load(HPN, w, eps=0.5, rms_eps=0.25)
        self.assertEqual(m2.eps, 0.25)
        self.assertGreater(rel_err(mr.run_sequence(m, [4, 7]), mr.run_sequence(m2, [4, 7])),
                           1e-3)

    def test_bad_models(self):
        w = nemotron_weights(np.random.default_rng(88), **HPN)
        for rope in (True, None):
            with self.assertRaisesRegex(mr.ModelError, "rope.scaling.finetuned"):
                self.load(HPN, w, rope_finetuned=rope)
        missing = {k: v for k, v in w.items() if k != "blk.2.ffn_up.weight"}
        with self.assertRaisesRegex(mr.ModelError, r"blk\.2\.ffn_up\.weight"):
            self.load(HPN, missing)
        # a "-" layer read as attention (feed_forward_length 0) wants attention tensors
        with self.assertRaisesRegex(mr.ModelError, r"blk\.2\.attn_q\.weight"):
            self.load(dict(HPN, kinds="M**"), w)


# ---------------------------------------------------------------------------------------
# The command line


class CLITests(TempDirCase):
    def run_cli(self, *args):
        return subprocess.run([sys.executable, MAMBA_REF] + list(args),
                              capture_output=True, text=True)

    def test_out_file_holds_all_sequences(self):
        rng = np.random.default_rng(15)
        data, _ = model_bytes(HP, random_weights(rng, **HP))
        path = self.write("m.gguf", data)
        out = os.path.join(self.tmp.name, "logits.bin")
        r = self.run_cli(path, "--tokens", "1,2,3", "--tokens", "4, 5", "--out", out, "--print")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(r.stdout.strip().splitlines()), 5)
        got = np.fromfile(out, dtype="<f8")
        self.assertEqual(got.size, 5 * 7)
        m = mr.MambaModel(path)
        want = np.concatenate([mr.run_sequence(m, [1, 2, 3]), mr.run_sequence(m, [4, 5])])
        np.testing.assert_array_equal(got.reshape(5, 7), want)

    def test_errors_exit_non_zero(self):
        rng = np.random.default_rng(16)
        path = self.write("m.gguf", model_bytes(HP, random_weights(rng, **HP))[0])
        r = self.run_cli(path, "--tokens", "1,7", "--print")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("out of range", r.stderr)
        r = self.run_cli(path, "--tokens", "1,-1", "--print")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("out of range", r.stderr)
        r = self.run_cli(self.write("bad.gguf", b"not a gguf file"), "--tokens", "1")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("bad magic", r.stderr)
        r = self.run_cli(os.path.join(self.tmp.name, "absent.gguf"), "--tokens", "1")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("error", r.stderr)
        r = self.run_cli(path, "--tokens", "1,x")
        self.assertNotEqual(r.returncode, 0)


def main():
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])
    result = unittest.TextTestRunner(verbosity=2 if "-v" in sys.argv else 1).run(suite)
    failed = len(result.failures) + len(result.errors)
    print("test_ref: %d passed, %d failed" % (result.testsRun - failed - len(result.skipped),
                                               failed))
    # a run in which no test passed (none ran, or all were skipped) proves nothing
    return 0 if failed == 0 and result.testsRun - failed - len(result.skipped) > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
