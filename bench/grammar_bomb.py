#!/usr/bin/env python3
"""A normal client's latency while other clients send grammar bombs, for bench/RESULTS.md.

Interleaved rounds on one `recur serve` (the shipped model, 2 threads): a quiet phase, then
an attack phase where ATTACKERS threads send, in turn, the GBNF bomb root ::= ([a-z]?){0,1000},
the same as a json_schema pattern, and a grammar whose parses pile up with the text
(([a-z]{1,100}){0,1000}, which fails on the decode thread after some tokens). In each phase
one client times GET /health and a 16-token /completion, one after the other. Prints, per
phase, /health p50 / p99 and the completion's p50 in ms, the attackers' answers by status and
their slowest answer; a client timeout (5 s) counts as a status "timeout".

Usage: python3 bench/grammar_bomb.py --recur build-test/tools/recur [--rounds 3] [--n 200]
"""

import http.client
import json
import subprocess
import sys
import threading
import time

from bench_util import parser, pct  # noqa: E402 (and the tests' helpers on the path)
from serve_util import Server  # noqa: E402

ap = parser(__doc__)
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--n", type=int, default=200, help="/health requests per phase and round")
ap.add_argument("--attackers", type=int, default=4)
args = ap.parse_args()

BOMBS = [
    ("/completion", {"prompt": "x", "n_predict": 16, "grammar": "root ::= ([a-z]?){0,1000}"}),
    ("/v1/completions", {"prompt": "x", "max_tokens": 16,
                         "json_schema": {"type": "string", "pattern": "^([a-z]?){0,1000}$"}}),
    ("/completion", {"prompt": "x", "n_predict": 400, "temperature": 0,
                     "grammar": "root ::= ([a-z]{1,100}){0,1000}"}),
]



def call(port, method, path, body=None, timeout=5.0):
    t0 = time.perf_counter()
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request(method, path, body=json.dumps(body).encode() if body is not None else None)
        r = c.getresponse()
        r.read()
        c.close()
        st = r.status
    except OSError:
        st = "timeout"
    return st, time.perf_counter() - t0


def phase(port, attack):
    stop = threading.Event()
    answers, slowest = {}, [0.0]
    lock = threading.Lock()

    def attacker(i):
        k = i
        while not stop.is_set():
            path, body = BOMBS[k % len(BOMBS)]
            k += 1
            st, dt = call(port, "POST", path, body)
            with lock:
                answers[st] = answers.get(st, 0) + 1
                slowest[0] = max(slowest[0], dt)

    threads = [threading.Thread(target=attacker, args=(i,)) for i in range(args.attackers)]
    if attack:
        for t in threads:
            t.start()
        time.sleep(0.5)  # the attack under way before the first measurement
    health, compl, fails = [], [], 0
    for i in range(args.n):
        st, dt = call(port, "GET", "/health")
        if st == 200:
            health.append(dt * 1e3)
        else:
            fails += 1
        if i % 10 == 0:
            st, dt = call(port, "POST", "/completion",
                          {"prompt": "Once upon a time", "n_predict": 16, "temperature": 0},
                          timeout=30)
            if st == 200:
                compl.append(dt * 1e3)
            else:
                fails += 1
    stop.set()
    if attack:
        for t in threads:
            t.join(60)
    return health, compl, fails, answers, slowest[0]


S = Server(args.recur, args.model, threads=2)
res = {False: [[], [], 0, {}, 0.0], True: [[], [], 0, {}, 0.0]}
for r in range(args.rounds):
    for attack in (False, True):
        h, c, f, a, s = phase(S.port, attack)
        acc = res[attack]
        acc[0] += h
        acc[1] += c
        acc[2] += f
        for k, v in a.items():
            acc[3][k] = acc[3].get(k, 0) + v
        acc[4] = max(acc[4], s)
try:
    S.stop()
except subprocess.TimeoutExpired:  # a server stuck in a grammar does not drain
    print("the server did not stop within 30 s of SIGTERM: killed", file=sys.stderr)
    S.proc.kill()
    S.proc.wait()
out = {}
for attack in (False, True):
    h, c, f, a, s = res[attack]
    name = "attack" if attack else "quiet"
    out[name] = {"health_p50_ms": round(pct(h, 50), 2), "health_p99_ms": round(pct(h, 99), 2),
                 "completion16_p50_ms": round(pct(c, 50), 1), "normal_client_failures": f,
                 "n_health": len(h)}
    if attack:
        out[name]["attacker_answers"] = {str(k): v for k, v in sorted(a.items(), key=str)}
        out[name]["attacker_slowest_s"] = round(s, 3)
    print("%-6s /health p50 %.2f ms p99 %.2f ms (%d); 16-token /completion p50 %.1f ms; "
          "normal client failures %d%s" % (
              name, pct(h, 50), pct(h, 99), len(h), pct(c, 50), f,
              "; attackers: %s, slowest %.3f s" % (out[name]["attacker_answers"], s)
              if attack else ""))
print(json.dumps(out))
