#!/usr/bin/env python3
"""gguf_reader.py: a small, independent GGUF v3 reader for recur's reference tests.

Written from the format description alone (not from recur's C reader), so the two can
check each other. Reads the header, the key/value metadata and the tensor infos, and
decodes tensors of type F32, F16, BF16, Q8_0 and Q4_0 to float64 numpy arrays shaped
numpy-style: a GGUF tensor {ne0, ne1} (ne0 fastest) becomes an array of shape (ne1, ne0).

    f = GGUFFile("model.gguf")
    f.kv["mamba.block_count"]            -> 4
    f.kv_types["mamba.block_count"]      -> 4 (u32)
    f.tensor("token_embd.weight")        -> float64 array (n_vocab, n_embd)

Run as a script to list a file's metadata and tensors: python3 gguf_reader.py FILE.gguf
"""

import os
import struct
import sys

try:
    import numpy as np
except ImportError:
    # Debian's python3-numpy belongs to /usr/bin/python3, which may not be first in PATH.
    if (__name__ == "__main__" and os.path.exists("/usr/bin/python3")
            and not os.environ.get("RECUR_REF_REEXEC")):
        os.environ["RECUR_REF_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    raise

import ggml_quants  # noqa: E402

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# Metadata value types: id -> (name, struct format) for the fixed-size ones.
SCALAR_TYPES = {
    0: "<B",   # u8
    1: "<b",   # i8
    2: "<H",   # u16
    3: "<h",   # i16
    4: "<I",   # u32
    5: "<i",   # i32
    6: "<f",   # f32
    7: "<?",   # bool (one byte)
    10: "<Q",  # u64
    11: "<q",  # i64
    12: "<d",  # f64
}
TYPE_STRING = 8
TYPE_ARRAY = 9

# ggml tensor types: id -> (name, elements per block, bytes per block) (ggml_quants.py has the
# block types' layouts and decoders)
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0, GGML_BF16 = 0, 1, 2, 8, 30
TENSOR_TYPES = ggml_quants.TYPES


class GGUFError(Exception):
    """The file is not a GGUF file this reader understands (bad, truncated, unsupported)."""


class TensorInfo:
    def __init__(self, name, ne, ggml_type, offset):
        self.name = name
        self.ne = ne                # GGUF order: ne[0] is the fastest dimension
        self.ggml_type = ggml_type
        self.offset = offset        # relative to the start of the data section

    @property
    def shape(self):
        """numpy shape: the GGUF dimensions reversed."""
        return tuple(reversed(self.ne))

    @property
    def n_elements(self):
        n = 1
        for d in self.ne:
            n *= d
        return n

    def n_bytes(self):
        _, block, block_bytes = TENSOR_TYPES[self.ggml_type]
        return self.n_elements // block * block_bytes


class _Cursor:
    """Reads little-endian values from a byte buffer, front to back."""

    def __init__(self, buf):
        self.buf = buf
        self.pos = 0

    def take(self, n):
        if n < 0 or self.pos + n > len(self.buf):
            raise GGUFError("file truncated at byte %d (wanted %d more bytes)" % (self.pos, n))
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def scalar(self, fmt):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def u32(self):
        return self.scalar("<I")

    def u64(self):
        return self.scalar("<Q")

    def string(self):
        n = self.u64()
        raw = bytes(self.take(n))
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw.decode("utf-8", errors="surrogateescape")

    def value(self, vtype):
        if vtype in SCALAR_TYPES:
            return self.scalar(SCALAR_TYPES[vtype])
        if vtype == TYPE_STRING:
            return self.string()
        if vtype == TYPE_ARRAY:
            etype = self.u32()
            count = self.u64()
            if etype in SCALAR_TYPES and etype != 7:
                # numeric arrays in one go: a numpy array
                dt = np.dtype(SCALAR_TYPES[etype])
                return np.frombuffer(self.take(count * dt.itemsize), dtype=dt).copy()
            return [self.value(etype) for _ in range(count)]
        raise GGUFError("unknown metadata value type %d at byte %d" % (vtype, self.pos))


class GGUFFile:
    """A GGUF v3 file: .version, .kv (key -> value), .tensors (name -> TensorInfo)."""

    def __init__(self, path):
        self.path = path
        try:
            self.data = np.memmap(path, dtype=np.uint8, mode="r")
        except ValueError:  # numpy refuses to map an empty file
            self.data = np.zeros(0, dtype=np.uint8)
        buf = memoryview(self.data)
        cur = _Cursor(buf)

        if bytes(cur.take(4)) != GGUF_MAGIC:
            raise GGUFError("%s: not a GGUF file (bad magic)" % path)
        self.version = cur.u32()
        if self.version != 3:
            raise GGUFError("%s: unsupported GGUF version %d (want 3)" % (path, self.version))
        n_tensors = cur.u64()
        n_kv = cur.u64()

        self.kv = {}
        self.kv_types = {}  # key -> metadata value type id (4 u32, 6 f32, 8 string, 9 array, ...)
        for _ in range(n_kv):
            key = cur.string()
            vtype = cur.u32()
            self.kv_types[key] = vtype
            self.kv[key] = cur.value(vtype)

        self.tensors = {}
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = cur.u32()
            if n_dims > 4:
                raise GGUFError("tensor %s: %d dimensions (at most 4)" % (name, n_dims))
            ne = [cur.u64() for _ in range(n_dims)]
            ggml_type = cur.u32()
            offset = cur.u64()
            info = TensorInfo(name, ne, ggml_type, offset)
            if ggml_type not in TENSOR_TYPES:
                raise GGUFError("tensor %s: unsupported ggml type %d" % (name, ggml_type))
            block = TENSOR_TYPES[ggml_type][1]
            row = ne[0] if ne else 1
            if row % block != 0:
                raise GGUFError("tensor %s: row length %d is not a multiple of %d"
                                % (name, row, block))
            if name in self.tensors:
                raise GGUFError("tensor %s appears twice" % name)
            self.tensors[name] = info

        alignment = int(self.kv.get("general.alignment", DEFAULT_ALIGNMENT))
        if alignment <= 0:
            raise GGUFError("bad general.alignment %d" % alignment)
        self.data_start = (cur.pos + alignment - 1) // alignment * alignment

        for info in self.tensors.values():
            end = self.data_start + info.offset + info.n_bytes()
            if end > len(self.data):
                raise GGUFError("tensor %s: data runs past the end of the file" % info.name)

    def minimums(self, name):
        """A q4_1 / q5_1 tensor's block minimums, numpy shape (rows..., blocks a row); None
        for other types."""
        info = self.tensors[name]
        start = self.data_start + info.offset
        m = ggml_quants.block_minimums(info.ggml_type, self.data[start:start + info.n_bytes()])
        if m is None:
            return None
        return m.reshape(tuple(reversed(info.ne[1:])) + (info.ne[0] // 32,))

    def tensor(self, name):
        """Decode tensor `name` to a float64 array of numpy shape (reversed GGUF ne)."""
        if name not in self.tensors:
            raise GGUFError("tensor %s not in %s" % (name, self.path))
        info = self.tensors[name]
        start = self.data_start + info.offset
        raw = self.data[start:start + info.n_bytes()]
        t = info.ggml_type

        if t == GGML_F32:
            v = raw.view("<f4")
        elif t == GGML_F16:
            v = raw.view("<f2")
        elif t == GGML_BF16:
            # bf16 is the upper half of an f32: shift it up and reinterpret
            v = (raw.view("<u2").astype(np.uint32) << 16).view("<f4")
        elif t in TENSOR_TYPES:
            v = ggml_quants.dequantize(t, raw)
        else:  # already rejected when the infos were read
            raise GGUFError("tensor %s: unsupported ggml type %d" % (name, t))

        return np.array(v, dtype=np.float64).reshape(info.shape)


def main(argv):
    if len(argv) != 2:
        print("usage: gguf_reader.py FILE.gguf", file=sys.stderr)
        return 2
    try:
        f = GGUFFile(argv[1])
    except (GGUFError, OSError) as e:
        print("gguf_reader: error: %s" % e, file=sys.stderr)
        return 1
    print("GGUF v%d, %d keys, %d tensors, data at %d"
          % (f.version, len(f.kv), len(f.tensors), f.data_start))
    for k, v in f.kv.items():
        shown = "[%d items]" % len(v) if isinstance(v, (list, np.ndarray)) else repr(v)
        print("  %s = %s" % (k, shown))
    for info in f.tensors.values():
        print("  %-32s %-5s ne=%s offset=%d"
              % (info.name, TENSOR_TYPES[info.ggml_type][0], info.ne, info.offset))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
