#!/usr/bin/env python3
"""Writes tests/data/vocab-default.inp / .out: token ids of llama.cpp's 'default'
pre-tokenizer (the one it uses for a BPE vocabulary without tokenizer.ggml.pre) over the
GPT-2 vocabulary (tests/data/ggml-vocab-gpt-2.gguf), in the format of llama.cpp's
test-tokenizer-0 vectors, for tests/unit/test_vocab_pre.c.

An implementation independent of recur's: Python's `regex` module (Debian's python3-regex)
for the four patterns, and byte-level BPE written here from the GGUF's merges.

The four patterns, applied in turn (each splits every piece the previous one made; a match is
a piece and so is every stretch between matches), as llama.cpp's llm_tokenizer_bpe lists them:

    [\\p{P}\\$\\+<=>\\^~\\|]+
    's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)
    \\p{N}+
    [0-9][0-9][0-9]

llama.cpp runs the second with its hand-written GPT-2 splitter, which has the GPT-2 pattern's
final `|\\s+` alternative, so it is added here; \\s is Unicode's White_Space property, as
llama.cpp's whitespace table.

Run: /usr/bin/python3 tests/ref/gen_vocab_default.py [--check]
--check writes nothing: it compares what it computes with the files in tests/data and exits
1 on a difference (ctest runs it so).
"""
import os
import struct
import sys

try:
    import regex
except ImportError:
    # Debian's modules live with Debian's interpreter, which a python3 on PATH may not be
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != \
            os.path.realpath("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    sys.exit("gen_vocab_default.py needs Debian's python3-regex (apt-get install python3-regex)")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data")

WS = r"\p{White_Space}"
PATTERNS = [
    r"[\p{P}\$\+<=>\^~\|]+",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^" + WS + r"\p{L}\p{N}]+"
    r"|[" + WS + r"]+(?![^" + WS + r"])|[" + WS + r"]+",
    r"\p{N}+",
    r"[0-9][0-9][0-9]",
]
COMPILED = [regex.compile(p) for p in PATTERNS]


def read_gguf_vocab(path):
    """tokens and merges of a GGUF file (only the key-value section is read)"""
    f = open(path, "rb").read()
    off = 0

    def take(fmt):
        nonlocal off
        v = struct.unpack_from(fmt, f, off)
        off += struct.calcsize(fmt)
        return v[0]

    def string():
        nonlocal off
        n = take("<Q")
        s = f[off:off + n]
        off += n
        return s.decode("utf-8")

    assert f[:4] == b"GGUF"
    off = 4
    take("<I")
    take("<Q")
    n_kv = take("<Q")
    scalar = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
              10: "<Q", 11: "<q", 12: "<d"}
    kv = {}
    for _ in range(n_kv):
        key = string()
        t = take("<I")
        if t == 8:
            kv[key] = string()
        elif t == 9:
            et = take("<I")
            n = take("<Q")
            kv[key] = [string() if et == 8 else take(scalar[et]) for _ in range(n)]
        else:
            kv[key] = take(scalar[t])
    return kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.merges"]


def byte_alphabet():
    """GPT-2's bytes_to_unicode"""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cps = list(keep)
    n = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            cps.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(keep, cps)}


def split(text):
    pieces = [text]
    for rx in COMPILED:
        out = []
        for p in pieces:
            pos = 0
            for m in rx.finditer(p):
                if m.start() > pos:
                    out.append(p[pos:m.start()])
                out.append(m.group(0))
                pos = m.end()
            if pos < len(p):
                out.append(p[pos:])
        pieces = out
    return pieces


def bpe(word, ranks):
    syms = list(word)
    while len(syms) > 1:
        best = None
        for i in range(len(syms) - 1):
            r = ranks.get((syms[i], syms[i + 1]))
            if r is not None and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            break
        i = best[1]
        syms[i:i + 2] = [syms[i] + syms[i + 1]]
    return syms


TEXTS = [
    "x+=1234;", "a$b", "1+1=2", "<tag attr=\"v\">", "a^b~c|d", "`code`", "price: $12,345.67!",
    "3.14159265358979", "1234567890123", "12 345 6789", "phone 555-1234", "2026-12-01T04:11:57Z",
    "e.g. i.e. etc...", "Hello, world!!!", "(nested (parens))", "{\"key\": [1, 2, 3]}",
    "it's", "it 's", "I'm you're we've they'll she'd", "don't!", "'s'", "''quoted''",
    "#include <stdio.h>", "int main() { return 0; }", "a->b", "x == y != z", "a && b || c",
    "snake_case_name", "kebab-case-name", "path/to/file.txt", "C:\\Windows\\System32",
    "100%", "50% off!!!", "@user #tag", "email@example.com", "http://x.org/?q=1&r=2",
    "  leading", "trailing  ", "a  b   c    d", "\t\ttabs\t", "\n\nnew\nlines\n", " \n \n ",
    "mixed \t\n space", "\u00a0nbsp\u00a0", "a\u2003em\u2003space", "line\u2028sep",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9", "\u00bfQu\u00e9? \u00a1S\u00ed!", "\u00ab guillemets \u00bb",
    "\u201csmart quotes\u201d \u2018single\u2019", "em\u2014dash en\u2013dash", "\u2026 ellipsis",
    "\u65e5\u672c\u8a9e\u306e\u6587\u7ae0\u3002", "\u4e2d\u6587\uff0c\u6807\u70b9\u3002",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8", "\u0420\u0443\u0441\u0441\u043a\u0438\u0439, \u0442\u0435\u043a\u0441\u0442.",
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629\u060c \u0646\u0635", "\u0939\u093f\u0928\u094d\u0926\u0940 \u0964",
    "\u0660\u0661\u0662\u0663 arabic digits", "\u0967\u0968\u0969 devanagari digits",
    "\u00b2\u00b3 superscripts \u00bd", "\u2160\u2161\u2162 roman", "\u2460\u2461 circled",
    "\U0001f600\U0001f601 emoji", "\U0001f469\u200d\U0001f4bb zwj", "\u2764\ufe0f heart",
    "\u20ac100 \u00a3200 \u00a5300", "\u00a9 2026 \u00ae \u2122", "\u00b1\u00d7\u00f7",
    "a\u0301 combining", "\u200b zero width", "x\u00b7y", "\u00a7 1.2.3", "\u00b6 para",
    "***bold***", "---", "===", "...", "!?!?", "~~~", "|||", "^^^", "$$$", "+++", "<<<>>>",
    "1,000,000", "0.001", "-42", "+7", "1e10", "0x1F", "v1.2.3", "3rd 21st", "A1B2C3",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "1111111111", "......", "      ", "\r\n\r\n",
    "The quick brown fox jumps over the lazy dog.",
    "Q: What's 2+2?\nA: 4.", "-- Mark Twain", "\t\t-- Seen on #Linux",
    "He said, \"It's 5:30 p.m.\" and left; she didn't.",
    "What's the difference between a duck? One leg is both the same!",
]


def main():
    tokens, merges = read_gguf_vocab(os.path.join(DATA, "ggml-vocab-gpt-2.gguf"))
    ids = {t: i for i, t in enumerate(tokens)}
    ranks = {}
    for i, m in enumerate(merges):
        a, b = m.split(" ", 1)
        ranks.setdefault((a, b), i)
    alpha = byte_alphabet()

    # llama.cpp's own test texts too (those of the Falcon file: the same list)
    inp = open(os.path.join(DATA, "ggml-vocab-falcon.gguf.inp"), encoding="utf-8").read()
    texts = list(TEXTS) + inp.split("\n__ggml_vocab_test__\n")[:-1]

    lines = []
    for text in texts:
        out = []
        for piece in split(text):
            word = "".join(alpha[b] for b in piece.encode("utf-8"))
            out += [ids[s] for s in bpe(word, ranks)]
        lines.append("".join(" %d" % i for i in out))
    inp_text = "".join(t + "\n__ggml_vocab_test__\n" for t in texts)
    out_text = "".join(l + "\n" for l in lines)
    paths = [os.path.join(DATA, "vocab-default." + e) for e in ("inp", "out")]
    if "--check" in sys.argv[1:]:
        for path, want in zip(paths, (inp_text, out_text)):
            with open(path, encoding="utf-8", newline="") as f:
                if f.read() != want:
                    sys.exit("%s differs from what gen_vocab_default.py computes" % path)
        print("%d cases: tests/data/vocab-default.* are what this implementation computes"
              % len(texts))
        return
    for path, text in zip(paths, (inp_text, out_text)):
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    print("wrote %d cases" % len(texts))


if __name__ == "__main__":
    main()
