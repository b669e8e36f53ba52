#!/usr/bin/env python3
"""Runs the commands of README.md and docs/*.md, so that the docs cannot rot.

Every fenced block whose language is a shell (sh, bash, shell, console) or C must say in its
info string what the test does with it:

  ```sh run          run with bash -e -o pipefail; it must exit 0
  ```sh run-server   the same, while `recur serve -np 2 --slot-save-path DIR` (the shipped
                     model) listens on the examples' port 8080
  ```c run           compiled against include/recur.h, linked with the library, and run
  ```sh no-run       shown, never run: commands that CI runs itself (./run.sh, ./test.sh,
  ```c no-run        .ci/run) or that need what a test machine lacks (llama.cpp, a
                     browser, a model file of one's own); the text around says so

A shell or C block without one of these markers fails the test, as does a marker this
script does not know. Blocks run in a fresh folder whose entries are links to the
repository's top-level entries (so `models/...` and `tests/data/...` resolve and nothing is
written into the tree), with the folder of the built `recur` first on PATH. The examples'
port 8080 is replaced by a free port everywhere in a block (runs may share the machine).
A failure prints the file and the line of the failing command (of the block, for C and for
a server that did not start) and the block's output.

  scripts/doc_commands.py --recur build/tools/recur [--lib build/librecur.a] [--cc cc]
                          [--cflag F]... [--link F]... [--only FILE] [FILE.md...]
  scripts/doc_commands.py --self-test   (a broken block must fail, a good one pass)
  scripts/doc_commands.py --check-header include/recur.h   (every declaration has a comment)
"""

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHELLS = {"sh", "bash", "shell", "console"}
MARKERS = {"run", "run-server", "no-run"}
FENCE = re.compile(r"^(\s*)```(.*)$")
BLOCK_TIMEOUT = 240  # seconds one block may take


def blocks(path):
    """(line of the opening fence, language, marker words, text) of every fenced block."""
    out = []
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        words = m.group(2).split()
        start = i + 1
        body = []
        i += 1
        while i < len(lines) and not FENCE.match(lines[i]):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        lang = words[0] if words else ""
        out.append((start, lang, words[1:], "\n".join(body) + "\n"))
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scratch():
    """A folder that looks like the repository (links) but writes go to itself."""
    d = tempfile.mkdtemp(prefix="recur-doc-")
    for name in os.listdir(ROOT):
        if name.startswith(".") or name.startswith("build"):
            continue
        os.symlink(os.path.join(ROOT, name), os.path.join(d, name))
    return d


def wait_health(port, proc, deadline_s):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.05)  # polls the condition above, within the deadline
    return False


class Runner:
    def __init__(self, args):
        self.args = args
        self.recur_dir = os.path.dirname(os.path.abspath(args.recur)) if args.recur else None

    def env(self, port):
        env = dict(os.environ)
        if self.recur_dir:
            env["PATH"] = self.recur_dir + os.pathsep + env.get("PATH", "")
        env["DOC_PORT"] = str(port)
        return env

    def run_shell(self, where, text, server):
        port = free_port()
        # the trap names the failing command's line: the block's line + LINENO - 1 (the trap's)
        text = ("trap 'echo \"doc_commands: failed at line $LINENO\" >&2' ERR\n"
                + text.replace("8080", str(port)))
        cwd = scratch()
        srv = None
        try:
            if server:
                slots = os.path.join(cwd, "slots")
                os.mkdir(slots)
                srv = subprocess.Popen(
                    ["recur", "serve", "--port", str(port), "-np", "2", "--slot-save-path", slots],
                    cwd=cwd, env=self.env(port), stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE, start_new_session=True)
                if not wait_health(port, srv, 60):
                    return f"{where}: the server for this block did not come up"
            # its own process group, so that what it left in the background goes with it
            p = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", text], cwd=cwd,
                                 env=self.env(port), stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, start_new_session=True)
            try:
                out, _ = p.communicate(timeout=BLOCK_TIMEOUT)
            except subprocess.TimeoutExpired:
                return f"{where}: the block ran past {BLOCK_TIMEOUT} s"
            finally:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
            if p.returncode != 0:
                out = out.decode(errors="replace")
                lines = re.findall(r"^doc_commands: failed at line (\d+)$", out, re.M)
                if lines:
                    path, fence = where.rsplit(":", 1)
                    where = f"{path}:{int(fence) + int(lines[-1]) - 1}"
                return (f"{where}: the command exited {p.returncode}; the block's output:\n"
                        + out[-4000:])
            return None
        finally:
            if srv is not None:
                os.killpg(srv.pid, signal.SIGTERM)
                try:
                    srv.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(srv.pid, signal.SIGKILL)
                    srv.wait()
            shutil.rmtree(cwd, ignore_errors=True)

    def run_c(self, where, text):
        if not self.args.lib:
            return f"{where}: a C block to run, and no --lib to link it with"
        cwd = scratch()
        try:
            src = os.path.join(cwd, "example.c")
            exe = os.path.join(cwd, "example")
            with open(src, "w", encoding="utf-8") as f:
                f.write(text)
            cmd = ([self.args.cc, "-std=c11", "-Wall", "-Wextra", "-Werror",
                    "-I", os.path.join(ROOT, "include")] + self.args.cflag
                   + [src, "-o", exe, os.path.abspath(self.args.lib)] + self.args.link)
            p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            if p.returncode != 0:
                return (f"{where}: the C block does not compile:\n"
                        + p.stdout.decode(errors="replace")[-4000:])
            p = subprocess.run([exe], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               timeout=BLOCK_TIMEOUT)
            if p.returncode != 0:
                return (f"{where}: the C block's program exited {p.returncode}:\n"
                        + p.stdout.decode(errors="replace")[-4000:])
            return None
        except subprocess.TimeoutExpired:
            return f"{where}: the C block's program ran past {BLOCK_TIMEOUT} s"
        finally:
            shutil.rmtree(cwd, ignore_errors=True)

    def check_file(self, path):
        """The failures of one Markdown file, and how many blocks ran."""
        failures, ran = [], 0
        rel = os.path.relpath(path, ROOT)
        for line, lang, words, text in blocks(path):
            if lang not in SHELLS and lang != "c":
                continue
            where = f"{rel}:{line}"
            marks = [w for w in words if w in MARKERS]
            unknown = [w for w in words if w not in MARKERS]
            if unknown or len(marks) != 1:
                failures.append(f"{where}: a ```{lang} block must be marked with one of "
                                f"{', '.join(sorted(MARKERS))} (found {' '.join(words) or 'none'})")
                continue
            mark = marks[0]
            if mark == "no-run":
                continue
            if lang == "c" and mark == "run-server":
                failures.append(f"{where}: a C block cannot be run-server")
                continue
            t0 = time.monotonic()
            err = self.run_c(where, text) if lang == "c" else \
                self.run_shell(where, text, mark == "run-server")
            ran += 1
            print(f"{where}: {lang} {mark} {'FAILED' if err else 'ok'} "
                  f"({time.monotonic() - t0:.1f} s)", flush=True)
            if err:
                failures.append(err)
        return failures, ran


def undocumented(header):
    """The RECUR_API declarations of header with no comment of their own: none ending on the
    line before the declaration (another declaration's trailing comment does not count) and
    none after it on its last line."""
    with open(header, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out, i = [], 0
    while i < len(lines):
        if not lines[i].startswith("RECUR_API"):
            i += 1
            continue
        j = i
        while ";" not in lines[j]:
            j += 1
        name = re.search(r"(recur_\w+)\s*\(", " ".join(lines[i:j + 1]))
        after = lines[j].split(";", 1)[1]
        # a comment of its own: after it on its last line, or a comment ending on the line
        # before (not another declaration's trailing comment)
        prev = lines[i - 1] if i > 0 else ""
        code = prev.split("/*", 1)[0] if "/*" in prev else ""
        own_before = prev.rstrip().endswith("*/") and not code.strip()
        if not ("/*" in after or own_before):
            out.append(f"{os.path.relpath(header, ROOT)}:{i + 1}: "
                       f"{name.group(1) if name else lines[i]} has no comment")
        i = j + 1
    return out


def doc_files(args):
    if args.files:
        return [os.path.abspath(f) for f in args.files]
    docs = os.path.join(ROOT, "docs")
    return [os.path.join(ROOT, "README.md")] + sorted(
        os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))


def self_test(args):
    """A good block passes, a broken command, an unmarked block and a bad C block fail."""
    d = tempfile.mkdtemp(prefix="recur-doc-self-")
    try:
        cases = {
            "good.md": ("```sh run\ntrue\necho fine | grep -q fine\n```\n"
                        "```sh no-run\nfalse\n```\n```text\nanything\n```\n", 0),
            "broken.md": ("text\n\n```sh run\ntrue\nls no/such/file\ntrue\n```\n", 1),
            "unmarked.md": ("```sh\ntrue\n```\n", 1),
            "unknown.md": ("```bash runnable\ntrue\n```\n", 1),
            "badc.md": ("```c run\nint main(void) { return undefined_name; }\n```\n", 1),
        }
        bad = []
        for name, (text, want) in cases.items():
            path = os.path.join(d, name)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            failures, _ = Runner(args).check_file(path)
            got = 1 if failures else 0
            if got != want:
                bad.append(f"{name}: expected {'a failure' if want else 'a pass'}, got "
                           f"{failures or 'a pass'}")
            elif failures:
                print(f"{name}: fails as it should: {failures[0].splitlines()[0]}")
        # the failure names the file and the line of the failing command
        failures, _ = Runner(args).check_file(os.path.join(d, "broken.md"))
        if not failures or not failures[0].startswith(os.path.relpath(
                os.path.join(d, "broken.md"), ROOT) + ":5:"):
            bad.append(f"broken.md: the failure does not name line 5: {failures}")
        for b in bad:
            print("self-test FAILED: " + b)
        return 1 if bad else 0
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recur", help="the built recur program (its folder goes first on PATH)")
    ap.add_argument("--lib", help="the library the C blocks link (librecur.a or .so)")
    ap.add_argument("--cc", default="cc")
    ap.add_argument("--cflag", action="append", default=[])
    ap.add_argument("--link", action="append", default=[])
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--check-header", metavar="HEADER",
                    help="instead: fail when a RECUR_API declaration of HEADER has no comment")
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    if args.self_test:
        return self_test(args)
    if args.check_header:
        bad = undocumented(args.check_header)
        for b in bad:
            print(b)
        print(f"doc_commands: {len(bad)} declarations of {args.check_header} without a comment")
        return 1 if bad else 0
    if not args.recur or not os.access(args.recur, os.X_OK):
        print(f"doc_commands: --recur {args.recur} is not an executable", file=sys.stderr)
        return 2
    runner = Runner(args)
    failures, ran = [], 0
    for path in doc_files(args):
        f, r = runner.check_file(path)
        failures += f
        ran += r
    for f in failures:
        print("FAILED " + f)
    print(f"doc_commands: {ran} blocks run, {len(failures)} failed")
    if ran == 0:
        print("doc_commands: no runnable block was found")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
