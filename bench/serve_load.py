#!/usr/bin/env python3
"""A bounded load run of `recur serve` (python3 standard library only).

    bench/serve_load.py RECUR_BIN MODEL [THREADS]

Starts a server with 32 slots on a free loopback port, then for 1, 8 and 32 concurrent
clients sends a fixed number of /v1/completions requests (prompt of ~20 tokens, 32 tokens
generated at temperature 0.8 with a seed per request, prompt reuse off so every request does
the full work) and reports aggregate generated tokens/s and p50 / p99 latency. Then the time
to first token (first streamed chunk) of a ~1,000-token prompt sent twice: the first decodes
it all, the repeat restores it from the prefix cache. Prints a markdown table.
"""

import http.client
import json
import re
import signal
import subprocess
import sys
import threading
import time

RECUR, MODEL = sys.argv[1:3]
THREADS = sys.argv[3] if len(sys.argv) > 3 else "2"

proc = subprocess.Popen([RECUR, "serve", "-m", MODEL, "--port", "0", "-t", THREADS, "-np", "32",
                         "--queue", "256"], stderr=subprocess.PIPE, text=True)
port = int(re.search(r":(\d+) \(", proc.stderr.readline()).group(1))


def post(body, stream=False):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.time()
    conn.request("POST", body.pop("_path", "/v1/completions"), body=json.dumps(body).encode())
    resp = conn.getresponse()
    if stream:
        first = None
        while True:
            line = resp.readline()
            if not line:
                break
            if line.startswith(b"data: ") and first is None:
                first = time.time() - t0
        conn.close()
        return first
    out = json.loads(resp.read())
    conn.close()
    return time.time() - t0, out


def load(clients, per_client):
    lat, tokens, lock = [], [0], threading.Lock()

    def client(i):
        for r in range(per_client):
            dt, out = post({"_path": "/completion", "prompt": "Request %d of client %d: once upon a "
                            "time, in a land far away, there lived" % (r, i), "n_predict": 32,
                            "temperature": 0.8, "seed": 1000 * i + r, "cache_prompt": False})
            with lock:
                lat.append(dt)
                tokens[0] += out["tokens_predicted"]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    lat.sort()
    return tokens[0] / wall, lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))], len(lat)


post({"prompt": "warm-up", "max_tokens": 4})
print("| concurrent clients | requests | generated tokens/s (all) | p50 latency | p99 latency |")
print("|---:|---:|---:|---:|---:|")
for clients, per in ((1, 8), (8, 4), (32, 2)):
    tps, p50, p99, n = load(clients, per)
    print("| %d | %d | %.1f | %.2f s | %.2f s |" % (clients, n, tps, p50, p99))
    sys.stdout.flush()

with open("models/heldout.txt") as f:
    long_prompt = f.read()[:3800]
cold = post({"prompt": long_prompt, "max_tokens": 1, "stream": True, "temperature": 0}, True)
warm = post({"prompt": long_prompt, "max_tokens": 1, "stream": True, "temperature": 0}, True)
_, tok = post({"_path": "/tokenize", "content": long_prompt})
print("\ntime to first token, a %d-token prompt: first %.1f ms, repeated %.1f ms (%.1fx)"
      % (len(tok["tokens"]), cold * 1e3, warm * 1e3, cold / warm))
proc.send_signal(signal.SIGTERM)
proc.wait(timeout=60)
