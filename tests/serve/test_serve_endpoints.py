#!/usr/bin/env python3
"""recur serve's llama-server endpoints, headers and flags (python3 standard library only).

    test_serve_endpoints.py RECUR_BIN MODEL

Checks: the dispatch (CORS headers on answers and errors, OPTIONS before the API key,
Authorization: Bearer and X-Api-Key, 401/404/405 with Allow), GET /v1/models and /models (with
and without --alias), /props, /slots and --no-slots (501), POST /slots/{id}?action=save|restore|
erase (a saved conversation restored in a restarted server is reused, with the greedy output of
a fresh server; file names that escape the directory, a missing file, a bad action or id, a
busy slot; a save onto a folder or a symbolic link refused with no server path in the error; a
255-byte name), the llama-server metric names, /tokenize with_pieces / add_special and
/detokenize round trips, -n (a request's default length), -c (a sequence's token budget),
--host ::1 and two hosts, the flag errors at start, the web page's files (/ and /webui/: types,
safe headers, HEAD, open without the API key while the API still asks for it, --no-webui), and
the --cors-* flags (localhost by default with --slot-save-path, lists, credentials, preflights).
"""

import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

RECUR, MODEL = sys.argv[1:3]
from serve_util import check, counts, wait_for
import serve_util


def Server(*args):
    return serve_util.Server(RECUR, MODEL, *args)


tmp = tempfile.mkdtemp(prefix="recur-slots-")
slot_dir = os.path.join(tmp, "slots")
os.mkdir(slot_dir)

# ---- flags refused at start ---------------------------------------------------------------
help_text = subprocess.run([RECUR, "serve", "--help"], capture_output=True, text=True).stdout
for flag in ("--n-predict", "--ctx-size", "--alias", "--no-slots", "--slot-save-path",
             "--chat-template", "--host", "--api-key", "--no-webui"):
    check("serve --help lists " + flag, flag in help_text, help_text)
a_file = os.path.join(tmp, "a_file")
open(a_file, "w").close()
for args, want in ((["--slot-save-path", os.path.join(tmp, "missing")], "missing"),
                   (["--slot-save-path", a_file], "not a directory"),
                   (["-n", "100", "--max-tokens", "50"], "--max-tokens"),
                   (["--host", "not-an-address"], "not an IPv4 or IPv6 address"),
                   (["-c", "-3"], "-c"),
                   (["-np", "8", "-b", "4", "-ub", "4"], "--batch-size 4 is less than --parallel 8"),
                   (["-b", "8", "-ub", "8"], "--batch-size 8 is less than --parallel 16"),
                   (["--chat-template", "nosuch"],
                    'chat template "nosuch" is not supported: neither a builtin name')):
    p = subprocess.run([RECUR, "serve", "-m", MODEL, "--port", "0"] + args, capture_output=True,
                       text=True, timeout=60)
    check("start refused: %s" % " ".join(args), p.returncode == 2 and want in p.stderr,
          (p.returncode, p.stderr[-300:]))

# ---- server A: --alias, -n, two hosts, a slot directory -------------------------------------
ipv6 = True
try:
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
        probe.bind(("::1", 0))
except OSError as e:
    ipv6 = False
    # the rest runs; the run then exits 77 (a skip), never 0
    serve_util.skip("--host ::1", "no IPv6 loopback here: %s" % e)
hosts = ["--host", "127.0.0.1"] + (["--host", "::1"] if ipv6 else [])
A = Server("-np", "2", "--alias", "my-model", "-n", "5", "--slot-save-path", slot_dir, *hosts)

st, body, resp = A.request("GET", "/v1/models")
check("/v1/models", st == 200 and body["object"] == "list" and len(body["data"]) == 1, body)
m = body["data"][0] if st == 200 else {}
check("/v1/models: the alias, OpenAI's fields",
      m.get("id") == "my-model" and m.get("object") == "model" and
      isinstance(m.get("created"), int) and m.get("owned_by") == "recur", m)
check("/v1/models meta", m.get("meta", {}).get("architecture") == "mamba" and
      m["meta"]["n_vocab"] > 0 and m["meta"]["state_bytes"] > 0, m)
st, body2, _ = A.request("GET", "/models")
check("/models is /v1/models", st == 200 and body2["data"][0]["id"] == "my-model", body2)
# A has --slot-save-path: CORS allows pages of localhost only (llama-server's default beside
# APIs that write files)
check("--slot-save-path: no CORS header without an Origin",
      resp.getheader("Access-Control-Allow-Origin") is None, resp.getheaders())
LOCAL = {"Origin": "http://localhost:5173"}
st, _, resp = A.request("GET", "/v1/models", headers=LOCAL)
check("--slot-save-path: a localhost Origin reflected with credentials",
      resp.getheader("Access-Control-Allow-Origin") == "http://localhost:5173" and
      resp.getheader("Access-Control-Allow-Credentials") == "true" and
      resp.getheader("Vary") == "Origin", resp.getheaders())
for origin in ("http://example.org", "http://localhost.example.org", "http://127.0.0.1.nip.io"):
    st, _, resp = A.request("GET", "/v1/models", headers={"Origin": origin})
    check("--slot-save-path: Origin %s is not allowed" % origin, st == 200 and
          resp.getheader("Access-Control-Allow-Origin") is None and
          resp.getheader("Access-Control-Allow-Credentials") is None, resp.getheaders())
for origin in ("https://127.0.0.1:8443", "http://[::1]:80", "http://LOCALHOST"):
    st, _, resp = A.request("GET", "/v1/models", headers={"Origin": origin})
    check("--slot-save-path: Origin %s is localhost" % origin,
          resp.getheader("Access-Control-Allow-Origin") == origin, resp.getheaders())

# 404, 405 with Allow, CORS on errors
st, body, resp = A.request("GET", "/no/such/thing", headers=LOCAL)
check("unknown path: 404", st == 404 and body["error"]["code"] == 404 and
      body["error"]["type"] == "not_found_error", body)
check("CORS header on an error",
      resp.getheader("Access-Control-Allow-Origin") == LOCAL["Origin"])
st, body, resp = A.request("GET", "/completion")
check("GET /completion: 405 with Allow: POST", st == 405 and resp.getheader("Allow") == "POST" and
      body["error"]["code"] == 405, (st, resp.getheaders()))
st, body, resp = A.request("POST", "/health", {})
check("POST /health: 405 with Allow: GET", st == 405 and resp.getheader("Allow") == "GET", st)
st, body, resp = A.request("DELETE", "/tokenize", headers=LOCAL)
check("DELETE /tokenize: 405", st == 405 and resp.getheader("Allow") == "POST", st)
check("405 carries CORS", resp.getheader("Access-Control-Allow-Origin") == LOCAL["Origin"])

# /props
st, props, _ = A.request("GET", "/props")
check("/props", st == 200, props)
dg = props.get("default_generation_settings", {}) if st == 200 else {}
params = dg.get("params", {})
check("/props default settings: -n and /completion's sampling defaults",
      params.get("n_predict") == 5 and abs(params.get("temperature", 0) - 0.8) < 1e-6 and
      params.get("top_k") == 40 and abs(params.get("top_p", 0) - 0.95) < 1e-6 and
      abs(params.get("min_p", 0) - 0.05) < 1e-6 and params.get("stop") == [] and
      "seed" in params, params)
check("/props slots, model, build", props.get("total_slots") == 2 and
      props.get("model_path") == MODEL and props.get("build_info", "").startswith("recur ") and
      props.get("is_sleeping") is False, props)
# the shipped model has no template: the default, chatml, is the one in use
check("/props chat template: the default", props.get("chat_template") == "chatml" and
      props.get("chat_template_name") == "chatml", props)
r = props.get("recur", {})
check("/props recur's own", r.get("architecture") == "mamba" and r.get("n_vocab", 0) > 0 and
      r.get("state_bytes_per_sequence", 0) > 0 and r.get("version"), r)
check("/props and /v1/models agree", r.get("n_vocab") == m.get("meta", {}).get("n_vocab") and
      r.get("state_bytes_per_sequence") == m.get("meta", {}).get("state_bytes"), (r, m))

# the web page: / and the files it names under /webui/, each with its type and safe headers
WEBUI_TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8",
               ".js": "text/javascript; charset=utf-8", ".svg": "image/svg+xml"}


def check_webui_file(srv, path, want_type, headers=None):
    st, body, resp = srv.request("GET", path, headers=headers)
    csp = resp.getheader("Content-Security-Policy") or ""
    check("GET %s: 200 %s" % (path, want_type), st == 200 and
          resp.getheader("Content-Type") == want_type, (st, resp.getheaders()))
    check("GET %s: nosniff, a CSP of 'self' only, no framing" % path,
          resp.getheader("X-Content-Type-Options") == "nosniff" and
          "default-src 'self'" in csp and "script-src 'self'" in csp and
          "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp and
          "unsafe-eval" not in csp and resp.getheader("X-Frame-Options") == "DENY",
          resp.getheaders())
    return body


page = check_webui_file(A, "/", WEBUI_TYPES[".html"])
page = page if isinstance(page, str) else ""
check("/ is the page", page.startswith("<!doctype html>") and "<title>recur</title>" in page,
      page[:200])
# every file the page names is served, from this origin only (no CDN)
refs = re.findall(r'(?:src|href)="([^"#]+)"', page)
check("the page names its script, style sheet and icon under /webui/",
      {"/webui/app.js", "/webui/style.css", "/webui/favicon.svg"} <= set(refs), refs)
check("the page loads nothing from another host", all(r.startswith("/") for r in refs), refs)
for ref in refs:
    check_webui_file(A, ref, WEBUI_TYPES[os.path.splitext(ref)[1]])
app_js = A.request("GET", "/webui/app.js")[1]
check("app.js imports markdown.js, which is served", "./markdown.js" in app_js)
check_webui_file(A, "/webui/markdown.js", WEBUI_TYPES[".js"])
check("the page's script sets no innerHTML (model output stays text)",
      "innerHTML" not in app_js and "innerHTML" not in A.request("GET", "/webui/markdown.js")[1])
st, body, resp = A.request("HEAD", "/")
check("HEAD /: 200, the page's type and length, no body",
      st == 200 and body == "" and resp.getheader("Content-Type") == WEBUI_TYPES[".html"] and
      resp.getheader("Content-Length") == str(len(page.encode())), (st, resp.getheaders()))
for missing in ("/webui/nosuch.js", "/webui/", "/webui/index.html", "/index.html",
                "/webui/../serve.c"):
    st, body, _ = A.request("GET", missing)
    check("GET %s: 404" % missing, st == 404 and body["error"]["code"] == 404, (st, body))
st, body, resp = A.request("POST", "/", {})
check("POST /: 405 with Allow: GET", st == 405 and resp.getheader("Allow") == "GET", st)

# -n: the default length of a request that names none (not a cap)
st, b, _ = A.post("/completion", {"prompt": "The sea", "temperature": 0, "ignore_eos": True})
check("-n 5: /completion without n_predict makes 5", st == 200 and b["tokens_predicted"] == 5, b)
st, b, _ = A.post("/completion", {"prompt": "The sea", "temperature": 0, "ignore_eos": True,
                                  "n_predict": 9})
check("-n is not a cap: n_predict 9 makes 9", st == 200 and b["tokens_predicted"] == 9, b)
st, b, _ = A.post("/v1/completions", {"prompt": "The sea", "temperature": 0})
check("-n 5: /v1/completions without max_tokens makes at most 5",
      st == 200 and 0 < b["usage"]["completion_tokens"] <= 5 and
      (b["usage"]["completion_tokens"] == 5 or b["choices"][0]["finish_reason"] == "stop"), b)

# /tokenize and /detokenize
ROUND = ["France ?", "Hello world", " leading space", "  two leading", "a , b ! c . d ?",
         "don 't stop", "trailing space ", "tab\tand\nnewline", "h\u00e9llo w\u00f6rld \u2713",
         "\u65e5\u672c\u8a9e \U0001f999!", "x ' y", "(paren ) [ bracket ]"]
for text in ROUND:
    st, tok, _ = A.post("/tokenize", {"content": text})
    st2, det, _ = A.post("/detokenize", {"tokens": tok.get("tokens", [])})
    check("detokenize(tokenize(%r)) round trips" % text,
          st == 200 and st2 == 200 and det["content"] == text, (tok, det))
st, tok, _ = A.post("/tokenize", {"content": "France ?", "with_pieces": True})
pieces = tok.get("tokens", [])
check("with_pieces: ids and string pieces", st == 200 and all(
    isinstance(p, dict) and isinstance(p["id"], int) and isinstance(p["piece"], str)
    for p in pieces) and "".join(p["piece"] for p in pieces) == "France ?", tok)
st, plain, _ = A.post("/tokenize", {"content": "France ?"})
check("with_pieces has the same ids", [p["id"] for p in pieces] == plain.get("tokens"), plain)
# a character split over tokens: its pieces are not UTF-8 alone and come as byte lists
text = "\U0001f999 \U0001d538"
st, tok, _ = A.post("/tokenize", {"content": text, "with_pieces": True})
raw = b""
byte_lists = 0
for p in tok.get("tokens", []):
    if isinstance(p["piece"], list):
        byte_lists += 1
        check("byte pieces are bytes", all(isinstance(x, int) and 0 <= x < 256 for x in p["piece"]))
        raw += bytes(p["piece"])
    else:
        raw += p["piece"].encode()
check("pieces of split characters are byte lists", st == 200 and byte_lists > 0, tok)
check("the pieces' bytes are the text", raw == text.encode(), (raw, text.encode()))
st, b1, _ = A.post("/tokenize", {"content": "Hi", "add_special": True})
st2, b2, _ = A.post("/tokenize", {"content": "Hi", "add_special": False})
check("add_special is accepted (this vocabulary adds nothing)", st == 200 and st2 == 200 and
      b1["tokens"] == b2["tokens"], (b1, b2))
st, b, _ = A.post("/tokenize", {"content": "Hi", "add_special": "yes"})
check("add_special of the wrong type: 400", st == 400 and "add_special" in b["error"]["message"], b)
st, b, _ = A.post("/tokenize", {"content": "Hi", "frobnicate": 1})
check("tokenize: an unknown field is refused, named", st == 400 and
      "frobnicate" in b["error"]["message"], b)
st, b, _ = A.post("/detokenize", {"tokens": [1, 2], "skip_special": True})
check("detokenize: an unknown field is refused, named", st == 400 and
      "skip_special" in b["error"]["message"], b)

# /slots: idle slots, then the conversation a slot keeps
st, slots, _ = A.request("GET", "/slots")
check("/slots: one object per slot", st == 200 and [s["id"] for s in slots] == [0, 1] and
      all("n_ctx" in s and "id_task" in s and s["is_processing"] is False and "params" in s and
          "next_token" in s for s in slots), slots)
st, tok, _ = A.post("/tokenize", {"content": "Once upon a time there was a little dog who lived "
                                             "by the sea, and every morning he ran along the "
                                             "shore to greet the fishermen"})
conv = tok["tokens"]
st, b, _ = A.post("/completion", {"prompt": conv, "n_predict": 1, "temperature": 0})
check("conversation", st == 200, b)
st, slots, _ = A.request("GET", "/slots")
kept = [s for s in slots if s.get("n_tokens_cached") == len(conv)]
check("/slots: the slot keeps its conversation's tokens", len(kept) == 1, slots)
slot_id = kept[0]["id"] if kept else 0
check("/slots: its prompt text", kept and kept[0]["prompt"].startswith("Once upon a time"), slots)

st, b, _ = A.post("/slots/%d?action=save" % slot_id, {"filename": "conv.bin"})
check("save", st == 200 and b["id_slot"] == slot_id and b["filename"] == "conv.bin" and
      b["n_saved"] == len(conv) and b["n_written"] > 0 and "save_ms" in b["timings"], b)
check("the file is in the slot directory", os.path.getsize(os.path.join(slot_dir, "conv.bin")) ==
      b.get("n_written"))
for bad in ("../escape.bin", "a/b.bin", "", ".hidden", "x" * 300, "a\\b", "nul\u0000.bin",
            "tab\t.bin", 5, None):
    st, b, _ = A.post("/slots/%d?action=save" % slot_id, {"filename": bad})
    check("save refuses filename %r" % (bad,), st == 400 and b["error"]["type"] ==
          "invalid_request_error", b)
check("nothing escaped the directory", sorted(os.listdir(tmp)) == ["a_file", "slots"] and
      sorted(os.listdir(slot_dir)) == ["conv.bin"], (os.listdir(tmp), os.listdir(slot_dir)))
st, b, _ = A.post("/slots/%d?action=restore" % slot_id, {"filename": "missing.bin"})
check("restore of a missing file: 400", st == 400 and "missing.bin" in b["error"]["message"] and
      slot_dir not in b["error"]["message"], b)
st, slots, _ = A.request("GET", "/slots")
check("a failed restore leaves the slot as it was", slots[slot_id]["n_tokens_cached"] == len(conv),
      slots)
with open(os.path.join(slot_dir, "junk.bin"), "wb") as f:
    f.write(b"not a state file at all" * 10)
st, b, _ = A.post("/slots/%d?action=restore" % (1 - slot_id), {"filename": "junk.bin"})
check("restore of a corrupt file: 400", st == 400 and "junk.bin" in b["error"]["message"], b)
st, slots, _ = A.request("GET", "/slots")
check("the failed slot holds nothing, the other keeps its conversation",
      slots[1 - slot_id]["n_tokens_cached"] == 0 and
      slots[slot_id]["n_tokens_cached"] == len(conv), slots)
os.remove(os.path.join(slot_dir, "junk.bin"))
st, b, _ = A.post("/slots/0?action=launch", {"filename": "x.bin"})
check("bad action: 400", st == 400 and "action" in b["error"]["message"], b)
st, b, _ = A.post("/slots/0", {"filename": "x.bin"})
check("no action: 400", st == 400, b)
for bad_id in ("7", "-1", "x", "1x", ""):
    st, b, _ = A.post("/slots/%s?action=erase" % bad_id, {})
    check("bad slot id %r: 400" % bad_id, st == 400, b)
st, b, _ = A.post("/slots/0?action=save", {"filename": "x.bin", "extra": 1})
check("slot action: an unknown field is refused", st == 400 and "extra" in b["error"]["message"], b)
st, b, _ = A.post("/slots/%d?action=erase" % slot_id, None)
check("erase", st == 200 and b == {"id_slot": slot_id, "n_erased": len(conv)}, b)
st, slots, _ = A.request("GET", "/slots")
check("erased: the slot holds nothing", slots[slot_id]["n_tokens_cached"] == 0, slots)
st, b, _ = A.post("/slots/%d?action=save" % slot_id, {"filename": "empty.bin"})
check("save of an empty slot: 400", st == 400, b)
st, b, _ = A.post("/completion", {"prompt": "After a bad restore", "n_predict": 2})
check("the server goes on after the bad actions", st == 200 and b["tokens_predicted"] >= 1, b)

# the llama-server metric names beside recur's
st, text, _ = A.request("GET", "/metrics")
for name in ("prompt_tokens_total", "prompt_seconds_total", "tokens_predicted_total",
             "tokens_predicted_seconds_total", "prompt_tokens_seconds",
             "predicted_tokens_seconds", "requests_processing", "requests_deferred",
             "n_tokens_max", "n_decode_total", "n_busy_slots_per_decode"):
    check("metric llamacpp:" + name, re.search(r"^# TYPE llamacpp:%s (counter|gauge)\n"
                                              r"llamacpp:%s [0-9.e+-]+$" % (name, name), text,
                                              re.M) is not None)
vals = {k: float(v) for k, v in re.findall(r"^(llamacpp:\w+) (\S+)$", text, re.M)}
gen = A.metrics()
check("llamacpp:tokens_predicted_total counts the generated tokens",
      vals.get("llamacpp:tokens_predicted_total") == gen.get("recur_tokens_generated_total") and
      vals.get("llamacpp:tokens_predicted_total", 0) >= 5 + 9 + 1, vals)
check("llamacpp:n_decode_total counts decodes",
      vals.get("llamacpp:n_decode_total") == gen.get("recur_decode_steps_total") and
      vals.get("llamacpp:n_decode_total", 0) > 0, vals)
check("llamacpp:n_tokens_max: the longest sequence", vals.get("llamacpp:n_tokens_max", 0) >=
      len(conv) + 1, vals)
check("recur_ metrics are still there", "recur_requests_total" in gen, gen)

# two hosts: the same port on ::1
if ipv6:
    c = http.client.HTTPConnection("::1", A.port, timeout=30)
    c.request("GET", "/health")
    r6 = c.getresponse()
    check("the second --host (::1) answers on the same port", r6.status == 200 and
          json.loads(r6.read()) == {"status": "ok"})
    c.close()
check("A stops", A.stop() == 0)

# ---- a restarted server restores the conversation --------------------------------------------
B = Server("-np", "2", "--slot-save-path", slot_dir)
st, tail, _ = B.post("/tokenize", {"content": " and then he went home to sleep"})
extended = conv + tail["tokens"]
st, b, _ = B.post("/slots/1?action=restore", {"filename": "conv.bin"})
check("restore in a restarted server", st == 200 and b["id_slot"] == 1 and
      b["filename"] == "conv.bin" and b["n_restored"] == len(conv) and b["n_read"] > 0 and
      "restore_ms" in b["timings"], b)
st, slots, _ = B.request("GET", "/slots")
check("/slots: the restored slot holds the tokens", slots[1]["n_tokens_cached"] == len(conv), slots)
st, warm, _ = B.post("/completion", {"prompt": extended, "n_predict": 16, "temperature": 0})
check("a prompt extending the restored tokens reuses them",
      st == 200 and warm["tokens_cached"] == len(conv), warm)
st, warm_oai, _ = B.post("/v1/completions", {"prompt": extended, "max_tokens": 16,
                                             "temperature": 0})
check("... and on /v1/completions (cached_tokens)", st == 200 and
      warm_oai["usage"]["prompt_tokens_details"]["cached_tokens"] >= len(conv), warm_oai)
check("B stops", B.stop() == 0)

# ---- a fresh server: the same greedy text; a busy slot ------------------------------------
C = Server("-np", "1", "--slot-save-path", slot_dir, "--no-webui", "--max-tokens", "100000")
for path in ("/", "/webui/app.js", "/webui/style.css"):
    st, body, _ = C.request("GET", path)
    check("--no-webui: GET %s is a 404" % path, st == 404 and body["error"]["code"] == 404,
          (st, body))
st, cold, _ = C.post("/completion", {"prompt": extended, "n_predict": 16, "temperature": 0})
check("a fresh server decodes it all", st == 200 and cold["tokens_cached"] == 0, cold)
check("restored state, same greedy text as a fresh server",
      cold.get("content") == warm.get("content") and warm.get("tokens_predicted") == 16,
      (cold, warm))
check("... on /v1/completions too", warm_oai["choices"][0]["text"] == cold.get("content"),
      (warm_oai, cold))
# a long streamed request holds the only slot while the action is asked (50,000 tokens: some
# 40 s of this model, so that it still runs through the checks on a loaded machine)
conn = http.client.HTTPConnection("127.0.0.1", C.port, timeout=60)
conn.request("POST", "/completion", body=json.dumps(
    {"prompt": "The", "n_predict": 50000, "ignore_eos": True, "stream": True}).encode())
stream = conn.getresponse()
stream.readline()  # the first event: the slot is decoding
st, slots, _ = C.request("GET", "/slots")
check("/slots: a busy slot is processing", slots[0]["is_processing"] is True and
      slots[0]["next_token"]["n_decoded"] > 0 and slots[0]["params"]["n_predict"] == 50000, slots)
st, b, _ = C.request("GET", "/slots?fail_on_no_slot=1")
check("/slots?fail_on_no_slot=1 with every slot busy: 503", st == 503, b)
st, b, resp = C.post("/slots/0?action=save", {"filename": "busy.bin"})
check("save of a busy slot: 503", st == 503 and "busy" in b["error"]["message"] and
      resp.getheader("Retry-After") is not None, b)
st, b, _ = C.post("/slots/0?action=erase", {})
check("erase of a busy slot: 503", st == 503, b)
conn.close()
check("the slot frees when the client leaves",
      wait_for(lambda: C.request("GET", "/slots")[1][0]["is_processing"] is False))
st, b, _ = C.request("GET", "/slots?fail_on_no_slot=1")
check("/slots?fail_on_no_slot=1 with a free slot: 200", st == 200 and len(b) == 1, b)
check("busy.bin was not written", not os.path.exists(os.path.join(slot_dir, "busy.bin")))
check("C stops", C.stop() == 0)

# ---- an API key, --no-slots, -c, no slot directory -----------------------------------------
K = Server("-np", "1", "--api-key", "sekret", "--no-slots", "-c", "32")
st, body, resp = K.request("OPTIONS", "/v1/completions",
                           headers={"Origin": "http://app.example",
                                    "Access-Control-Request-Method": "POST",
                                    "Access-Control-Request-Headers": "authorization, content-type"})
check("OPTIONS needs no key", st == 200, (st, body))
check("OPTIONS: the preflight headers",
      "POST" in (resp.getheader("Access-Control-Allow-Methods") or "") and
      "authorization" in (resp.getheader("Access-Control-Allow-Headers") or "").lower() and
      resp.getheader("Access-Control-Allow-Origin") == "http://app.example", resp.getheaders())
st, body, resp = K.request("GET", "/props")
check("no key: 401", st == 401 and body["error"]["type"] == "authentication_error" and
      body["error"]["code"] == 401, body)
check("401 carries CORS", resp.getheader("Access-Control-Allow-Origin") == "*")
st, body, _ = K.request("GET", "/props", headers={"Authorization": "Bearer wrong"})
check("a wrong Bearer key: 401", st == 401, body)
st, body, _ = K.request("GET", "/props", headers={"X-Api-Key": "wrong"})
check("a wrong X-Api-Key: 401", st == 401, body)
st, body, _ = K.request("GET", "/props", headers={"Authorization": "Bearer sekret"})
check("Bearer key: 200", st == 200, body)
st, body, _ = K.request("GET", "/props", headers={"X-Api-Key": "sekret"})
check("X-Api-Key: 200", st == 200 and body["default_generation_settings"]["params"]["n_predict"]
      == -1 and body["recur"]["n_ctx"] == 32, body)
st, body, _ = K.request("GET", "/no/such")
check("unknown path without the key: 401 (as llama-server)", st == 401, body)
st, body, _ = K.request("GET", "/no/such", headers={"X-Api-Key": "sekret"})
check("unknown path with the key: 404", st == 404, body)
for path in ("/health", "/v1/health", "/v1/models", "/models"):
    st, body, _ = K.request("GET", path)
    check("%s needs no key" % path, st == 200, body)
# the page loads without the key (it asks for it, then sends it); the API behind it does not
check_webui_file(K, "/", WEBUI_TYPES[".html"])
check_webui_file(K, "/webui/app.js", WEBUI_TYPES[".js"])
st, body, _ = K.request("HEAD", "/")
check("HEAD / needs no key", st == 200, st)
for path, method in (("/props", "GET"), ("/v1/chat/completions", "POST"),
                     ("/completion", "POST"), ("/slots", "GET"), ("/apply-template", "POST"),
                     ("/v1/chat/completions/input_tokens", "POST")):
    st, body, _ = K.request(method, path, {} if method == "POST" else None)
    check("the page's API %s %s still needs the key: 401" % (method, path), st == 401, (st, body))
st, body, _ = K.request("GET", "/v1/models")
check("/v1/models without --alias: the model file's name",
      body["data"][0]["id"] == os.path.basename(MODEL), body)
key = {"X-Api-Key": "sekret"}
st, body, _ = K.request("GET", "/slots", headers=key)
check("--no-slots: /slots answers 501", st == 501 and
      body["error"]["type"] == "not_supported_error" and body["error"]["code"] == 501, body)
st, body, _ = K.request("POST", "/slots/0?action=save", {"filename": "x.bin"}, headers=key)
check("no --slot-save-path: save answers 501", st == 501 and
      body["error"]["type"] == "not_supported_error", body)
st, body, _ = K.request("POST", "/slots/0?action=restore", {"filename": "x.bin"}, headers=key)
check("no --slot-save-path: restore answers 501", st == 501, body)
st, body, _ = K.request("POST", "/slots/0?action=erase", None, headers=key)
check("erase needs no directory", st == 200 and body["n_erased"] == 0, body)
# -c 32: prompt + generated tokens of a sequence
st, tok, _ = K.request("POST", "/tokenize", {"content": "word " * 40}, headers=key)
st, body, _ = K.request("POST", "/completion", {"prompt": tok["tokens"][:32], "n_predict": 1},
                        headers=key)
check("-c 32: a prompt of 32 tokens is refused", st == 400 and "-c" in body["error"]["message"],
      body)
st, body, _ = K.request("POST", "/completion", {"prompt": tok["tokens"][:10], "n_predict": 100,
                                                "ignore_eos": True, "temperature": 0},
                        headers=key)
check("-c 32: generation stops at the budget", st == 200 and body["tokens_predicted"] == 22 and
      body["stop_type"] == "limit", body)
st, body, _ = K.request("POST", "/v1/completions", {"prompt": tok["tokens"][:31],
                                                    "max_tokens": 5}, headers=key)
check("-c 32: 31 + 1", st == 200 and body["usage"]["completion_tokens"] <= 1 and
      body["usage"]["total_tokens"] <= 32, body)
check("K stops", K.stop() == 0)

# ---- slot files: errors name no server path; the longest name ----------------------------------
# with an API key, so that the files lie in the key's folder (key-HASH), which must not show
sdir = os.path.join(tmp, "slots-keyed")
outside = os.path.join(tmp, "outside")
os.mkdir(sdir)
os.mkdir(outside)
D = Server("-np", "1", "--slot-save-path", sdir, "--api-key", "k1")
KEY = {"X-Api-Key": "k1"}
st, b, _ = D.post("/completion", {"prompt": "Once upon a time", "n_predict": 4,
                                  "temperature": 0}, headers=KEY)
check("D: a conversation", st == 200, b)
st, b, _ = D.post("/slots/0?action=save", {"filename": "first.bin"}, headers=KEY)
check("D: saved into the key's folder", st == 200, b)
key_dirs = os.listdir(sdir)
kdir = os.path.join(sdir, key_dirs[0]) if len(key_dirs) == 1 else sdir
os.mkdir(os.path.join(kdir, "a-folder"))
with open(os.path.join(outside, "victim.txt"), "w") as f:
    f.write("untouched")
os.symlink(outside, os.path.join(kdir, "link-to-folder"))
os.symlink(os.path.join(outside, "victim.txt"), os.path.join(kdir, "link-to-file"))
os.symlink(os.path.join(outside, "nothing-yet"), os.path.join(kdir, "link-dangling"))


def no_server_path(msg):
    return (sdir not in msg and tmp not in msg and outside not in msg and "key-" not in msg and
            ".recur.tmp" not in msg and "/" not in msg)


for name in ("a-folder", "link-to-folder", "link-to-file", "link-dangling"):
    st, b, _ = D.post("/slots/0?action=save", {"filename": name}, headers=KEY)
    msg = b["error"]["message"] if st != 200 and isinstance(b, dict) else ""
    check("save onto %s: refused, naming the file and no server path" % name,
          st == 400 and name in msg and no_server_path(msg), (st, b))
with open(os.path.join(outside, "victim.txt"), "rb") as f:
    check("save onto a link: its target is untouched", f.read() == b"untouched")
check("save onto a dangling link: nothing made outside", os.listdir(outside) == ["victim.txt"],
      os.listdir(outside))
for name in ("a-folder", "no-such.bin"):
    st, b, _ = D.post("/slots/0?action=restore", {"filename": name}, headers=KEY)
    msg = b["error"]["message"] if st != 200 and isinstance(b, dict) else ""
    check("restore of %s: refused, naming the file and no server path" % name,
          st == 400 and name in msg and no_server_path(msg), (st, b))
# the README allows 255 bytes: the file and its temporary file must both fit
longest = "n" * 251 + ".bin"
st, b, _ = D.post("/slots/0?action=save", {"filename": longest}, headers=KEY)
check("a 255-byte slot name saves", st == 200 and b.get("filename") == longest and
      os.path.exists(os.path.join(kdir, longest)), (st, b))
n_saved = b.get("n_saved") if st == 200 else None
st, b, _ = D.post("/slots/0?action=erase", {}, headers=KEY)
st, b, _ = D.post("/slots/0?action=restore", {"filename": longest}, headers=KEY)
check("a 255-byte slot name restores", st == 200 and b.get("n_restored") == n_saved and
      n_saved, (st, b, n_saved))
check("no temporary file is left", not [n for n in os.listdir(kdir) if ".tmp" in n],
      os.listdir(kdir))
check("D stops", D.stop() == 0)

# ---- CORS flags ---------------------------------------------------------------------------------
for flag in ("--cors-origins", "--cors-methods", "--cors-headers", "--cors-credentials",
             "--no-cors-credentials"):
    check("serve --help lists " + flag, flag in help_text, help_text)
for args, want in ((["--cors-origins", "http://a.example/path"], '"http://a.example/path" is not'),
                   (["--cors-origins", "*, http://a.example"], '"*" is not an origin'),
                   (["--cors-origins", "a.example"], '"a.example" is not an origin'),
                   (["--cors-origins", ""], "an empty item"),
                   (["--cors-methods", "GET,,POST"], "an empty item"),
                   (["--cors-methods", "GE T"], '"GE T" is not a method name'),
                   (["--cors-headers", "X-A:b"], '"X-A:b" is not a header name')):
    p = subprocess.run([RECUR, "serve", "-m", MODEL, "--port", "0"] + args, capture_output=True,
                       text=True, timeout=60)
    check("start refused: %s" % " ".join(args), p.returncode == 2 and want in p.stderr,
          (p.returncode, p.stderr[-300:]))


def cors(srv, origin, method="GET", path="/v1/models", extra=None):
    h = dict(extra or {})
    if origin:
        h["Origin"] = origin
    st, _, resp = srv.request(method, path, headers=h)
    return st, {k.lower(): v for k, v in resp.getheaders()}


# a list of origins, the preflight's methods and headers, no credentials
E = Server("-np", "1", "--cors-origins", "http://a.example, https://b.example:8443",
           "--cors-methods", "GET,POST", "--cors-headers", "Content-Type, X-Api-Key",
           "--no-cors-credentials")
for origin in ("http://a.example", "https://b.example:8443"):
    st, h = cors(E, origin)
    check("--cors-origins: %s echoed, no credentials" % origin,
          h.get("access-control-allow-origin") == origin and
          "access-control-allow-credentials" not in h and h.get("vary") == "Origin", h)
for origin in ("http://c.example", "http://a.example:8080", "https://a.example", None):
    st, h = cors(E, origin)
    check("--cors-origins: %s not allowed" % origin, st == 200 and
          "access-control-allow-origin" not in h, h)
pre = {"Access-Control-Request-Method": "POST",
       "Access-Control-Request-Headers": "content-type, x-other"}
st, h = cors(E, "http://a.example", "OPTIONS", "/v1/completions", pre)
check("preflight: --cors-methods and --cors-headers", st == 200 and
      h.get("access-control-allow-origin") == "http://a.example" and
      h.get("access-control-allow-methods") == "GET, POST" and
      h.get("access-control-allow-headers") == "Content-Type, X-Api-Key", h)
st, h = cors(E, "http://c.example", "OPTIONS", "/v1/completions", pre)
check("preflight of another origin: nothing allowed", "access-control-allow-origin" not in h and
      "access-control-allow-methods" not in h, h)
check("E stops", E.stop() == 0)

# a list with credentials (the default); --cors-origins * beside --slot-save-path; * without
# credentials
G = Server("-np", "1", "--cors-origins", "http://a.example")
st, h = cors(G, "http://a.example")
check("--cors-origins with credentials", h.get("access-control-allow-origin") == "http://a.example"
      and h.get("access-control-allow-credentials") == "true", h)
st, h = cors(G, "http://a.example", "OPTIONS", "/v1/completions", pre)
check("preflight: the default methods, the asked headers",
      h.get("access-control-allow-methods") == "GET, POST, DELETE, OPTIONS" and
      h.get("access-control-allow-headers") == "content-type, x-other", h)
check("G stops", G.stop() == 0)
G = Server("-np", "1", "--slot-save-path", slot_dir, "--cors-origins", "*")
st, h = cors(G, "http://example.org")
check("--cors-origins * beside --slot-save-path: any origin, echoed with credentials",
      h.get("access-control-allow-origin") == "http://example.org" and
      h.get("access-control-allow-credentials") == "true", h)
check("G stops", G.stop() == 0)
G = Server("-np", "1", "--no-cors-credentials", "--cors-credentials", "--no-cors-credentials")
st, h = cors(G, "http://example.org")
check("* without credentials: Access-Control-Allow-Origin: *, no credentials, no Vary",
      h.get("access-control-allow-origin") == "*" and
      "access-control-allow-credentials" not in h and "vary" not in h, h)
check("G stops", G.stop() == 0)

# ---- --host ::1 alone -------------------------------------------------------------------------
if ipv6:
    p = subprocess.Popen([RECUR, "serve", "-m", MODEL, "--port", "0", "-t", "1", "--host", "::1"],
                         stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()
    mm = re.search(r"listening on http://\[::1\]:(\d+)", line)
    check("--host ::1: the first line names it", mm is not None, line)
    if mm:
        c = http.client.HTTPConnection("::1", int(mm.group(1)), timeout=30)
        c.request("GET", "/health")
        check("--host ::1 answers", c.getresponse().status == 200)
        c.close()
        try:
            socket.create_connection(("127.0.0.1", int(mm.group(1))), timeout=2).close()
            check("--host ::1 does not listen on IPv4", False)
        except OSError:
            check("--host ::1 does not listen on IPv4", True)
    p.terminate()
    check("the ::1 server stops", p.wait(timeout=30) == 0)

shutil.rmtree(tmp)
print("test_serve_endpoints: %d passed, %d failed" % (counts["passed"], counts["failed"]))
sys.exit(counts.exit_status())
