#!/usr/bin/env python3
"""Figures of recur serve under hostile clients, for bench/RESULTS.md:

1. a normal client's latency (/health, and a 16-token /completion) with no slow connections
   and with 300 that trickle header lines, in interleaved rounds;
2. the drain timeline for 30 requests (16 streaming, 14 queued) after SIGTERM: when a new
   connection is refused, when the queued get their 503s, when the running finish, the exit.

Usage: python3 bench/hardening.py --recur build-test/tools/recur [--model M] [--rounds 3]
"""

import json
import signal
import socket
import threading
import time

from bench_util import parser, pct  # noqa: E402 (and the tests' helpers on the path)
from serve_util import Server  # noqa: E402

ap = parser(__doc__)
ap.add_argument("--rounds", type=int, default=3)
args = ap.parse_args()



def latencies(S):
    health, compl = [], []
    for _ in range(100):
        t0 = time.perf_counter()
        S.request("GET", "/health", timeout=10)
        health.append(time.perf_counter() - t0)
    for _ in range(10):
        t0 = time.perf_counter()
        S.post("/completion", {"prompt": "Once upon a time", "n_predict": 16, "temperature": 0})
        compl.append(time.perf_counter() - t0)
    return health, compl


def slow_clients(port, n):
    socks = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10,
                                     source_address=("127.0.0.%d" % (2 + i % 3), 0))
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        socks.append(s)
    stop = threading.Event()

    def trickle():
        k = 0
        while not stop.wait(2.0):
            k += 1
            for s in socks:
                try:
                    s.sendall(b"X-Slow-%d: y\r\n" % k)
                except OSError:
                    pass

    th = threading.Thread(target=trickle, daemon=True)
    th.start()
    return socks, stop, th


print("## latency of a normal client, without and with 300 slow connections (ms)")
S = Server(args.recur, args.model, "-np", "4", "--read-timeout", "600")
rows = {0: ([], []), 300: ([], [])}
for r in range(args.rounds):
    for n in (0, 300):
        socks, stop, th = slow_clients(S.port, n) if n else ([], None, None)
        time.sleep(0.5)
        h, c = latencies(S)
        rows[n][0].extend(h)
        rows[n][1].extend(c)
        if stop:
            stop.set()
            th.join()
        for s in socks:
            s.close()
        time.sleep(0.5)
S.stop()
print("| slow connections | /health p50 | /health p99 | /completion (16 tokens) p50 | p99 |")
print("|---:|---:|---:|---:|---:|")
for n in (0, 300):
    h, c = rows[n]
    print("| %d | %.2f | %.2f | %.1f | %.1f |" % (n, 1e3 * pct(h, 50), 1e3 * pct(h, 99),
                                                 1e3 * pct(c, 50), 1e3 * pct(c, 99)))

print()
print("## drain timeline: 16 streaming + 14 queued, SIGTERM at 0 (seconds)")
S = Server(args.recur, args.model, "-np", "16", "--queue", "32")
events = []
lock = threading.Lock()


def note(what, t):
    with lock:
        events.append((t, what))


def streamer(i):
    st, evs, _ = S.stream("/completion", {"prompt": "Once upon a time %d" % i, "n_predict": 400,
                                          "ignore_eos": True, "temperature": 0, "stream": True})
    note("running %d finished (%s, %d tokens)" % (i, st, evs[-1].get("tokens_predicted", 0)
                                                  if evs else 0), time.perf_counter())


def queued(i):
    try:
        st, b, resp = S.post("/completion", {"prompt": "Queued %d" % i, "n_predict": 8})
        note("queued %d answered %d Retry-After %s" % (i, st, resp.getheader("Retry-After")),
             time.perf_counter())
    except OSError as e:
        note("queued %d: %s" % (i, e), time.perf_counter())


ts = [threading.Thread(target=streamer, args=(i,)) for i in range(16)]
for t in ts:
    t.start()
while S.metrics().get("recur_sequences_in_use", 0) < 16:
    time.sleep(0.02)
qs = [threading.Thread(target=queued, args=(i,)) for i in range(14)]
for t in qs:
    t.start()
while S.metrics().get("recur_queue_length", 0) < 14:
    time.sleep(0.02)
t0 = time.perf_counter()
S.proc.send_signal(signal.SIGTERM)
refused_at = None
while time.perf_counter() - t0 < 10:
    try:
        socket.create_connection(("127.0.0.1", S.port), timeout=1).close()
    except ConnectionRefusedError:
        refused_at = time.perf_counter()
        break
    time.sleep(0.005)
for t in ts + qs:
    t.join(120)
rc = S.proc.wait(60)
t_exit = time.perf_counter()
events.sort()
print("| event | at |")
print("|---|---:|")
if refused_at:
    print("| first new connection refused | %.3f |" % (refused_at - t0))
q = [t for t, w in events if w.startswith("queued")]
r = [t for t, w in events if w.startswith("running")]
print("| queued: first / last 503 | %.3f / %.3f |" % (min(q) - t0, max(q) - t0))
print("| running: first / last finished whole | %.3f / %.3f |" % (min(r) - t0, max(r) - t0))
print("| process exited (status %d) | %.3f |" % (rc, t_exit - t0))
print()
print(json.dumps({"queued_503": sum("answered 503" in w for _, w in events),
                  "running_whole": sum("(200, 400 tokens)" in w for _, w in events)}))
