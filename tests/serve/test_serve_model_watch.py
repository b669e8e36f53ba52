#!/usr/bin/env python3
"""recur serve's watch of its mapped model file compares bytes, not the clock (serve/conn.c):

- `touch model.gguf` (a new time, no byte changed) keeps the server serving, and it says so;
  it used to stop with "written in place" and cut off the requests in flight;
- the same bytes written again in place (dd conv=notrunc) keep it serving too;
- one byte changed in place, the size kept, still stops it (exit 1, a line naming the file),
  as does a write that changes the size (test_serve_hardening).

Usage: test_serve_model_watch.py RECUR MODEL
"""

import os
import shutil
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Server, check, counts, wait_for  # noqa: E402

recur, model = sys.argv[1], sys.argv[2]
tmp = tempfile.mkdtemp(prefix="recur-watch-")
live = os.path.join(tmp, "live.gguf")
shutil.copyfile(model, live)
S = Server(recur, live, "-np", "2")


def noted(n):
    """The server has said n times that the file was touched with its bytes unchanged."""
    return sum("bytes are the ones loaded" in line for line in S.log) >= n


# a stream runs across the touch: it must end whole
res = {}


def long_stream():
    res["st"], res["events"], res["done"] = S.stream(
        "/v1/completions", {"prompt": "Once", "max_tokens": 400, "ignore_eos": True,
                            "stream": True})


th = threading.Thread(target=long_stream)
th.start()
check("a stream is running", wait_for(lambda: S.metrics().get("recur_sequences_in_use") == 1))
st = os.stat(live)
os.utime(live, ns=(st.st_atime_ns + 7 * 10**9, st.st_mtime_ns + 7 * 10**9))  # touch
check("the touch is noticed and the bytes found unchanged", wait_for(lambda: noted(1), 30),
      S.log[-3:])
th.join(120)
check("the stream across the touch ended whole", res.get("st") == 200 and res.get("done"),
      (res.get("st"), res.get("done")))
check("still serving after the touch", S.proc.poll() is None and S.healthy())
st_code, b, _ = S.post("/completion", {"prompt": "Once", "n_predict": 4})
check("a completion after the touch", st_code == 200 and b.get("tokens_predicted") == 4, b)

# the same bytes written over themselves, in place
with open(model, "rb") as f:
    data = f.read()
with open(live, "r+b") as f:
    f.write(data)
st = os.stat(live)
os.utime(live, ns=(st.st_atime_ns, st.st_mtime_ns + 3 * 10**9))  # a time unlike the last
check("a rewrite of the same bytes is found unchanged", wait_for(lambda: noted(2), 30),
      S.log[-3:])
check("still serving after the rewrite", S.proc.poll() is None and S.healthy())

# one byte changed in place, in the last tensor's data, the size kept
with open(live, "r+b") as f:
    f.seek(-16, os.SEEK_END)
    b0 = f.read(1)
    f.seek(-16, os.SEEK_END)
    f.write(bytes([b0[0] ^ 0x5A]))
rc = S.proc.wait(timeout=60)
check("one byte changed in place: exit 1", rc == 1, rc)
check("a line naming the file and what happened",
      wait_for(lambda: any(live in l and "written in place" in l for l in S.log), 5), S.log[-3:])

shutil.rmtree(tmp, ignore_errors=True)
print("test_serve_model_watch: %d passed, %d failed" % (counts["passed"], counts["failed"]))
sys.exit(counts.exit_status())
