"""What the server tests share (python3 standard library only): pass/fail/skip counting, the
exit status, and a `recur serve` process on a free loopback port (--port 0, the port read from
its first line).

A test ends with
    print("NAME: %d passed, %d failed" % (counts["passed"], counts["failed"]))
    sys.exit(counts.exit_status())
which is 1 when a check failed or none passed (a run that checked nothing proves nothing), 77
(ctest's SKIP_RETURN_CODE) when a part was skipped (skip) and nothing failed, else 0."""

import atexit
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time


class Counts(dict):
    """The checks' counts ("passed", "failed", "skipped") and the exit status they give."""

    def exit_status(self):
        if self["failed"]:
            return 1
        if self["passed"] == 0:
            print("FAILED: no check ran", file=sys.stderr)
            return 1
        if self["skipped"]:
            print("%d part(s) skipped: the run is a skip, not a pass" % self["skipped"])
            return 77
        return 0


counts = Counts(passed=0, failed=0, skipped=0)

# the processes started here (servers, redis-server), killed at exit if still running: a test
# that stops early on an exception must not leave a server behind, holding ctest's output pipe
live = []


def kill_live():
    for p in live:
        if p.poll() is None:
            p.kill()
            p.wait()


atexit.register(kill_live)


def check(name, cond, detail=""):
    if cond:
        counts["passed"] += 1
    else:
        counts["failed"] += 1
        print("FAILED: %s %s" % (name, detail), file=sys.stderr)


def skip(what, why):
    """A part that cannot run on this machine: never counted as passed, and it makes the whole
    run a skip (exit status 77) unless a check failed."""
    counts["skipped"] += 1
    print("SKIP: %s (%s)" % (what, why))


def wait_for(pred, seconds=20):
    """Polls pred every 50 ms until it is true (True) or seconds pass (False)."""
    end = time.time() + seconds
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def spoil_entries(folder, kind):
    """Replaces every entry file (*.entry) of a folder tier of the prefix cache by a FIFO
    (kind "fifo") or by a sparse 1 GiB file (anything else: nothing on disk, 1 GiB to read);
    returns how many."""
    n = 0
    for top, _, files in os.walk(folder):
        for f in files:
            if f.endswith(".entry"):
                p = os.path.join(top, f)
                os.remove(p)
                if kind == "fifo":
                    os.mkfifo(p)
                else:
                    with open(p, "wb") as fh:
                        fh.truncate(1 << 30)
                n += 1
    return n


class Redis:
    """redis-server on a loopback port as a cache (no persistence, a memory bound, least
    recently used out first), with a minimal RESP client beside it."""

    def __init__(self, port, maxmemory="256mb"):
        self.port = port
        self.proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                      "--save", "", "--appendonly", "no", "--maxmemory", maxmemory,
                                      "--maxmemory-policy", "allkeys-lru"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        live.append(self.proc)
        if not wait_for(self._up, 10):
            raise SystemExit("redis-server did not start")

    def _up(self):
        try:
            return self.cmd("PING") == "PONG"
        except OSError:
            return False

    def cmd(self, *args):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        s.sendall(out)
        f = s.makefile("rb")
        r = self._read(f)
        s.close()
        return r

    def _read(self, f):
        line = f.readline().rstrip(b"\r\n")
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else f.read(n + 2)[:-2]
        if kind == b"*":
            return [self._read(f) for _ in range(int(rest))]
        raise RuntimeError("bad reply %r" % line)

    def keys(self, pattern):
        return [k.decode() for k in self.cmd("KEYS", pattern)]

    def stop(self):
        self.proc.kill()
        self.proc.wait()


class Server:
    """`recur serve -m model --port 0 -t threads ARGS...`, its stderr kept in .log."""

    def __init__(self, recur, model, *args, threads=2):
        # under AddressSanitizer freed memory waits in a quarantine (256 MiB by default),
        # which would read as growth across rounds; a small one keeps RSS meaningful
        env = dict(os.environ)
        env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=4").lstrip(":")
        self.proc = subprocess.Popen([recur, "serve", "-m", model, "--port", "0", "-t",
                                      str(threads)] + list(args), stderr=subprocess.PIPE,
                                     text=True, errors="replace", env=env)
        live.append(self.proc)
        line = self.proc.stderr.readline()
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if not m:
            self.proc.kill()
            raise SystemExit("server did not start: %r" % line)
        self.port = int(m.group(1))
        self.log = []
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            self.log.append(line)

    def request(self, method, path, body=None, headers=None, raw=None, timeout=60):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        conn.request(method, path, body=data, headers=headers or {})
        resp = conn.getresponse()
        out = resp.read()
        conn.close()
        try:
            parsed = json.loads(out)
        except ValueError:
            parsed = out.decode(errors="replace")
        return resp.status, parsed, resp

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def stream(self, path, body):
        """The text of a streamed completion, the events' JSON, and whether [DONE] came."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        conn.request("POST", path, body=json.dumps(body).encode())
        resp = conn.getresponse()
        events, done = [], False
        for line in resp.read().decode().split("\n"):
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
            else:
                events.append(json.loads(line[6:]))
        conn.close()
        return resp.status, events, done

    def metrics(self):
        _, text, _ = self.request("GET", "/metrics")
        return {k: float(v) for k, v in re.findall(r"^(recur_\w+) (\S+)$", text, re.M)}

    def healthy(self):
        try:
            return self.request("GET", "/health", timeout=5)[0] == 200
        except OSError:
            return False

    def rss_kib(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)
