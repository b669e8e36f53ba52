#!/usr/bin/env python3
"""Writes tests/data/vocab-llama3.inp / .out: token ids of llama.cpp's LLaMA 3
pre-tokenizer over the GPT-2 vocabulary (tests/data/ggml-vocab-gpt-2.gguf), in the format of
llama.cpp's test-tokenizer-0 vectors, for tests/unit/test_vocab_pre.c.

The pattern is the one llama.cpp's llm_tokenizer_bpe lists for LLAMA_VOCAB_PRE_TYPE_LLAMA3
(tokenizer.ggml.pre "llama3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", ...) and for
_DBRX / _SMAUG ("dbrx", "smaug-bpe"):

    (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|
    \\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+

with \\s as Unicode's White_Space property, as llama.cpp's whitespace table (its hand-written
splitter for this pattern, unicode_regex_split_custom_llama3, reads it so). The LLAMA3 names
also set ignore_merges: a piece that is a token as a whole is that token, before any merge;
the DBRX ones do not. Over GPT-2's vocabulary the merges reach every such token, so both give
the same ids (checked here), and the file serves both (test_vocab_pre.c checks ignore_merges on
a vocabulary where it matters).

An implementation independent of recur's: Python's `regex` module (Debian's python3-regex) for
the pattern, and the byte-level BPE of gen_vocab_default.py, written from the GGUF's merges.

Run: /usr/bin/python3 tests/ref/gen_vocab_llama3.py [--check]
--check writes nothing: it compares what it computes with the files in tests/data and exits
1 on a difference (ctest runs it so).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_vocab_default as ref  # noqa: E402  (re-executes under Debian's python3 if needed)

regex = ref.regex
WS = r"\p{White_Space}"
PATTERN = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
           r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^" + WS + r"\p{L}\p{N}]+[\r\n]*"
           r"|[" + WS + r"]*[\r\n]+|[" + WS + r"]+(?![^" + WS + r"])|[" + WS + r"]+")
COMPILED = regex.compile(PATTERN)

# texts where this pattern differs from GPT-2's: contractions in any case, digits in threes,
# a non-letter before letters, punctuation with the newlines after it, newline runs
TEXTS = [
    "I'M HERE, WE'RE THERE, THEY'LL GO, YOU'VE SEEN, HE'D SAY, IT'S, 'T", "She'S 'Ll 'rE",
    "1234567890", "12 345 6789", "a1b22c333d4444", "\u0661\u0662\u0663\u0664\u0665",
    "(hello) [world] {x} <y> \"z\"", "#include <stdio.h>", "--flag=value", "$HOME/.config",
    "!!!\n\n\nnext", "end.\r\nnext", "a\n\n  b", "a \n b", "  \t \n\n  \t x", "x\u0085\u0085y",
    "\u00a0nbsp\u00a0 \u3000ideographic\u3000", "caf\u00e9 na\u00efve", "\u65e5\u672c\u8a9e 123",
    "email@example.com http://x.org/?q=1&r=2", "snake_case_name CamelCase", "x+=1234;",
    "def f(x):\n    return x ** 2\n", "\t\tindented\n\t\t\tmore", "a  b   c    d     e",
]


def split(text):
    out = []
    pos = 0
    for m in COMPILED.finditer(text):
        if m.start() > pos:
            out.append(text[pos:m.start()])
        out.append(m.group(0))
        pos = m.end()
    if pos < len(text):
        out.append(text[pos:])
    return out


def main():
    tokens, merges = ref.read_gguf_vocab(os.path.join(ref.DATA, "ggml-vocab-gpt-2.gguf"))
    ids = {t: i for i, t in enumerate(tokens)}
    ranks = {}
    for i, m in enumerate(merges):
        a, b = m.split(" ", 1)
        ranks.setdefault((a, b), i)
    alpha = ref.byte_alphabet()

    # the 'default' vectors' texts (llama.cpp's own test texts among them) and these
    inp = open(os.path.join(ref.DATA, "vocab-default.inp"), encoding="utf-8").read()
    texts = inp.split("\n__ggml_vocab_test__\n")[:-1] + TEXTS

    lines = {"llama3": [], "dbrx": []}
    for text in texts:
        out = {"llama3": [], "dbrx": []}
        for piece in split(text):
            word = "".join(alpha[b] for b in piece.encode("utf-8"))
            merged = [ids[s] for s in ref.bpe(word, ranks)]
            out["dbrx"] += merged
            out["llama3"] += [ids[word]] if word in ids else merged  # ignore_merges
        for k in lines:
            lines[k].append("".join(" %d" % i for i in out[k]))
    if lines["llama3"] != lines["dbrx"]:
        sys.exit("ignore_merges changes the ids over GPT-2's vocabulary: one file no longer "
                 "serves both")
    files = {
        os.path.join(ref.DATA, "vocab-llama3.inp"):
            "".join(t + "\n__ggml_vocab_test__\n" for t in texts),
        os.path.join(ref.DATA, "vocab-llama3.out"): "".join(l + "\n" for l in lines["llama3"]),
    }
    if "--check" in sys.argv[1:]:
        for path, want in files.items():
            with open(path, encoding="utf-8", newline="") as f:
                if f.read() != want:
                    sys.exit("%s differs from what gen_vocab_llama3.py computes" % path)
        print("%d cases: tests/data/vocab-llama3.* are what this implementation computes"
              % len(texts))
        return
    for path, text in files.items():
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    print("wrote %d cases" % len(texts))


if __name__ == "__main__":
    main()
