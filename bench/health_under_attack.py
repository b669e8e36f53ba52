#!/usr/bin/env python3
"""recur serve's latency while one client attacks it with an allowed-looking request, for
bench/RESULTS.md (issue 28's attacks 1 and 3; bench/store_attacks.py has 2, 4 and 5).

    python3 bench/health_under_attack.py --recur build-test/tools/recur [--seconds 10]

One server (-t 2, -np 17) per case, on the shipped model. For --seconds, one client asks
/health every 10 ms, and another streams a long completion and records the longest gap between
two of its events (a stall still going at the end counts to the end); the attack is sent once
at the start. Cases:

- "none": no attack;
- "grammar": a 30-byte GBNF whose repetitions nest, `root ::= ([a-z]?){0,1000}`;
- "schema": the JSON schema `{"type": "string", "pattern": "^([a-z]?){0,1000}$"}`;
- "answer 384": /completion with n_predict 384, n_cmpl 16, n_probs 100, ignore_eos (a 48 MB
  answer, allowed by every version);
- "answer max": n_predict 4096 in place of 384 (refused up front where --max-answer-mb exists).

Prints a Markdown table: /health p50, p99 and max, the stream's longest gap, and the attack's
status and time (ms). An attack still running when the time is up says so.
"""

import http.client
import json
import threading
import time

from bench_util import parser, pct  # noqa: E402 (and the tests' helpers on the path)
from serve_util import Server  # noqa: E402

ap = parser(__doc__)
ap.add_argument("--seconds", type=float, default=10.0)
args = ap.parse_args()

big = {"prompt": "Once", "n_predict": 384, "n_cmpl": 16, "n_probs": 100, "ignore_eos": True}
CASES = [
    ("none", None),
    ("grammar", ("/completion", {"prompt": "Once", "n_predict": 8,
                                 "grammar": "root ::= ([a-z]?){0,1000}"})),
    ("schema", ("/completion", {"prompt": "Once", "n_predict": 8, "json_schema": {
        "type": "string", "pattern": "^([a-z]?){0,1000}$"}})),
    ("answer 384", ("/completion", big)),
    ("answer max", ("/completion", dict(big, n_predict=4096))),
]



def run_case(name, attack):
    S = Server(args.recur, args.model, "-np", "17", "--timeout", "3600", "--max-tokens", "1000000")
    stop = threading.Event()
    res = {"status": "-", "ms": float("nan")}
    gaps = []
    last = [None]  # the stream's last event: a stream that stalls counts until the end

    def attacker():
        t0 = time.time()
        try:
            c = http.client.HTTPConnection("127.0.0.1", S.port, timeout=args.seconds + 5)
            c.request("POST", attack[0], body=json.dumps(attack[1]).encode())
            r = c.getresponse()
            r.read()
            res["status"] = r.status
            res["ms"] = 1e3 * (time.time() - t0)
        except (OSError, http.client.HTTPException):
            res["status"] = "still running"
            res["ms"] = 1e3 * (time.time() - t0)

    def streamer():
        c = http.client.HTTPConnection("127.0.0.1", S.port, timeout=args.seconds + 30)
        c.request("POST", "/completion", body=json.dumps(
            {"prompt": "The", "n_predict": 1000000, "ignore_eos": True, "stream": True}).encode())
        r = c.getresponse()
        while not stop.is_set():
            line = r.fp.readline()
            if not line:
                break
            if line.startswith(b"data: "):
                now = time.time()
                if last[0] is not None:
                    gaps.append(now - last[0])
                last[0] = now
        c.close()

    st = threading.Thread(target=streamer, daemon=True)
    st.start()
    time.sleep(0.5)  # the stream is running before the attack (a bench, not a test)
    at = threading.Thread(target=attacker, daemon=True) if attack else None
    if at:
        at.start()
    lat = []
    end = time.time() + args.seconds
    while time.time() < end:
        t0 = time.time()
        try:
            S.request("GET", "/health", timeout=args.seconds)
            lat.append(time.time() - t0)
        except OSError:
            lat.append(time.time() - t0)
        time.sleep(0.01)
    stop.set()
    if last[0] is not None:
        gaps.append(time.time() - last[0])
    S.proc.kill()
    S.proc.wait()
    if at:
        at.join(6)
    print("| %s | %.1f | %.1f | %.1f | %.0f | %s | %.0f |" % (
        name, 1e3 * pct(lat, 50), 1e3 * pct(lat, 99), 1e3 * max(lat), 1e3 * max(gaps or [0]),
        res["status"], res["ms"]), flush=True)


print("| case | /health p50 | p99 | max | stream's longest gap | attack status | attack ms |")
print("|---|---|---|---|---|---|---|")
for name, attack in CASES:
    run_case(name, attack)
