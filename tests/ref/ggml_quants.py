"""ggml's block types for the float64 references, written apart from recur's C (numpy only).

dequantize() decodes every block type a GGUF file may hold weights in (the legacy q4_0 ...
q8_0, the K-quants q2_K ... q6_K, iq4_nl and iq4_xs) with ggml's float32 arithmetic in ggml's
order, so that it equals ggml's own output bit for bit (test_ref.py checks it against
tests/data/quants, made by llama.cpp). The input quantizers say what a product's activations
become before the integer sums: q8_0 for q4_0, q5_0, q8_0 and iq4_nl weights, q8_1 for q4_1 and
q5_1, q8_K for the K-quants and iq4_xs (ggml's vec_dot_type of each).

Block layouts (byte offsets in a block), from ggml-common.h:
  q4_0 (32, 18): d f16; qs[16]                      q4_1 (32, 20): d, m f16; qs[16]
  q5_0 (32, 22): d; qh u32; qs[16]                  q5_1 (32, 24): d, m; qh u32; qs[16]
  q8_0 (32, 34): d; qs int8[32]                     iq4_nl (32, 18): d; qs[16]
  q2_K (256, 84): scales[16]; qs[64]; d, dmin       q3_K (256, 110): hmask[32]; qs[64];
  q4_K (256, 144): d, dmin; scales[12]; qs[128]         scales[12]; d
  q5_K (256, 176): d, dmin; scales[12]; qh[32]; qs[128]
  q6_K (256, 210): ql[128]; qh[64]; scales int8[16]; d
  iq4_xs (256, 136): d; scales_h u16; scales_l[4]; qs[128]
"""

import numpy as np

F32 = np.float32

# id -> (name, elements per block, bytes per block)
TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 30: ("BF16", 1, 2),
    2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210),
    20: ("IQ4_NL", 32, 18), 23: ("IQ4_XS", 256, 136),
}

# The inputs' type of each weight type's products.
Q8_0, Q8_1, Q8_K = "q8_0", "q8_1", "q8_K"
PARTNER = {2: Q8_0, 6: Q8_0, 8: Q8_0, 20: Q8_0, 3: Q8_1, 7: Q8_1,
           10: Q8_K, 11: Q8_K, 12: Q8_K, 13: Q8_K, 14: Q8_K, 23: Q8_K}

IQ4NL_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10,
                         1, 13, 25, 38, 53, 69, 89, 113], dtype=np.int8)


def _blocks(raw, nbytes):
    return np.frombuffer(raw, dtype=np.uint8).reshape(-1, nbytes)


def _f16(b, at):
    """The f16 at byte `at` of every block, as float32."""
    return b[:, at:at + 2].copy().view("<f2").astype(F32)[:, 0]


def _nibbles(qs):
    """Two nibbles a byte, weight j < 16 low nibble of qs[j], j >= 16 high of qs[j - 16]."""
    return np.concatenate([qs & 15, qs >> 4], axis=1)


def _q5_high(b, at):
    qh = b[:, at:at + 4].copy().view("<u4")[:, 0]
    return ((qh[:, None] >> np.arange(32, dtype=np.uint32)) & 1).astype(np.int32)


def _k4_scales(s):
    """q4_K / q5_K: 8 six-bit scales and mins from the 12 packed bytes, as int32 (nb, 8)."""
    s = s.astype(np.int32)
    sc = np.empty((s.shape[0], 8), np.int32)
    mn = np.empty((s.shape[0], 8), np.int32)
    sc[:, :4] = s[:, 0:4] & 63
    mn[:, :4] = s[:, 4:8] & 63
    sc[:, 4:] = (s[:, 8:12] & 15) | ((s[:, 0:4] >> 6) << 4)
    mn[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return sc, mn


def _dq_legacy(t, b):
    d = _f16(b, 0)
    if t == 2:
        q = _nibbles(b[:, 2:18]).astype(np.int32) - 8
        return q.astype(F32) * d[:, None]
    if t == 3:
        q = _nibbles(b[:, 4:20]).astype(np.int32)
        return q.astype(F32) * d[:, None] + _f16(b, 2)[:, None]
    if t == 6:
        q = (_nibbles(b[:, 6:22]).astype(np.int32) | (_q5_high(b, 2) << 4)) - 16
        return q.astype(F32) * d[:, None]
    if t == 7:
        q = _nibbles(b[:, 8:24]).astype(np.int32) | (_q5_high(b, 4) << 4)
        return q.astype(F32) * d[:, None] + _f16(b, 2)[:, None]
    if t == 8:
        return b[:, 2:34].view(np.int8).astype(F32) * d[:, None]
    if t == 20:
        return d[:, None] * IQ4NL_VALUES[_nibbles(b[:, 2:18])].astype(F32)
    raise ValueError(t)


def _dq_q2_K(b):
    scales, qs = b[:, 0:16].astype(np.int32), b[:, 16:80].astype(np.int32)
    d, dmin = _f16(b, 80), _f16(b, 82)
    out = np.empty((b.shape[0], 256), F32)
    i = 0
    for half in range(2):
        for shift in range(0, 8, 2):
            for part in range(2):
                sc = scales[:, i // 16]
                dl = d * (sc & 15).astype(F32)
                ml = dmin * (sc >> 4).astype(F32)
                q = (qs[:, 32 * half + 16 * part:32 * half + 16 * part + 16] >> shift) & 3
                out[:, i:i + 16] = dl[:, None] * q.astype(F32) - ml[:, None]
                i += 16
    return out


def _dq_q3_K(b):
    hm, qs = b[:, 0:32].astype(np.int32), b[:, 32:96].astype(np.int32)
    s = b[:, 96:108].astype(np.int32)
    d = _f16(b, 108)
    g = np.arange(16)
    lo = np.where(g < 8, s[:, g % 8] & 15, s[:, g % 8] >> 4)
    hi = (s[:, 8 + g % 4] >> (2 * (g // 4))) & 3
    scales = (lo | (hi << 4)) - 32
    out = np.empty((b.shape[0], 256), F32)
    i, m = 0, 1
    for half in range(2):
        for shift in range(0, 8, 2):
            for part in range(2):
                dl = d * scales[:, i // 16].astype(F32)
                sl = slice(16 * part, 16 * part + 16)
                q = ((qs[:, 32 * half + 16 * part:32 * half + 16 * part + 16] >> shift) & 3) \
                    - np.where(hm[:, sl] & m, 0, 4)
                out[:, i:i + 16] = dl[:, None] * q.astype(F32)
                i += 16
            m <<= 1
    return out


def _dq_q45_K(b, five):
    d, dmin = _f16(b, 0), _f16(b, 2)
    sc, mn = _k4_scales(b[:, 4:16])
    qh = b[:, 16:48].astype(np.int32) if five else None
    qs = b[:, 48:176].astype(np.int32) if five else b[:, 16:144].astype(np.int32)
    out = np.empty((b.shape[0], 256), F32)
    for c in range(4):
        q = qs[:, 32 * c:32 * c + 32]
        lo, hi = q & 15, q >> 4
        if five:
            lo = lo + np.where(qh & (1 << (2 * c)), 16, 0)
            hi = hi + np.where(qh & (2 << (2 * c)), 16, 0)
        for k, v in ((0, lo), (1, hi)):
            j = 2 * c + k
            d1 = d * sc[:, j].astype(F32)
            m1 = dmin * mn[:, j].astype(F32)
            out[:, 64 * c + 32 * k:64 * c + 32 * k + 32] = d1[:, None] * v.astype(F32) - m1[:, None]
    return out


def _dq_q6_K(b):
    ql, qh = b[:, 0:128].astype(np.int32), b[:, 128:192].astype(np.int32)
    sc = b[:, 192:208].view(np.int8).astype(F32)
    d = _f16(b, 208)
    out = np.empty((b.shape[0], 256), F32)
    for half in range(2):
        L, H = ql[:, 64 * half:64 * half + 64], qh[:, 32 * half:32 * half + 32]
        for k in range(4):
            nib = (L[:, 32 * (k % 2):32 * (k % 2) + 32] >> (4 * (k // 2))) & 15
            q = (nib | (((H >> (2 * k)) & 3) << 4)) - 32
            s = np.repeat(sc[:, 8 * half + 2 * k:8 * half + 2 * k + 2], 16, axis=1)
            out[:, 128 * half + 32 * k:128 * half + 32 * k + 32] = (d[:, None] * s) * q.astype(F32)
    return out


def _dq_iq4_xs(b):
    d = _f16(b, 0)
    sh = b[:, 2:4].copy().view("<u2")[:, 0].astype(np.int32)
    sl = b[:, 4:8].astype(np.int32)
    qs = b[:, 8:136]
    out = np.empty((b.shape[0], 256), F32)
    for ib in range(8):
        ls = ((sl[:, ib // 2] >> (4 * (ib % 2))) & 15) | (((sh >> (2 * ib)) & 3) << 4)
        dl = d * (ls - 32).astype(F32)
        v = IQ4NL_VALUES[_nibbles(qs[:, 16 * ib:16 * ib + 16])].astype(F32)
        out[:, 32 * ib:32 * ib + 32] = dl[:, None] * v
    return out


def dequantize(ggml_type, raw):
    """The values of `raw` (whole blocks of a block type) as float32, ggml's bit for bit."""
    name, block, nbytes = TYPES[ggml_type]
    b = _blocks(raw, nbytes)
    if block == 32:
        v = _dq_legacy(ggml_type, b)
    elif ggml_type == 10:
        v = _dq_q2_K(b)
    elif ggml_type == 11:
        v = _dq_q3_K(b)
    elif ggml_type in (12, 13):
        v = _dq_q45_K(b, ggml_type == 13)
    elif ggml_type == 14:
        v = _dq_q6_K(b)
    elif ggml_type == 23:
        v = _dq_iq4_xs(b)
    else:
        raise ValueError("not a block type: %d (%s)" % (ggml_type, name))
    return v.reshape(-1)


def block_minimums(ggml_type, raw):
    """q4_1 / q5_1: each block's minimum m (float64, one a block); None for other types."""
    if ggml_type not in (3, 7):
        return None
    return _f16(_blocks(raw, TYPES[ggml_type][2]), 2).astype(np.float64)


# ---------------------------------------------------------------------------------------
# Inputs. Each returns the input as the integer sums see it (float64 of d * q), and records
# in TIE the smallest relative distance of any rounded value from its rounding boundary: a
# quant from x.5, and an f16 scale or sum from the midpoint of its two nearest f16 values.

TIE = [float("inf")]


def _record_tie(scaled, half_even):
    a = np.abs(scaled)
    if a.size:
        # distance to the nearest x.5 boundary, relative to the value
        rel = np.abs(a - np.floor(a) - 0.5) / np.maximum(a, 0.5)
        TIE[0] = min(TIE[0], float(np.min(rel)))


def _record_f16_tie(v):
    """Where float32 values v are rounded to f16 (the scales d and sums s of q8_0 / q8_1): the
    relative distance of each from the midpoint between its two nearest f16 values, where the
    rounding flips (a flipped d moves a whole block of inputs by 2^-11)."""
    v = np.abs(np.asarray(v, dtype=np.float64))
    v = v[(v > 0) & (v < 65504)]
    if not v.size:
        return
    h = v.astype(np.float16).astype(np.float64)
    other = np.where(h <= v, np.nextafter(h.astype(np.float16), np.float16(np.inf)),
                     np.nextafter(h.astype(np.float16), np.float16(0))).astype(np.float64)
    mid = (h + other) / 2
    # A scale follows its block's largest element (or an exact integer sum times it), whose
    # relative error in a float32 engine is about a tenth of the small elements' that decide
    # the quants' ties: counted as ten times as far, so that one margin serves both.
    TIE[0] = min(TIE[0], 10 * float(np.min(np.abs(v - mid) / v)))


def _q8_blocks(v):
    """ggml's q8_0 rounding per 32 (q8_0 and q8_1 share it): d = max|v| / 127 in float32,
    q = round(v / d) half away from zero. Returns (d as float32, q as float64), ties recorded."""
    x = np.asarray(v, dtype=F32).reshape(-1, 32)
    d = (np.max(np.abs(x), axis=1) / F32(127)).astype(F32)
    inv = np.zeros_like(d)
    np.divide(F32(1), d, out=inv, where=d != 0)
    scaled = (x * inv[:, None]).astype(np.float64)
    _record_tie(scaled, False)
    _record_f16_tie(d)
    return d, np.sign(scaled) * np.floor(np.abs(scaled) + 0.5)


def q8_0_input(v):
    """q8_0 per 32 (_q8_blocks); the products use d rounded to f16."""
    d, q = _q8_blocks(v)
    return (d.astype(np.float16).astype(np.float64)[:, None] * q).reshape(-1)


def q8_1_input(v):
    """q8_1 per 32: q8_0's quants, plus s = f16(d * sum q) with d before its f16 rounding.
    Returns (values d16 * q, per block s - d16 * sum q: what the minimums' term adds)."""
    d, q = _q8_blocks(v)
    d16 = d.astype(np.float16).astype(np.float64)
    s32 = q.sum(axis=1).astype(F32) * d
    _record_f16_tie(s32)
    s = s32.astype(np.float16).astype(np.float64)
    vals = d16[:, None] * q
    return vals.reshape(-1), s - vals.sum(axis=1)


def q8_K_input(v):
    """q8_K per 256: x_m the value of largest magnitude, iscale = -127 / x_m (float32),
    q = min(127, round-half-even(iscale * v)), d = 1 / iscale (float32)."""
    x = np.asarray(v, dtype=F32).reshape(-1, 256)
    idx = np.argmax(np.abs(x), axis=1)  # the first of equal magnitudes, as ggml's strict '>'
    xm = x[np.arange(x.shape[0]), idx]
    out = np.zeros(x.shape, np.float64)
    nz = xm != 0
    iscale = np.zeros_like(xm)
    iscale[nz] = (F32(-127) / xm[nz]).astype(F32)
    scaled = (x * iscale[:, None]).astype(np.float64)
    q = np.minimum(np.rint(scaled), 127)   # rint: half to even
    _record_tie(scaled[nz], True)
    d = np.zeros_like(xm)
    d[nz] = (F32(1) / iscale[nz]).astype(F32)
    out = d.astype(np.float64)[:, None] * q
    out[~nz] = 0
    return out.reshape(-1)
