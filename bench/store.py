#!/usr/bin/env python3
"""Figures of the prefix cache's second tier (--prefix-cache-store) for bench/RESULTS.md.

    python3 bench/store.py --recur build-test/tools/recur --model M [--turns 20] [--reps 3]

1. First-token time of turn k of a chat on a replica that has never seen the conversation:
   "tier 2" restores the history from Redis (another replica ran turns 1..k-1), "cold"
   decodes the whole history again (cache_prompt false). Each measurement starts a replica of
   its own (first tier empty, weights paged in by a one-token request) and sends the turn
   with a message of its own, so that only the history can come from the store. Turns of about 100 tokens (a user
   message and a greedy reply of --reply tokens). Interleaved: for each turn, the two are
   measured one after the other, --reps times, medians.
2. Redis's cost per state size: GET of a blob of each size over loopback (the transfer a
   restore makes), medians of 50.
3. nginx's added latency: /health and a 16-token completion straight to a replica and
   through nginx (deploy/nginx.conf.in), interleaved, medians.
"""

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
from serve_util import Server  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--recur", required=True)
ap.add_argument("--model", default=os.path.join(ROOT, "models", "recur-mamba-fortunes.gguf"))
ap.add_argument("--turns", type=int, default=20)
ap.add_argument("--reply", type=int, default=50)
ap.add_argument("--reps", type=int, default=3)
ap.add_argument("--threads", type=int, default=2)
args = ap.parse_args()

WORDS = ("the stars say that a journey of some length will bring you to a door you have "
         "seen before and behind it a friend who remembers what you forgot about the rain").split()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def resp(port, *a):
    s = socket.create_connection(("127.0.0.1", port))
    out = b"*%d\r\n" % len(a)
    for x in a:
        x = x if isinstance(x, bytes) else str(x).encode()
        out += b"$%d\r\n%s\r\n" % (len(x), x)
    s.sendall(out)
    f = s.makefile("rb")
    line = f.readline()
    data = f.read(int(line[1:]) + 2)[:-2] if line[:1] == b"$" and int(line[1:]) >= 0 else line
    s.close()
    return data


def ttft(S, messages, cache, headers=None):
    body = {"messages": messages, "max_tokens": 1, "temperature": 0, "cache_prompt": cache}
    t0 = time.perf_counter()
    st, b, _ = S.post("/v1/chat/completions", body, headers=headers, timeout=600)
    dt = time.perf_counter() - t0
    u = b["usage"] if st == 200 else {}
    return dt, u.get("prompt_tokens", 0), u.get("prompt_tokens_details", {}).get("cached_tokens", 0)


rport = free_port()
redis = subprocess.Popen(["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save",
                          "", "--appendonly", "no", "--maxmemory", "2gb", "--maxmemory-policy",
                          "allkeys-lru"], stdout=subprocess.DEVNULL)
time.sleep(0.5)
url = "redis://127.0.0.1:%d" % rport
writer = Server(args.recur, args.model, "-np", "1", "--prefix-cache-store", url,
                threads=args.threads)
st, props, _ = writer.request("GET", "/props")
state = props["recur"]["state_bytes_per_sequence"]
print("model %s: %s, state %d bytes; %d threads" % (os.path.basename(args.model),
                                                   props["recur"]["architecture"], state,
                                                   args.threads))
print()
print("## first-token time of turn k on a replica new to the conversation (ms)")
print("| turn | prompt tokens | tier 2: restored | tier 2 | cold re-prefill | ratio |")
print("|---:|---:|---:|---:|---:|---:|")
msgs = []
for k in range(1, args.turns + 1):
    msgs.append({"role": "user", "content": "Turn %d. " % k + " ".join(
        WORDS[(k * 5 + i) % len(WORDS)] for i in range(70))})
    warm, cold, n, cached = [], [], 0, 0
    for r in range(args.reps):
        # the turn as this measurement sends it: the history, then a message of its own, so
        # that only the history can come from the store (not an earlier repetition's prompt)
        probe = msgs[:-1] + [{"role": "user", "content": msgs[-1]["content"] + " (take %d)" % r}]
        # a replica that has not seen it: fresh each time, its first tier empty, its weights
        # paged in by one token first so that both sides pay the same
        for store in (True, False):
            extra = ["--prefix-cache-store", url] if store else []
            S = Server(args.recur, args.model, "-np", "1", *extra, threads=args.threads)
            S.post("/completion", {"prompt": [1], "n_predict": 1, "cache_prompt": False})
            t, nn, cc = ttft(S, probe, store)
            S.stop()
            if store:
                warm.append(t)
                n, cached = nn, cc
            else:
                cold.append(t)
    w, c = statistics.median(warm), statistics.median(cold)
    print("| %d | %d | %d | %.1f | %.1f | %.1fx |" % (k, n, cached, 1e3 * w, 1e3 * c, c / w))
    # the turn itself, on the writer: its end goes to Redis for the next turn
    body = {"messages": msgs, "max_tokens": args.reply, "temperature": 0}
    st, b, _ = writer.post("/v1/chat/completions", body, timeout=600)
    msgs.append({"role": "assistant", "content": b["choices"][0]["message"]["content"]})
    time.sleep(0.2)  # the write is queued: let it land
writer.stop()

print()
print("## Redis GET over loopback, per state size (ms, median of 50)")
print("| state bytes | GET |")
print("|---:|---:|")
for size in (64 << 10, 1 << 20, state, 2831155, 10 << 20):
    resp(rport, "SET", "bench:blob", os.urandom(size))
    ts = []
    for _ in range(50):
        t0 = time.perf_counter()
        resp(rport, "GET", "bench:blob")
        ts.append(time.perf_counter() - t0)
    print("| %d | %.2f |" % (size, 1e3 * statistics.median(ts)))
redis.kill()
redis.wait()

print()
print("## nginx's added latency (ms, medians, interleaved)")
tmp = tempfile.mkdtemp(prefix="recur-bench-nginx-")
env = dict(os.environ, RECUR=args.recur, RECUR_MODEL=args.model)
subprocess.run(["bash", os.path.join(ROOT, "deploy", "local.sh"), "up", tmp, "1"], env=env,
               check=True, stdout=subprocess.DEVNULL)
nport = int(open(os.path.join(tmp, "nginx.port")).read())
dport = int(open(os.path.join(tmp, "replica1.port")).read())


def timed(port, method, path, body=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    t0 = time.perf_counter()
    conn.request(method, path, body=json.dumps(body).encode() if body else None,
                 headers={"X-Session-Id": "bench"})
    conn.getresponse().read()
    dt = time.perf_counter() - t0
    conn.close()
    return dt


rows = {"direct": ([], []), "nginx": ([], [])}
comp = {"prompt": "Once upon a time", "n_predict": 16, "temperature": 0}
for _ in range(100):
    for name, port in (("direct", dport), ("nginx", nport)):
        rows[name][0].append(timed(port, "GET", "/health"))
for _ in range(20):
    for name, port in (("direct", dport), ("nginx", nport)):
        rows[name][1].append(timed(port, "POST", "/completion", comp))
print("| path | /health | /completion (16 tokens) |")
print("|---|---:|---:|")
for name in ("direct", "nginx"):
    h, c = rows[name]
    print("| %s | %.2f | %.1f |" % (name, 1e3 * statistics.median(h), 1e3 * statistics.median(c)))
subprocess.run(["bash", os.path.join(ROOT, "deploy", "local.sh"), "down", tmp])
