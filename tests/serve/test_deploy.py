#!/usr/bin/env python3
"""The deployment of deploy/: Redis, 3 replicas (-t 1 each) and nginx on loopback
(deploy/local.sh), 16 conversations of 8 turns each through nginx (greedy, about 100 tokens a
turn), and one replica killed with SIGKILL after the third turn.

- every turn of every conversation completes (a client may retry; nothing may be lost);
- every turn's text equals the same conversation run on a single server with the cache off;
- the turns that moved to another replica after the kill restore at least 90% of their
  history from Redis (cached_tokens), where a cold replica would restore nothing.

The kill comes once the victim's write queue is empty (recur_prefix_store_queued): writes are
behind the answers by design (the decode loop never waits on Redis), so a replica that dies
loses what it had not yet written, normally milliseconds of it; the test measures what Redis
holds, not how the kill lands against the writer thread.

Usage: test_deploy.py RECUR MODEL
"""

import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
from serve_util import Server, check, counts  # noqa: E402

recur, model = sys.argv[1], sys.argv[2]
local = os.path.join(here, "..", "..", "deploy", "local.sh")
N_CONV, N_TURNS, KILL_AFTER = 16, 8, 3
words = ("the sea the stars a road the mountain a small house the river an old friend the "
         "morning a letter the city a garden the winter").split()


def user_text(c, t):
    """About 50 tokens of a user's turn, different for every conversation and turn."""
    ws = [words[(c * 7 + t * 3 + k) % len(words)] for k in range(30)]
    return "Turn %d of talk %d. Tell me a fortune about %s." % (t, c, " ".join(ws))


def post(port, body, session, tries=6):
    """A chat completion; retried on errors (a replica may die under it). (answer, upstream,
    tries used) or (None, error, tries)."""
    last = None
    for k in range(tries):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            conn.request("POST", "/v1/chat/completions", body=json.dumps(body).encode(),
                         headers={"X-Session-Id": session, "Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            up = r.getheader("X-Recur-Upstream")
            conn.close()
            if r.status == 200:
                return json.loads(data), up, k + 1
            last = "%d %s" % (r.status, data[:200])
        except (OSError, http.client.HTTPException) as e:
            last = str(e)
        time.sleep(0.3)
    return None, last, tries


def metrics_of(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    return {ln.split()[0]: float(ln.split()[1]) for ln in text.splitlines()
            if ln.startswith("recur_") and len(ln.split()) == 2}


def body_of(messages):
    return {"messages": messages, "max_tokens": 48, "temperature": 0}


# ---- the reference: one server, no cache use ------------------------------------------------
print("reference: %d conversations x %d turns on one server, cache off" % (N_CONV, N_TURNS))
ref = {}
R = Server(recur, model, "-np", "4", threads=2)


def ref_conv(c):
    msgs = []
    for t in range(N_TURNS):
        msgs.append({"role": "user", "content": user_text(c, t)})
        b = dict(body_of(msgs), cache_prompt=False)
        st, ans, _ = R.post("/v1/chat/completions", b, timeout=300)
        if st != 200:
            ref[(c, t)] = None
            return
        text = ans["choices"][0]["message"]["content"]
        ref[(c, t)] = text
        msgs.append({"role": "assistant", "content": text})


ts = [threading.Thread(target=ref_conv, args=(c,)) for c in range(N_CONV)]
for t in ts:
    t.start()
for t in ts:
    t.join()
check("the reference ran", all(ref.get((c, t)) is not None for c in range(N_CONV)
                               for t in range(N_TURNS)))
R.stop()

# ---- the cluster ----------------------------------------------------------------------------
tmp = tempfile.mkdtemp(prefix="recur-deploy-")
env = dict(os.environ, RECUR=recur, RECUR_MODEL=model)
up = subprocess.run(["bash", local, "up", tmp, "3"], capture_output=True, text=True, env=env,
                    timeout=180)
check("deploy/local.sh up", up.returncode == 0, up.stderr)
if up.returncode != 0:
    print("test_deploy: %d passed, %d failed" % (counts["passed"], counts["failed"]))
    sys.exit(1)
nport = int(open(os.path.join(tmp, "nginx.port")).read())
replica_port = {}
for i in (1, 2, 3):
    replica_port[i] = int(open(os.path.join(tmp, "replica%d.port" % i)).read())
print("cluster: nginx on %d, replicas on %s" % (nport, sorted(replica_port.values())))

results = {}  # (c, t) -> (text, upstream, prompt_tokens, completion_tokens, cached, tries)
lock = threading.Lock()
barrier = threading.Barrier(N_CONV + 1)
killed = {}


def conv(c):
    msgs = []
    for t in range(N_TURNS):
        if t == KILL_AFTER:
            barrier.wait()  # every conversation has done its first turns: the kill comes
            barrier.wait()  # the kill is done
        msgs.append({"role": "user", "content": user_text(c, t)})
        ans, upstream, tries = post(nport, body_of(msgs), "conv-%d" % c)
        if ans is None:
            with lock:
                results[(c, t)] = (None, upstream, 0, 0, 0, tries)
            return
        text = ans["choices"][0]["message"]["content"]
        u = ans["usage"]
        with lock:
            results[(c, t)] = (text, upstream, u["prompt_tokens"], u["completion_tokens"],
                               u.get("prompt_tokens_details", {}).get("cached_tokens", 0), tries)
        msgs.append({"role": "assistant", "content": text})


ts = [threading.Thread(target=conv, args=(c,)) for c in range(N_CONV)]
for t in ts:
    t.start()
barrier.wait()
# the replica that served the most conversations at the last turn before the kill
load = {}
for c in range(N_CONV):
    r = results.get((c, KILL_AFTER - 1))
    if r and r[1]:
        load[r[1]] = load.get(r[1], 0) + 1
victim_addr = max(load, key=load.get) if load else None
victim = [i for i, p in replica_port.items() if victim_addr and victim_addr.endswith(":%d" % p)]
if victim:
    t0, vm = time.time(), {}
    while time.time() - t0 < 30:
        vm = metrics_of(replica_port[victim[0]])
        if vm.get("recur_prefix_store_queued", -1) == 0:
            break
        time.sleep(0.02)
    print("the victim's writes: %d written, %d failed, %d dropped, %d waiting after %.2f s" %
          (vm.get("recur_prefix_store_writes_total", -1),
           vm.get("recur_prefix_store_write_errors_total", -1),
           vm.get("recur_prefix_store_dropped_total", -1),
           vm.get("recur_prefix_store_queued", -1), time.time() - t0))
    check("the victim wrote everything it queued, none failed or dropped",
          vm.get("recur_prefix_store_queued", -1) == 0 and
          vm.get("recur_prefix_store_write_errors_total", -1) == 0 and
          vm.get("recur_prefix_store_dropped_total", -1) == 0, vm)
    pid = int(open(os.path.join(tmp, "replica%d.pid" % victim[0])).read())
    os.kill(pid, signal.SIGKILL)
    killed["addr"] = victim_addr
    print("killed replica %d (%s), which served %d conversations" %
          (victim[0], victim_addr, load[victim_addr]))
check("a replica was killed", bool(victim), load)
barrier.wait()
for t in ts:
    t.join(600)

complete = [k for k, v in results.items() if v[0] is not None]
check("every turn of every conversation completed", len(complete) == N_CONV * N_TURNS,
      (len(complete), [(k, v[1]) for k, v in results.items() if v[0] is None][:5]))
same = [k for k in complete if results[k][0] == ref.get(k)]
check("every turn's text equals the single server's without cache",
      len(same) == N_CONV * N_TURNS,
      [(k, results[k][0][:60], (ref.get(k) or "")[:60]) for k in complete if k not in same][:3])
moved, restored, worst = 0, 0, 1.0
for c in range(N_CONV):
    for t in range(KILL_AFTER, N_TURNS):
        cur, prev = results.get((c, t)), results.get((c, t - 1))
        if not cur or not prev or cur[0] is None or prev[0] is None:
            continue
        if cur[1] == prev[1] or prev[1] != killed.get("addr"):
            continue
        moved += 1
        hist = prev[2] + prev[3]  # the previous turn's prompt and reply
        frac = cur[4] / float(hist)
        worst = min(worst, frac)
        restored += frac >= 0.9
check("some turns moved to another replica", moved >= 1, moved)
check("the moved turns restore at least 90%% of their history from Redis (worst %.3f)" % worst,
      moved >= 1 and restored == moved, (moved, restored, worst))
retried = sum(1 for v in results.values() if v[5] > 1)
print("turns: %d, moved after the kill: %d (worst restore %.1f%% of history), retried by the "
      "client: %d" % (len(complete), moved, 100 * worst, retried))
# the survivors' metrics: their second-tier hits are the moved turns' restores
hits = 0
for i, p in replica_port.items():
    if victim and i == victim[0]:
        continue
    hits += int(metrics_of(p).get("recur_prefix_store_hits_total", 0))
check("the survivors count second-tier hits", hits >= moved, (hits, moved))
subprocess.run(["bash", local, "down", tmp], timeout=60)
print("test_deploy: %d passed, %d failed" % (counts["passed"], counts["failed"]))
sys.exit(counts.exit_status())
