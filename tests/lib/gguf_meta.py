#!/usr/bin/env python3
"""Reads a GGUF file with the standard library only, independently of recur's reader:
   gguf_meta.py FILE KEY     prints the value of a string or scalar key ("<absent>" if none)
   gguf_meta.py FILE --tensor-hash
                             prints the SHA-256 of every tensor's name and data bytes, in file
                             order (padding excluded): equal hashes mean equal weights.
   gguf_meta.py FILE --spm-detok IDS
                             prints the text of comma-separated token ids of a SentencePiece
                             vocabulary: "\u2581" is a space, "<0xXX>" a byte, control and
                             unknown tokens nothing (llama.cpp's detokenize without specials),
                             and the first token's leading space is dropped (add_space_prefix)"""
import hashlib
import struct
import sys

SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
          10: "<Q", 11: "<q", 12: "<d"}
# bytes per block and elements per block of the tensor types the project writes
TYPES = {0: (4, 1), 1: (2, 1), 30: (2, 1), 8: (34, 32), 2: (18, 32)}


def read(path):
    f = open(path, "rb").read()
    off = 4

    def take(fmt):
        nonlocal off
        v = struct.unpack_from(fmt, f, off)[0]
        off += struct.calcsize(fmt)
        return v

    def string():
        nonlocal off
        n = take("<Q")
        s = f[off:off + n]
        off += n
        return s.decode("utf-8")

    if f[:4] != b"GGUF":
        sys.exit("%s: not a GGUF file" % path)
    take("<I")
    n_tensors = take("<Q")
    n_kv = take("<Q")
    kv = {}
    for _ in range(n_kv):
        key = string()
        t = take("<I")
        if t == 8:
            kv[key] = string()
        elif t == 9:
            et = take("<I")
            n = take("<Q")
            arr = [string() if et == 8 else take(SCALAR[et]) for _ in range(n)]
            kv[key] = "<array>"
            if key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type"):
                kv[key] = arr
        else:
            kv[key] = take(SCALAR[t])
    tensors = []
    for _ in range(n_tensors):
        name = string()
        nd = take("<I")
        ne = [take("<Q") for _ in range(nd)]
        ty = take("<I")
        tensors.append((name, ne, ty, take("<Q")))
    align = kv.get("general.alignment", 32)
    base = (off + align - 1) // align * align
    return kv, tensors, f, base


def main():
    kv, tensors, f, base = read(sys.argv[1])
    if sys.argv[2] == "--tensor-hash":
        h = hashlib.sha256()
        for name, ne, ty, off in tensors:
            n = 1
            for d in ne:
                n *= d
            bb, be = TYPES[ty]
            h.update(name.encode())
            h.update(f[base + off:base + off + n // be * bb])
        print(h.hexdigest())
    elif sys.argv[2] == "--spm-detok":
        toks, types = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.token_type"]
        out = b""
        for i in [int(x) for x in sys.argv[3].split(",") if x]:
            if types[i] == 6:
                out += bytes([int(toks[i][3:5], 16)])
            elif types[i] in (1, 4):
                out += toks[i].replace("\u2581", " ").encode("utf-8")
        if out.startswith(b" "):
            out = out[1:]
        sys.stdout.buffer.write(out + b"\n")
    else:
        print(kv.get(sys.argv[2], "<absent>"))


if __name__ == "__main__":
    main()
