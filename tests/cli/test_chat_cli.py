"""test_chat_cli.py: `recur chat`, driven through a pipe and through a pseudo-terminal.

  test_chat_cli.py RECUR_BIN SHIPPED_MODEL TEMPLATE_MODEL

SHIPPED_MODEL (models/recur-mamba-fortunes.gguf) has no chat template, so chatml applies;
TEMPLATE_MODEL carries gemma's template (tests/CMakeLists.txt writes it with
`recur mkmodel --chat-template`). Expected prompt texts are written here from each format's
published turn strings, and their token counts come from `recur tokenize`, independently of
the code under test. Replies are greedy (--temp 0), so runs are repeatable.
Last line: "test_chat_cli: N passed, M failed"; exit 1 when a check failed or none ran, 77
(a skip) when a part could not run here (ptrace refused), else 0.
"""
import ctypes
import os
import pty
import re
import select
import signal
import subprocess
import sys
import tempfile
import time

RECUR, SHIPPED, TMPL_MODEL = sys.argv[1:4]
WORK = tempfile.mkdtemp(prefix="test_chat_cli.")
passed = failed = skipped = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL: " + what)


def skip(what, why):
    """A part that cannot run here: never a pass; the run then exits 77 unless a check failed."""
    global skipped
    skipped += 1
    print("SKIP: %s (%s)" % (what, why))


def chat(lines, *flags, model=SHIPPED, n=16):
    """Runs recur chat with lines on stdin; returns (status, stdout, stderr)."""
    args = [RECUR, "chat", "-m", model, "--temp", "0", "-n", str(n), "-t", "2"] + list(flags)
    r = subprocess.run(args, input="".join(l + "\n" for l in lines).encode(),
                       capture_output=True, timeout=300)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def n_tokens(text, model=SHIPPED, bos=True):
    args = [RECUR, "tokenize", "-m", model, "-p", text] + ([] if bos else ["--no-bos"])
    out = subprocess.run(args, capture_output=True, check=True, text=True).stdout.split()
    return len(out)


def turns(stderr):
    """[(decoded, reused)] of each turn, from the stderr lines of recur chat."""
    return [(int(a), int(b)) for a, b in
            re.findall(r"recur chat: turn \d+: decoded (\d+) tokens \((\d+) reused\)", stderr)]


def chatml(role, text):
    return "<|im_start|>%s\n%s<|im_end|>\n" % (role, text)


GEN = "<|im_start|>assistant\n"
L1, L2, L3 = "Tell me a fortune.", "Another one, please.", "And a third."

# ---- --help ------------------------------------------------------------------------------
r = subprocess.run([RECUR, "chat", "--help"], capture_output=True, text=True)
check(r.returncode == 0 and "--chat-template NAME" in r.stdout and "--system-prompt" in r.stdout
      and "/save FILE" in r.stdout and "-n, --n-predict" in r.stdout,
      "chat --help lists its flags: %r" % r.stdout)
r = subprocess.run([RECUR, "help"], capture_output=True, text=True)
check("chat" in r.stdout, "recur help lists chat")

# ---- turns, and the second decodes only the new part -----------------------------------
st1, out1, err1 = chat([L1])
st2, out2, err2 = chat([L1, L2])
check(st1 == 0 and st2 == 0, "chat exits 0: %d %d %s" % (st1, st2, err2))
check("template chatml (the default: the model has none)" in err1, "the default template: " + err1)
reply1 = out1[:-1]
check(out1.endswith("\n") and len(reply1) > 0, "a reply ending in a newline: %r" % out1)
check(out2.startswith(out1) and len(out2) > len(out1), "the first turn repeats: %r %r" % (out1, out2))
check("<|im_end|>" not in reply1, "the reply holds no end-of-turn text: %r" % reply1)
t = turns(err2)
check(len(t) == 2, "two turns reported: " + err2)
if len(t) == 2:
    first = chatml("user", L1) + GEN
    check(t[0] == (n_tokens(first), 0),
          "turn 1 decodes the whole prompt (%d tokens): %r" % (n_tokens(first), t[0]))
    # the state holds the first rendering and the reply's 16 tokens; the second turn decodes
    # only what the template adds after them
    suffix = "<|im_end|>\n" + chatml("user", L2) + GEN
    want = n_tokens(suffix, bos=False)
    check(t[1] == (want, t[0][0] + 16),
          "turn 2 decodes only the new suffix (%d tokens, %d reused): %r" % (want, t[0][0] + 16, t[1]))

# a system prompt starts the conversation
st, out, err = chat([L1], "-sys", "You tell fortunes.")
t = turns(err)
want = n_tokens(chatml("system", "You tell fortunes.") + chatml("user", L1) + GEN)
check(st == 0 and t == [(want, 0)], "-sys is the first message (%d tokens): %r" % (want, t))

# ---- /save and /load: a new process goes on with the same state ------------------------
save = os.path.join(WORK, "conv.state")
st, out_one, err_one = chat([L1, L2, L3])
st_a, out_a, err_a = chat([L1, L2, "/save " + save])
check(st_a == 0 and os.path.exists(save) and os.path.exists(save + ".chat"),
      "/save writes FILE and FILE.chat: " + err_a)
with open(save + ".chat", "rb") as f:
    side = f.read()
check(side.startswith(b"recur-chat 1\ntemplate chatml\n") and L2.encode() in side,
      "FILE.chat holds the messages: %r" % side[:200])
st_b, out_b, err_b = chat(["/load " + save, L3])
check(st_b == 0 and "loaded 4 messages" in err_b, "/load reads it back: " + err_b)
replies_one = out_one.split("\n")
check(out_one.startswith(out_a), "the saving run replies as the one-process run")
check(out_b == out_one[len(out_a):],
      "the next turn after /load equals the same conversation in one process:\n  %r\n  %r" %
      (out_b, out_one[len(out_a):]))
t_one, t_b = turns(err_one), turns(err_b)
check(len(t_one) == 3 and len(t_b) == 1 and t_b[0] == t_one[2],
      "after /load the turn decodes only the new part, as in one process: %r %r" % (t_one, t_b))


def read_sidecar(path):
    """(text, [(role, content)]) of a FILE.chat, parsed by the format recur chat documents."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0

    def line():
        nonlocal pos
        end = data.index(b"\n", pos)
        s = data[pos:end].decode()
        pos = end + 1
        return s

    def blob(n):
        nonlocal pos
        b = data[pos:pos + n]
        assert data[pos + n:pos + n + 1] == b"\n"
        pos += n + 1
        return b

    assert line() == "recur-chat 1"
    line()
    text = blob(int(line().split()[1]))
    msgs = []
    for _ in range(int(line().split()[1])):
        role, n = line().split()
        msgs.append((role, blob(int(n))))
    return text, msgs


def run_greedy(prompt_bytes, n=16):
    """What `recur run` generates after the prompt, greedy (its stdout echoes the prompt)."""
    pf = os.path.join(WORK, "prompt.txt")
    with open(pf, "wb") as f:
        f.write(prompt_bytes)
    r = subprocess.run([RECUR, "run", "-m", SHIPPED, "-f", pf, "-n", str(n), "--temp", "0",
                        "-t", "2"], capture_output=True, check=True)
    assert r.stdout.startswith(prompt_bytes)
    return r.stdout[len(prompt_bytes):]


def chatml_bytes(msgs):
    return b"".join(b"<|im_start|>" + r.encode() + b"\n" + c + b"<|im_end|>\n" for r, c in msgs)


# ---- when the new rendering does not extend the state's text: back to a checkpoint -----
# The saved last reply is changed near its end (same length), so the state no longer stands
# for a prefix of the next rendering: the chat must go back to the newest checkpoint (every 32
# positions) before the tokens that differ, decode the rest, and reply as a fresh decode of
# the rendering (`recur run` on it; its stdout also ends in a newline).
text, msgs = read_sidecar(save + ".chat")
with open(save + ".chat", "rb") as f:
    side = f.read()
role, last = msgs[-1]
check(role == "assistant" and len(last) > 4, "the saved conversation ends with the reply")
edited = last[:-3] + (b"X" if last[-3:-2] != b"X" else b"Y") + last[-2:]
head = b"assistant %d\n" % len(last)
with open(save + ".chat", "wb") as f:
    f.write(side[:side.rindex(head)] + head + edited + b"\n")
msgs[-1] = ("assistant", edited)
st, out, err = chat(["/load " + save, L3])
rendering = chatml_bytes(msgs + [("user", L3.encode())]) + GEN.encode()
total = n_tokens(rendering.decode("utf-8", "surrogateescape"))
t = turns(err)
m = re.search(r"\((\d+) of its tokens agree\); decoding from token (\d+)", err)
check(m is not None and len(t) == 1, "the fallback is noted: " + err)
if m and len(t) == 1:
    agree, held = int(m.group(1)), int(m.group(2))
    check(32 <= held <= agree < 95 and held % 32 == 0 and t[0] == (total - held, held),
          "it goes back to a checkpoint and decodes the rest (%d tokens): %r, %d agree, from %d" %
          (total, t[0], agree, held))
check(out.encode() == run_greedy(rendering),
      "the reply after going back equals a fresh decode of the rendering: %r" % out)
# another template than the saved one: nothing agrees, all is decoded again
with open(save + ".chat", "wb") as f:
    f.write(side)
text, msgs = read_sidecar(save + ".chat")
st, out, err = chat(["/load " + save, L3], "--chat-template", "llama3")
check("saved with the chatml template, this chat uses llama3" in err, "the template change is noted")
l3 = b"".join(b"<|start_header_id|>" + r.encode() + b"<|end_header_id|>\n\n" + c.strip(b" \t\n\r\v\f") +
              b"<|eot_id|>" for r, c in msgs + [("user", L3.encode())])
l3 += b"<|start_header_id|>assistant<|end_header_id|>\n\n"
total = n_tokens(l3.decode("utf-8", "surrogateescape"))
check(turns(err) == [(total, 0)], "llama3 after chatml decodes from scratch (%d): %r" % (total, turns(err)))
check(out.encode() == run_greedy(l3), "and replies as a fresh decode of the llama3 rendering")

# ---- a reply ends at the format's end-of-turn text ---------------------------------------
# rwkv-world's turns end in a blank line; greedy `recur run` on the same prompt goes on past
# one, so the chat's reply must be run's text up to the first blank line.
st, out, err = chat([L1], "--chat-template", "rwkv-world", n=64)
full = run_greedy(("User: %s\n\nAssistant:" % L1).encode(), n=64)
check(b"\n\n" in full[:-1], "the model writes a blank line within 64 tokens: %r" % full)
check(out.encode() == full[:full.index(b"\n\n")] + b"\n",
      "the reply stops at the end-of-turn text: %r, run: %r" % (out, full))

# ---- errors: the conversation goes on ----------------------------------------------------
st, out, err = chat([L1, "/load " + os.path.join(WORK, "missing.state"), "/bogus x", "/save",
                     L2])
check(st == 0, "errors at the prompt do not end the chat")
check("/load: " + os.path.join(WORK, "missing.state") in err and "No such file" in err,
      "a missing file is named: " + err)
check("unknown command '/bogus'" in err and "/save FILE" in err, "a bad command: " + err)
check("/save needs a file name" in err, "/save without a file: " + err)
check(out == out2 and turns(err) == turns(err2),
      "the conversation is unchanged by the failed commands: %r" % out)
# a corrupt FILE.chat is refused and the conversation is kept
with open(save + ".chat", "wb") as f:
    f.write(side[:len(side) // 2])
st, out, err = chat([L1, "/load " + save, L2])
check("/load: " + save + ".chat" in err and "cut short" in err, "a cut FILE.chat is refused: " + err)
check(out == out2 and turns(err) == turns(err2), "a refused /load keeps the conversation")
# a state file of another model is refused, the conversation kept
with open(save + ".chat", "wb") as f:
    f.write(side)
st, out, err = chat([L1, "/load " + save, L2], model=TMPL_MODEL)
check(st == 0 and "/load:" in err and "loaded" not in err, "another model's state is refused: " + err)
t = turns(err)
check(len(t) == 2 and t[1][1] > 0, "after the refused load the turn reuses the state: %r" % t)
r = subprocess.run([RECUR, "chat", "--chat-template", "nonsense"], input=b"", capture_output=True)
check(r.returncode == 2 and b"supported: " in r.stderr, "a bad --chat-template: %r" % r.stderr)
r = subprocess.run([RECUR, "chat", "-m", os.path.join(WORK, "none.gguf")], input=b"",
                   capture_output=True)
check(r.returncode == 1 and b"none.gguf" in r.stderr, "a missing model: %r" % r.stderr)

# ---- a model with its own template (gemma's) ---------------------------------------------
st, out, err = chat([L1, L2], model=TMPL_MODEL, n=8)
check(st == 0 and "template gemma (the model's)" in err, "the model's template is used: " + err)
t = turns(err)
gemma1 = "<start_of_turn>user\n%s<end_of_turn>\n<start_of_turn>model\n" % L1
check(len(t) == 2 and t[0] == (n_tokens(gemma1, model=TMPL_MODEL), 0),
      "gemma's turn 1 (%d tokens): %r" % (n_tokens(gemma1, model=TMPL_MODEL), t))
check(len(out.split("\n")) >= 3, "two replies: %r" % out)
st, out, err = chat([L1], "--chat-template", "chatml", model=TMPL_MODEL, n=4)
check("template chatml (--chat-template)" in err and
      turns(err) == [(n_tokens(chatml("user", L1) + GEN, model=TMPL_MODEL), 0)],
      "--chat-template overrides the model's: " + err)


# ---- Ctrl-C in a pseudo-terminal ---------------------------------------------------------
# tools/cli/chat.c: a SIGINT during a reply ends the reply and the chat prompts again; a second one
# before the reply has ended quits (the loop sees two and stops, no prompt); one at the prompt
# quits (a newline after "> "). Two Ctrl-Cs typed at once are one pending signal, and a second
# sent after the first was handled lands on a reply whose end is one token away, so the
# "twice during a reply" path is driven through ptrace: the first SIGINT is held at its
# delivery, the second made pending, and both then reach the handler before the program runs on.
PTRACE_CONT, PTRACE_DETACH, PTRACE_SEIZE = 7, 17, 0x4206
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]


def ptrace(req, pid, data=0):
    if libc.ptrace(req, pid, None, ctypes.c_void_p(data)) < 0:
        e = ctypes.get_errno()
        raise OSError(e, "ptrace(%d): %s" % (req, os.strerror(e)))


def sigint_pending(pid):
    """SIGINT is pending for the process (the ShdPnd mask of /proc/PID/status)."""
    with open("/proc/%d/status" % pid) as f:
        m = re.search(r"^ShdPnd:\s*([0-9a-f]+)", f.read(), re.M)
    return m is not None and int(m.group(1), 16) & (1 << (signal.SIGINT - 1)) != 0


class Pty:
    """recur chat on a pseudo-terminal: its output in .buf, stderr in a file."""

    def __init__(self, *flags):
        self.errpath = os.path.join(WORK, "pty.err")
        pid, fd = pty.fork()
        if pid == 0:
            e = os.open(self.errpath, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(e, 2)
            os.execv(RECUR, [RECUR, "chat", "-m", SHIPPED, "-t", "2"] + list(flags))
        self.pid, self.fd, self.buf, self.status = pid, fd, b"", None

    def pump(self, timeout):
        """Reads what the program wrote within timeout seconds; False at EOF."""
        r, _, _ = select.select([self.fd], [], [], timeout)
        if not r:
            return True
        try:
            data = os.read(self.fd, 4096)
        except OSError:  # EIO: the program has exited
            return False
        self.buf += data
        return bool(data)

    def read_until(self, pred, timeout=60):
        end = time.time() + timeout
        while not pred(self.buf) and time.time() < end:
            if not self.pump(0.2):
                break
        return pred(self.buf)

    def drain(self, timeout=30):
        """Reads the rest of the output of a program that has exited (to the terminal's EOF)."""
        end = time.time() + timeout
        while time.time() < end and self.pump(0.2):
            pass

    def stderr_text(self):
        with open(self.errpath, encoding="utf-8", errors="replace") as f:
            return f.read()

    def wait_stop(self, timeout=30):
        """The next ptrace stop: its signal, or None."""
        end = time.time() + timeout
        while time.time() < end:
            p, st = os.waitpid(self.pid, os.WNOHANG)
            if p == self.pid:
                if os.WIFSTOPPED(st):
                    return os.WSTOPSIG(st)
                self.status = st
                return None
            self.pump(0.05)
        return None

    def wait_exit(self, timeout=30):
        """The exit status (os.waitpid's), or None while it still runs."""
        end = time.time() + timeout
        while self.status is None and time.time() < end:
            self.pump(0.2)
            p, st = os.waitpid(self.pid, os.WNOHANG)
            if p == self.pid:
                self.status = st
        return self.status

    def alive(self):
        return self.status is None and os.waitpid(self.pid, os.WNOHANG) == (0, 0)

    def send_line(self, text):
        """Types a line; returns a predicate: its reply has begun (the echo, then a byte more)."""
        mark = len(self.buf)
        os.write(self.fd, (text + "\n").encode())
        echo = text.encode() + b"\r\n"

        def started(b):
            i = b.find(echo, mark)
            return i >= 0 and len(b) > i + len(echo)
        return started

    def close(self):
        if self.status is None and self.wait_exit(0) is None:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.fd)


def exited_0(status):
    return status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def sigint_twice_in_reply(c):
    """Delivers two SIGINTs (Ctrl-C on the terminal) to c's reply before it ends; False with a
    reason when ptrace is refused here."""
    try:
        ptrace(PTRACE_SEIZE, c.pid)
    except OSError as e:
        return str(e)
    os.write(c.fd, b"\x03")
    sig = c.wait_stop()
    while sig is not None and sig != signal.SIGINT:  # another signal: delivered as it came
        ptrace(PTRACE_CONT, c.pid, sig)
        sig = c.wait_stop()
    check(sig == signal.SIGINT, "the first Ctrl-C reaches the program (%r)" % sig)
    if sig != signal.SIGINT:
        return True
    # held at its delivery: the second is made pending now, and resuming into the first
    # handler delivers it as that handler returns, before the reply's loop runs again
    os.write(c.fd, b"\x03")
    end = time.time() + 30
    while not sigint_pending(c.pid) and time.time() < end:
        time.sleep(0.01)
    check(sigint_pending(c.pid), "the second Ctrl-C is pending while the first is held")
    ptrace(PTRACE_CONT, c.pid, signal.SIGINT)
    sig = c.wait_stop()
    check(sig == signal.SIGINT, "the second Ctrl-C follows the first handler (%r)" % sig)
    if sig is not None:
        ptrace(PTRACE_DETACH, c.pid, sig)
    return True


def pty_session():
    # once during a reply: the reply ends, the chat prompts again and goes on
    c = Pty("--temp", "0", "-n", "1000000")
    check(c.read_until(lambda b: b.endswith(b"> ")), "the prompt '> ' on a terminal: %r" % c.buf[-200:])
    started = c.send_line(L1)
    # a long reply (-n 1000000): Ctrl-C once it is streaming
    check(c.read_until(started), "the reply streams")
    os.write(c.fd, b"\x03")
    check(c.read_until(lambda b: b.endswith(b"> ")), "Ctrl-C ends the reply and prompts again")
    check(c.stderr_text().count("reply interrupted") == 1,
          "the interruption is reported: " + c.stderr_text())
    check(c.alive(), "the program is still running after Ctrl-C in a reply")
    # the next turn is answered
    started = c.send_line(L2)
    check(c.read_until(lambda b: "turn 2: decoded" in c.stderr_text()), "the next turn is decoded")
    check(c.read_until(started), "and answered")
    # twice during that reply: the reply ends and the chat quits, status 0, with no prompt
    mark = len(c.buf)
    why = sigint_twice_in_reply(c)
    if why is not True:
        skip("Ctrl-C twice during a reply", "ptrace is refused here: %s" % why)
    else:
        status = c.wait_exit()
        if status is not None:
            c.drain()
        after = c.buf[mark:].replace(b"^C", b"")  # the terminal echoes a Ctrl-C as ^C
        check(exited_0(status), "Ctrl-C twice in a reply quits with status 0 (%r)" % status)
        # the reply's end is its newline; a prompt would follow it as "> " and, as the chat
        # quits at it, a newline
        check(after.endswith(b"\r\n") and not after.endswith(b"\r\n> \r\n"),
              "Ctrl-C twice in a reply: it quits with no prompt after it (%r)" % after[-200:])
        check(c.stderr_text().count("reply interrupted") == 2,
              "the second reply's interruption is reported: " + c.stderr_text())
    c.close()

    # once during a reply, then once at the prompt that follows: the prompt, then a newline
    # and status 0
    c = Pty("--temp", "0", "-n", "1000000")
    check(c.read_until(lambda b: b.endswith(b"> ")), "the prompt again")
    started = c.send_line(L1)
    check(c.read_until(started), "the reply streams again")
    os.write(c.fd, b"\x03")
    check(c.read_until(lambda b: b.endswith(b"> ")), "one Ctrl-C ends the reply, the prompt follows")
    check(c.alive(), "and the chat waits at it")
    mark = len(c.buf)
    os.write(c.fd, b"\x03")
    status = c.wait_exit()
    if status is not None:
        c.drain()
    check(exited_0(status), "Ctrl-C at the prompt after a reply quits with status 0 (%r)" % status)
    check(c.buf[mark:].replace(b"^C", b"") in (b"\n", b"\r\n"),
          "at the prompt: a newline, no reply (%r)" % c.buf[mark:])
    check(c.stderr_text().count("reply interrupted") == 1, "one interruption: " + c.stderr_text())
    c.close()

    # Ctrl-C at the first prompt quits
    c = Pty()
    check(c.read_until(lambda b: b.endswith(b"> ")), "the first prompt")
    os.write(c.fd, b"\x03")
    status = c.wait_exit()
    check(exited_0(status), "Ctrl-C at the prompt quits with status 0 (%r)" % status)
    check("reply interrupted" not in c.stderr_text(), "no reply to interrupt: " + c.stderr_text())
    c.close()


# ---- a grammar: every reply is one text of it, from its start (the conversation's tokens
# never reach the grammar), with sampling at a temperature
yes_no = 'root ::= ("yes" | "no") "."'
st, out, err = chat([L1, L2, L3], "--grammar", yes_no, "--temp", "1.5", "--seed", "3", n=20)
replies = [l for l in out.split("\n") if l.strip()]
check(st == 0 and len(turns(err)) == 3, "--grammar: three turns (%d, %r)" % (st, err[-300:]))
check(all(r.split("> ")[-1] in ("yes.", "no.") for r in replies) and len(replies) >= 3,
      "--grammar: every reply is a text of the grammar (%r)" % out)
st, out, err = chat([L1], "--grammar", "root ::= [a-")
check(st == 2 and "line 1, column 10" in err, "a bad --grammar: exit 2, line and column (%d, %r)" %
      (st, err[-300:]))
st, out, err = chat([L1], "--json-schema", '{"type": "string", "format": "email"}')
check(st == 2 and "'format' 'email' is not supported" in err,
      "an unsupported --json-schema: exit 2 (%d, %r)" % (st, err[-300:]))


pty_session()

print("test_chat_cli: %d passed, %d failed" % (passed, failed))
if passed == 0:
    print("FAIL: no check ran")
sys.exit(1 if failed or passed == 0 else 77 if skipped else 0)
