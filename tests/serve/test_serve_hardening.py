#!/usr/bin/env python3
"""recur serve against hostile clients and careless operators (tools/serve/serve.c, serve/conn.c,
serve/sched.c): each check reproduces a failure the server once had.

- slow clients: 300 connections that trickle header lines do not keep a normal client's
  /health (under a second) or completions from being served; a request that trickles in past
  --read-timeout gets a 408 and is closed although every byte restarted the idle timer;
  --conn-per-ip refuses an address's connection past the limit, not another address's
- the drain: after SIGTERM new connections are refused at once, queued requests get 503 with
  Retry-After, running ones finish whole; SIGHUP drains too; a second signal exits at once
- the model file: written in place under a live server (cp), the server exits 1 with a line
  naming the file; renamed over, or with --no-mmap, the server keeps serving
- requests: JSON with bytes after it is a 400; a prompt too long by its bytes is refused
  before tokenizing; HEAD works where GET does; a client that leaves while its whole answer
  is being made frees its slot
- API keys: each key its own prefix cache (cached_tokens), /slots view and slot files
- request smuggling: two Content-Length headers, white space before a header's colon, a line
  folded onto Content-Length, Content-Length beside Transfer-Encoding: chunked, and a transfer
  coding other than chunked are answered 400 (501 for the coding) before any body is read, and
  the connection is closed, so that a request hidden after the headers never runs
- unseeded sampling: 20 requests without a seed report 20 different seeds, and a reported seed
  sent back replays the text

Usage: test_serve_hardening.py RECUR MODEL OTHER_MODEL
"""

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Server as BaseServer, check, counts, wait_for  # noqa: E402

recur, model, other_model = sys.argv[1], sys.argv[2], sys.argv[3]
tmp = tempfile.mkdtemp(prefix="recur-hard-")


def Server(*args, m=model):
    return BaseServer(recur, m, *args)


def connect(port, src="127.0.0.1", timeout=10):
    return socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(src, 0))


def read_all(sock):
    out = b""
    try:
        while True:
            b = sock.recv(65536)
            if not b:
                break
            out += b
    except OSError:
        pass
    return out


# ---- slow clients ---------------------------------------------------------------------------

print("slowloris: 300 slow connections, a normal client beside them")
S = Server("-np", "4", "--read-timeout", "120")
slow, stop = [], threading.Event()
for i in range(300):
    # three source addresses, 100 each: under the per-IP limit (128), so the event loop itself
    # must carry them
    s = connect(S.port, "127.0.0.%d" % (2 + i % 3))
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    slow.append(s)


def trickle():
    n = 0
    while not stop.wait(2.0) and n < 30:
        n += 1
        for s in slow:
            try:
                s.sendall(b"X-Slow-%d: y\r\n" % n)
            except OSError:
                pass


tr = threading.Thread(target=trickle, daemon=True)
tr.start()
check("the 300 slow connections are open",
      wait_for(lambda: S.metrics().get("recur_connections_open", 0) >= 300), S.metrics())
m = S.metrics()
worst = 0.0
for _ in range(5):
    t0 = time.time()
    st = S.request("GET", "/health", timeout=5)[0]
    worst = max(worst, time.time() - t0)
    check("/health beside 300 slow connections", st == 200, st)
check("/health answers in under a second", worst < 1.0, worst)
st, b, _ = S.post("/completion", {"prompt": "Once upon a time", "n_predict": 8, "temperature": 0})
check("a completion is served beside them", st == 200 and b.get("tokens_predicted") == 8, b)
print("  /health: worst of 5 in %.3f s with %d slow connections open" %
      (worst, m.get("recur_connections_open", 0)))
stop.set()
tr.join()
for s in slow:
    s.close()
check("the slow connections close", wait_for(lambda: S.metrics().get("recur_connections_open", 9)
                                             <= 1))
S.stop()

print("a request trickling in past --read-timeout gets a 408")
S = Server("--read-timeout", "2", "--idle-timeout", "30")
s = connect(S.port)
s.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\n")
t0, got = time.time(), b""
s.settimeout(0.5)
while time.time() - t0 < 8:
    try:
        s.sendall(b"X-Trickle: 1\r\n")  # every byte would restart the idle timer
    except OSError:
        break
    try:
        b = s.recv(4096)
        if not b:
            break
        got += b
    except socket.timeout:
        pass
    except OSError:
        break
elapsed = time.time() - t0
check("408 Request Timeout", got.startswith(b"HTTP/1.1 408"), got[:80])
check("after the deadline, not before", 1.5 <= elapsed < 6, elapsed)
check("its body names the flag", b"--read-timeout" in got, got)
s.close()
check("counted (the watcher counts it just after the 408)",
      wait_for(lambda: S.metrics().get("recur_read_timeouts_total") == 1, 5))
check("the server serves on", S.healthy())
S.stop()

print("--conn-per-ip")
S = Server("--conn-per-ip", "4")
held = [connect(S.port, "127.0.0.5") for _ in range(4)]
for h in held:
    h.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    h.settimeout(5)
    check("within the limit: answered", h.recv(4096).startswith(b"HTTP/1.1 200"))
fifth = connect(S.port, "127.0.0.5")
try:
    fifth.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
except OSError:
    pass
fifth.settimeout(5)
check("the fifth from one address is closed unanswered", read_all(fifth) == b"")
other = connect(S.port, "127.0.0.6")
other.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
other.settimeout(5)
check("another address is served", other.recv(4096).startswith(b"HTTP/1.1 200"))
for h in held + [fifth, other]:
    h.close()
S.stop()

# ---- the drain ------------------------------------------------------------------------------

print("SIGTERM: refuse new connections, 503 the queued, finish the running")
S = Server("-np", "4", "--queue", "16", "--max-tokens", "100000")
results = {}
# the streams must still run at the signal, after the checks before it, in any build on any
# machine: about 4 s of this server's single-stream speed (4 streams share it), at least 1000
st, b, _ = S.post("/completion", {"prompt": "Speed", "n_predict": 200, "ignore_eos": True,
                                  "temperature": 0}, timeout=300)
check("the speed of one stream", st == 200 and b["timings"]["predicted_per_second"] > 0, b)
n_long = max(1000, min(100000, int(4 * b["timings"]["predicted_per_second"])))
print("streams of %d tokens" % n_long)


def stream_job(i, n=None):
    try:
        results[("s", i)] = S.stream("/completion", {"prompt": "Once upon a time",
                                                     "n_predict": n or n_long,
                                                     "ignore_eos": True, "temperature": 0,
                                                     "stream": True})
    except (OSError, http.client.HTTPException) as e:  # a server that was meant to die
        results[("s", i)] = (None, [], str(e))


def whole_job(i):
    try:
        st, b, resp = S.post("/completion", {"prompt": "The end %d" % i, "n_predict": 4},
                             timeout=300)
        results[("w", i)] = (st, b, resp.getheader("Retry-After"))
    except OSError as e:
        results[("w", i)] = (None, str(e), None)


threads = [threading.Thread(target=stream_job, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
check("four streams run", wait_for(lambda: S.metrics().get("recur_sequences_in_use") == 4))
queued = [threading.Thread(target=whole_job, args=(i,)) for i in range(6)]
for t in queued:
    t.start()
check("six wait", wait_for(lambda: S.metrics().get("recur_queue_length") == 6))
S.proc.send_signal(signal.SIGTERM)
check("the drain is announced", wait_for(lambda: any("no longer listening" in l for l in S.log), 5))
try:
    c = connect(S.port, timeout=2)
    c.close()
    refused = False
except ConnectionRefusedError:
    refused = True
except OSError:
    refused = False
check("a new connection is refused at once", refused)
for t in queued:
    t.join(60)
for i in range(6):
    st, b, retry = results.get(("w", i), (None, None, None))
    check("queued %d: 503 shutting down with Retry-After" % i,
          st == 503 and "shutting down" in json.dumps(b) and retry is not None, (st, b, retry))
for t in threads:
    t.join(400)
for i in range(4):
    st, events, _ = results.get(("s", i), (None, [], False))
    last = events[-1] if events else {}
    check("running %d: finished whole" % i, st == 200 and last.get("stop") is True and
          last.get("tokens_predicted") == n_long, (st, {k: last.get(k) for k in ("stop",
                                                                             "tokens_predicted")}))
check("exit 0", S.proc.wait(timeout=60) == 0)

print("a second signal during the drain exits at once")
S = Server("-np", "2")
th = threading.Thread(target=stream_job, args=(9, 4000))  # cut off: its length costs nothing
th.start()
check("a long stream runs", wait_for(lambda: S.metrics().get("recur_sequences_in_use") == 1))
S.proc.send_signal(signal.SIGTERM)
check("the drain has begun", wait_for(lambda: any("no longer listening" in l for l in S.log), 5))
t0 = time.time()
S.proc.send_signal(signal.SIGINT)
rc = S.proc.wait(timeout=20)
check("exit 1, at once", rc == 1 and time.time() - t0 < 5, (rc, time.time() - t0))
check("with a message", wait_for(lambda: any("second signal" in l for l in S.log), 5), S.log)
th.join(30)

print("SIGHUP drains as SIGTERM does")
S = Server("-np", "2")
res = {}
th = threading.Thread(target=lambda: res.update(r=S.post("/completion", {
    "prompt": "Once", "n_predict": 600, "ignore_eos": True, "temperature": 0}, timeout=300)))
th.start()
check("running", wait_for(lambda: S.metrics().get("recur_sequences_in_use") == 1))
S.proc.send_signal(signal.SIGHUP)
th.join(300)
st, b, _ = res.get("r", (None, None, None))
check("the request in flight is answered whole", st == 200 and b.get("tokens_predicted") == 600,
      (st, b if st != 200 else b.get("tokens_predicted")))
check("exit 0", S.proc.wait(timeout=60) == 0)
check("SIGHUP named", any("SIGHUP" in l for l in S.log), S.log)

# ---- the model file -------------------------------------------------------------------------

print("the model file written in place under a live server")
live = os.path.join(tmp, "live.gguf")
shutil.copyfile(model, live)
S = Server("-np", "2", m=live)
th = threading.Thread(target=stream_job, args=(20, 4000))
th.start()
check("serving", wait_for(lambda: S.metrics().get("recur_sequences_in_use") == 1))
shutil.copyfile(other_model, live)  # as cp does: the same file, truncated and rewritten
rc = S.proc.wait(timeout=30)
check("exit 1", rc == 1, rc)
check("one line naming the file and what happened",
      wait_for(lambda: any(live in l and ("cut short" in l or "written in place" in l)
                           for l in S.log), 5), S.log[-3:])
th.join(30)

print("replaced by rename, the server serves on")
shutil.copyfile(model, live)
S = Server("-np", "2", m=live)
nxt = os.path.join(tmp, "next.gguf")
shutil.copyfile(other_model, nxt)
os.rename(nxt, live)
# the watcher's check (once a second) has seen the new file before the request
check("the replacement is noted", wait_for(lambda: any("replaced" in l for l in S.log), 5))
st, b, _ = S.post("/completion", {"prompt": "Once", "n_predict": 4})
check("served after the rename", st == 200 and b.get("tokens_predicted") == 4, b)
S.stop()

print("--no-mmap: written in place, harmless")
shutil.copyfile(model, live)
S = Server("-np", "2", "--no-mmap", m=live)
# a mapped server beside it, started after it, whose file is written in place after its: once
# that one's watcher has seen the change (it stops), a watcher of the --no-mmap one would have
# had as long to act
mapped = os.path.join(tmp, "mapped.gguf")
shutil.copyfile(model, mapped)
W = Server("-np", "1", m=mapped)
shutil.copyfile(other_model, live)
shutil.copyfile(other_model, mapped)
check("the mapped server beside it stops (the watcher saw its file change)",
      wait_for(lambda: W.proc.poll() is not None, 30) and W.proc.returncode == 1,
      W.proc.returncode)
st, b, _ = S.post("/completion", {"prompt": "Once", "n_predict": 4})
check("served", st == 200 and b.get("tokens_predicted") == 4, b)
check("exit 0", S.stop() == 0)

# ---- requests -------------------------------------------------------------------------------

print("request bodies, lengths, methods, clients that leave")
S = Server("-np", "2")
st, b, _ = S.request("POST", "/completion", raw=b'{"prompt": "x", "n_predict": 1} garbage')
check("JSON and then bytes: 400", st == 400 and "nothing after it" in json.dumps(b), (st, b))
st, b, _ = S.request("POST", "/completion", raw=b'{"prompt": "x", "n_predict": 1}  \r\n')
check("JSON and white space: 200", st == 200, (st, b))
big = "a" * (900 * 1024)
st, b, _ = S.post("/completion", {"prompt": big, "n_predict": 1})
check("a long prompt is refused from its first bytes, not tokenized whole",
      st == 400 and "counted in its first" in json.dumps(b) and "8192" in json.dumps(b), (st, b))
st, b, _ = S.post("/v1/chat/completions", {"messages": [{"role": "user", "content": big}]})
check("a long chat too", st == 400 and "counted in its first" in json.dumps(b), (st, b))
near = "Once upon a time there was a story. " * 900  # about 8,100 tokens: tokenized whole
st, b, _ = S.post("/tokenize", {"content": near})
st, b, _ = S.post("/completion", {"prompt": near, "n_predict": 1})
check("a prompt within the limit is not refused by the early count",
      st == 200 or "at most 8192" in json.dumps(b), (st, str(b)[:200]))
conn = http.client.HTTPConnection("127.0.0.1", S.port, timeout=10)
conn.request("HEAD", "/health")
r = conn.getresponse()
check("HEAD /health: 200, no body", r.status == 200 and r.read() == b"", r.status)
conn.request("HEAD", "/props")
r = conn.getresponse()
check("HEAD /props: 200", r.status == 200 and r.read() == b"", r.status)
conn.close()
gone_before = S.metrics().get("recur_clients_gone_total", 0)
s = connect(S.port)
body = json.dumps({"prompt": "Once", "n_predict": 4000, "ignore_eos": True}).encode()
s.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          b"Content-Length: %d\r\n\r\n" % len(body) + body)
check("a whole answer being made", wait_for(lambda: S.metrics().get("recur_sequences_in_use") == 1))
s.close()
check("its client leaves: the slot is freed",
      wait_for(lambda: S.metrics().get("recur_sequences_in_use") == 0, 10))
check("and counted", S.metrics().get("recur_clients_gone_total", 0) == gone_before + 1)
S.stop()

# ---- API keys -------------------------------------------------------------------------------

print("API keys: a prefix cache, a slots view and slot files of their own")
keyfile = os.path.join(tmp, "keys")
with open(keyfile, "w") as f:
    f.write("# the team's keys\nkey-b\n\nkey-c  \n")
slots = os.path.join(tmp, "slots")
os.mkdir(slots)
S = Server("-np", "1", "--api-key", "key-a", "--api-key-file", keyfile, "--slot-save-path", slots)
A = {"Authorization": "Bearer key-a"}
B = {"X-Api-Key": "key-b"}
prompt = "A secret prompt that only one client has sent so far, and it is long enough. " * 3
req = {"prompt": prompt, "n_predict": 4, "temperature": 0}
st, a1, _ = S.post("/completion", req, headers=A)
st2, a2, _ = S.post("/completion", req, headers=A)
check("key a: its repeat hits the cache", st == 200 and st2 == 200 and a2["tokens_cached"] > 0,
      (a1.get("tokens_cached"), a2.get("tokens_cached")))
st, b1, _ = S.post("/completion", req, headers=B)
check("key b: the same prompt does not", st == 200 and b1["tokens_cached"] == 0,
      b1.get("tokens_cached"))
check("the same text either way", b1["content"] == a1["content"], (b1["content"], a1["content"]))
check("key c (from the file, spaces trimmed) works",
      S.post("/completion", req, headers={"X-Api-Key": "key-c"})[0] == 200)
check("a wrong key: 401", S.post("/completion", req, headers={"X-Api-Key": "key-x"})[0] == 401)
check("the comment line is no key",
      S.post("/completion", req, headers={"X-Api-Key": "# the team's keys"})[0] == 401)
# the one slot now holds key c's conversation
st, view, _ = S.request("GET", "/slots", headers=B)
check("/slots as another key: no prompt", st == 200 and view[0]["prompt"] == "" and
      view[0]["n_tokens_cached"] == 0, view)
st, view, _ = S.request("GET", "/slots", headers={"X-Api-Key": "key-c"})
check("/slots as its own key: the prompt", st == 200 and view[0]["prompt"].startswith("A secret"),
      view)
st, b, _ = S.post("/slots/0?action=save", {"filename": "mine.bin"}, headers=B)
check("saving another key's slot: 403", st == 403 and "another API key" in json.dumps(b), (st, b))
st, b, _ = S.post("/slots/0?action=save", {"filename": "mine.bin"},
                  headers={"X-Api-Key": "key-c"})
check("its own key saves it", st == 200, (st, b))
dirs = os.listdir(slots)
check("into a folder of that key's, named for its hash (not the key)", len(dirs) == 1 and
      re.fullmatch(r"key-[0-9a-f]{16}", dirs[0]) and
      os.listdir(os.path.join(slots, dirs[0])) == ["mine.bin"], dirs)
st, b, _ = S.post("/slots/0?action=restore", {"filename": "mine.bin"}, headers=B)
check("another key cannot restore it (its folder has none)", st == 400, (st, b))
S.stop()

# ---- request smuggling ------------------------------------------------------------------------

print("request smuggling: framing that two readers could read two ways")


def exchange(port, data, timeout=20):
    """Sends data on a new connection; the bytes answered, and whether the server closed the
    connection (False: still open when timeout passed)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(data)
    out, closed = b"", False
    try:
        while True:
            b = s.recv(65536)
            if not b:
                closed = True
                break
            out += b
    except socket.timeout:
        pass
    s.close()
    return out, closed


F = Server("-np", "1", "--read-timeout", "60", "--idle-timeout", "60")
body = b'{"content": "hello"}'
smuggled = b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
head = b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
cases = (
    ("two Content-Length headers", 400,
     head + b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n" % (len(body), len(body) + len(smuggled))
     + body + smuggled),
    ("white space before the colon", 400,
     head + b"Content-Length : %d\r\n\r\n" % len(body) + body + smuggled),
    ("a line folded onto Content-Length", 400,
     head + b"Content-Length: %d\r\n 0\r\n\r\n" % len(body) + body + smuggled),
    ("Content-Length and Transfer-Encoding: chunked", 400,
     head + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" +
     b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) + smuggled),
    ("Transfer-Encoding: gzip", 501,
     head + b"Transfer-Encoding: gzip\r\n\r\n" + body + smuggled),
)
for name, want, data in cases:
    out, closed = exchange(F.port, data)
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", out)
    check("%s: %d" % (name, want), statuses[:1] == [str(want).encode()], out[:300])
    check("%s: one answer, the smuggled request never runs" % name,
          len(statuses) == 1 and b"File Not Found" not in out, out[:600])
    check("%s: the connection is closed" % name, closed, out[:300])
# what is well framed still works, chunked included, on a kept-alive connection
out, closed = exchange(F.port, head + b"Content-Length: %d\r\n\r\n" % len(body) + body +
                       head + b"Transfer-Encoding: chunked\r\n\r\n" +
                       b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) +
                       b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
check("well framed requests on one connection: 200, 200, 200",
      re.findall(rb"HTTP/1\.1 (\d{3}) ", out) == [b"200"] * 3 and closed, out[:600])

# ---- unseeded sampling -----------------------------------------------------------------------

print("unseeded sampling: a seed of its own per request, reported, replayable")
req = {"prompt": "Once upon a time", "n_predict": 12, "temperature": 1.0, "top_k": 0,
       "top_p": 1.0, "min_p": 0.0}
seeds, texts = [], []
for i in range(20):
    st, b, _ = F.post("/completion", req)
    if st != 200:
        check("an unseeded request: 200", False, (st, b))
        break
    seeds.append(b["generation_settings"]["seed"])
    texts.append(b["content"])
check("20 unseeded requests: 20 different seeds", len(set(seeds)) == 20, seeds)
check("the seeds are integers written exactly",
      all(isinstance(x, int) and 0 <= x < 10 ** 15 for x in seeds), seeds)
replayed = []
for seed, text in zip(seeds, texts):
    st, again, _ = F.post("/completion", dict(req, seed=seed))
    replayed.append(st == 200 and again["content"] == text and
                    again["generation_settings"]["seed"] == seed)
check("each reported seed, sent back, replays its text", replayed and all(replayed),
      list(zip(seeds, replayed)))
check("the smuggling and seed server stops cleanly", F.stop() == 0)

shutil.rmtree(tmp, ignore_errors=True)
print("test_serve_hardening: %d passed, %d failed" % (counts["passed"], counts["failed"]))
sys.exit(counts.exit_status())
