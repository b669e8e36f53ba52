#!/usr/bin/env python3
"""lint_tests.py: shell code that reads `$?` after a command substitution in the same command.

  lint_tests.py [FILE...]      the named files, or every shell file of the tests and scripts
  lint_tests.py --self-test    the lint on its planted files (tests/lib/lint_fixtures)

In `check "run ($(head -c 200 err))" [ $? -eq 0 ]` the substitution runs before `$?` is
expanded and sets it (to head's status, 0), so the check cannot fail. Bash expands a command's
words left to right, and every `$(...)` or backquoted command sets `$?`; a `$?` read later in
the same simple command (assignments included) therefore reads the substitution's status, not
the status of the command before. The fix: `rc=$?` right after the command, then "$rc".

The scan follows the shell's quoting: single quotes and $'...' hide everything, double quotes
hide the separators but not substitutions, `$((...))` is arithmetic (it does not set `$?`),
comments and here-document bodies are skipped, and a `$?` inside a substitution is judged
within it (`"$(cmp a b; echo $?)"` reads cmp's status, as meant). Commands are separated by
newlines, `;`, `&`, `|` and parentheses. Exit status: 0 clean, 1 a site found (each printed
as FILE:LINE: the line), 2 a usage error or a file that cannot be read.
"""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "lib", "lint_fixtures")


def default_files():
    """Every *.sh under tests/ and scripts/ (the self-test's planted files are .txt, so that
    nothing takes them for tests), and the top-level test.sh, run.sh and .ci/run, but what npm
    installs (node_modules)."""
    out = []
    for top in ("tests", "scripts"):
        for d, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = sorted(x for x in dirs if x != "node_modules")
            out += [os.path.join(d, f) for f in sorted(files) if f.endswith(".sh")]
    for f in ("test.sh", "run.sh", os.path.join(".ci", "run")):
        if os.path.isfile(os.path.join(ROOT, f)):
            out.append(os.path.join(ROOT, f))
    return out


class Frame:
    """One command context: the file's top level, a $(...) or a backquoted command."""

    def __init__(self, kind):
        self.kind = kind  # "top", "cmd" ($(...)), "bt" (backquotes)
        self.seen = False  # a substitution ran earlier in the current simple command
        self.dq = False  # inside double quotes
        self.arith = 0  # open parentheses of a $(( )) (0: not in one)
        self.parens = 0  # open ( of a $(...), so that its own ) is found


def scan(text):
    """Line numbers (1-based) of each `$?` read after a substitution in the same command."""
    found = []
    n = len(text)
    i = 0
    line = 1
    stack = [Frame("top")]
    heredocs = []  # (terminator, <<-) of here-documents whose bodies follow the current line
    word_start = True

    while i < n:
        f = stack[-1]
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        prev = text[i - 1] if i > 0 else ""
        if c == "\n":
            line += 1
            i += 1
            if f.dq or f.arith:
                continue
            f.seen = False
            word_start = True
            while heredocs:  # here-document bodies: skipped up to their terminator lines
                term, strip_tabs = heredocs.pop(0)
                while i < n:
                    end = text.find("\n", i)
                    end = n if end < 0 else end
                    body_line = text[i:end]
                    i = end + 1
                    line += 1
                    if (body_line.lstrip("\t") if strip_tabs else body_line) == term:
                        break
            continue
        if c == "\\":  # an escaped character (a backslash-newline joins lines)
            line += nxt == "\n"
            i += 2
            word_start = False
            continue
        if c == "$" and nxt == "?":
            if f.seen:
                found.append(line)
            i += 2
            word_start = False
            continue
        if c == "$" and nxt == "(":
            if text.startswith("((", i + 1):  # $(( )): arithmetic, it leaves $? alone
                f.arith += 2
                i += 3
                continue
            stack.append(Frame("cmd"))
            i += 2
            word_start = True
            continue
        if c == "`":
            if f.kind == "bt":  # the end of a backquoted command
                stack.pop()
                stack[-1].seen = True
                word_start = False
            else:
                stack.append(Frame("bt"))
                word_start = True
            i += 1
            continue
        if f.arith:
            f.arith += (c == "(") - (c == ")")
            i += 1
            continue
        if c == '"':
            f.dq = not f.dq
            i += 1
            word_start = False
            continue
        if f.dq:
            i += 1
            continue
        if c == "'":  # single quotes: nothing inside is read
            end = text.find("'", i + 1)
            end = n - 1 if end < 0 else end
            line += text.count("\n", i, end)
            i = end + 1
            word_start = False
            continue
        if c == "$" and nxt == "'":  # $'...': backslash escapes, no expansion
            j = i + 2
            while j < n and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            line += text.count("\n", i, j)
            i = j + 1
            word_start = False
            continue
        if c == "#" and word_start:  # a comment
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        if c == "<" and text.startswith("<<<", i):  # a here-string
            i += 3
            word_start = True
            continue
        if c == "<" and nxt == "<":
            m = re.match(r"<<(-?)\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2", text[i:])
            if m:
                heredocs.append((m.group(3), m.group(1) == "-"))
                i += m.end()
                word_start = False
                continue
        if c in "&|" and (prev in "<>" or nxt == ">" and c == "&"):  # 2>&1, &>, >|
            i += 1
            word_start = False
            continue
        if c in ";&|":
            f.seen = False
            i += 1
            word_start = True
            continue
        if c == "(":
            if f.kind == "cmd":
                f.parens += 1
            f.seen = False
            i += 1
            word_start = True
            continue
        if c == ")":
            if f.kind == "cmd" and f.parens == 0:  # the end of a $(...)
                stack.pop()
                stack[-1].seen = True
                i += 1
                word_start = False
                continue
            if f.kind == "cmd":
                f.parens -= 1
            f.seen = False
            i += 1
            word_start = True
            continue
        word_start = c in " \t" or (word_start and c in "{!")
        i += 1
    return found


def lint(paths):
    bad = 0
    for p in paths:
        try:
            with open(p, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError as e:
            print("lint_tests: %s: %s" % (p, e.strerror), file=sys.stderr)
            return 2
        lines = text.split("\n")
        for ln in sorted(set(scan(text))):
            bad += 1
            print("%s:%d: $? read after a $(...) in the same command (the substitution set it;"
                  " capture rc=$? right after the command): %s" %
                  (os.path.relpath(p, ROOT), ln, lines[ln - 1].strip()))
    print("lint_tests: %d file(s), %d site(s)" % (len(paths), bad))
    return 1 if bad else 0


def self_test():
    """The lint, run as a program, on the planted files: bad.txt must fail naming exactly its
    lines marked '# planted', good.txt must pass."""
    failed = 0
    me = os.path.abspath(__file__)
    bad = os.path.join(FIXTURES, "bad.txt")
    with open(bad) as f:
        want = {i + 1 for i, l in enumerate(f.read().split("\n")) if l.rstrip().endswith("# planted")}
    r = subprocess.run([sys.executable, me, bad], capture_output=True, text=True)
    got = {int(m) for m in re.findall(r"bad\.txt:(\d+):", r.stdout)}
    print(r.stdout, end="")
    if r.returncode != 1 or got != want:
        print("FAILED: bad.txt: exit %d (want 1), lines %s (want %s)" %
              (r.returncode, sorted(got), sorted(want)), file=sys.stderr)
        failed += 1
    r = subprocess.run([sys.executable, me, os.path.join(FIXTURES, "good.txt")],
                       capture_output=True, text=True)
    print(r.stdout, end="")
    if r.returncode != 0:
        print("FAILED: good.txt: exit %d (want 0)" % r.returncode, file=sys.stderr)
        failed += 1
    passed = 2 - failed
    print("lint_tests self-test: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if any(a.startswith("-") for a in argv[1:]):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    return lint(argv[1:] or default_files())


if __name__ == "__main__":
    sys.exit(main(sys.argv))
