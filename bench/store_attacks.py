#!/usr/bin/env python3
"""recur serve's latency while its prefix cache's second tier (tools/store/store.c) misbehaves, for
bench/RESULTS.md.

    python3 bench/store_attacks.py --recur build-test/tools/recur [--model M] [--seconds 10]

One server (-t 2, -np 2) per case. For --seconds, one client sends /completion requests whose
lookup reaches the store (a 10-token prefix, then two tokens of their own, so that the first
tier never holds them), one after the other, and another asks /health every 10 ms. Cases:

- "folder": a folder tier whose entries are good; "fifo": its entry for the prefix is a FIFO;
  "1 GiB": a sparse 1 GiB file;
- "redis": a fake Redis (tests/serve/fake_redis.py) that answers at once; "drip": one that
  drips every lookup's reply one byte every 40 ms; "huge": one that answers every lookup with
  the header of an array of two billion members.

Prints a Markdown table: /health p50 and p99, the requests' count, p50 and longest (ms). A
request still waiting when the time is up counts as its time so far.
"""

import os
import shutil
import statistics
import tempfile
import threading
import time

from bench_util import parser, pct  # noqa: E402 (and the tests' helpers on the path)
from fake_redis import FakeRedis  # noqa: E402
from serve_util import Server, spoil_entries  # noqa: E402

ap = parser(__doc__)
ap.add_argument("--seconds", type=float, default=10.0)
args = ap.parse_args()

PREFIX = list(range(300, 310))



def folder_tier(kind, tmp):
    """A folder holding the entries of PREFIX (written by a server of its own), each replaced
    by a FIFO or a sparse 1 GiB file unless kind is "folder"."""
    d = os.path.join(tmp, kind.replace(" ", ""))
    W = Server(args.recur, args.model, "--prefix-cache-store", d)
    W.post("/completion", {"prompt": PREFIX + [299], "n_predict": 1, "temperature": 0})
    W.stop()  # its writes are flushed
    if kind != "folder":
        spoil_entries(d, kind)
    return d


def measure(url):
    S = Server(args.recur, args.model, "-np", "2", "--prefix-cache-store", url)
    S.post("/completion", {"prompt": [7, 8], "n_predict": 1, "cache_prompt": False})  # paged in
    stop = threading.Event()
    health, reqs, pending = [], [], {}

    def poll_health():
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                S.request("GET", "/health", timeout=30)
                health.append(time.perf_counter() - t0)
            except OSError:
                pass
            stop.wait(0.01)

    def send():
        k = 0
        while not stop.is_set():
            k += 1
            body = {"prompt": PREFIX + [1000 + k, 2000 + k], "n_predict": 1, "temperature": 0}
            t0 = pending["t0"] = time.perf_counter()
            try:
                S.post("/completion", body, timeout=args.seconds + 60)
            except OSError:
                return
            reqs.append(time.perf_counter() - t0)
            pending.pop("t0", None)

    threads = [threading.Thread(target=poll_health, daemon=True),
               threading.Thread(target=send, daemon=True)]
    for t in threads:
        t.start()
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        stop.wait(end - time.monotonic())
    stop.set()
    threads[0].join()
    t_end = time.perf_counter()
    if "t0" in pending:  # a request held past the end: its time so far
        reqs.append(t_end - pending["t0"])
    S.proc.kill()  # a server held by a FIFO does not stop
    S.proc.wait()
    return health, reqs


tmp = tempfile.mkdtemp(prefix="recur-store-attacks-")
print("| case | /health p50 | /health p99 | requests | request p50 | longest request |")
print("|---|---:|---:|---:|---:|---:|")
for case in ("folder", "fifo", "1 GiB", "redis", "drip", "huge"):
    fake = None
    if case in ("folder", "fifo", "1 GiB"):
        url = folder_tier(case, tmp)
    else:
        fake = FakeRedis(None if case == "redis" else case, always=True)
        url = fake.url
    health, reqs = measure(url)
    if fake:
        fake.close()
    print("| %s | %.2f | %.2f | %d | %.1f | %.1f |" %
          (case, 1e3 * statistics.median(health), 1e3 * pct(health, 99), len(reqs),
           1e3 * statistics.median(reqs) if reqs else float("nan"),
           1e3 * max(reqs) if reqs else float("nan")), flush=True)
shutil.rmtree(tmp, ignore_errors=True)
