#!/usr/bin/env python3
"""OpenAI's Responses API (tools/serve/responses.c): POST /v1/responses whole and streamed,
/v1/responses/input_tokens, previous_response_id, GET and DELETE /v1/responses/{id} (python3
standard library only), then the openai npm package and the Vercel AI SDK as clients
(tests/serve/openai/responses.mjs).

    test_serve_responses.py RECUR_BIN MODEL

The shipped model is tiny and random-ish: the checks are of structure and consistency. Every
greedy answer must equal /v1/chat/completions' answer to the same messages (the chat endpoint
renders them itself: an independent check of the translation), and input_tokens must equal
/tokenize's count of the chat written out here in chatml (the model's template) by hand.
Checks: the response object's shape and usage; the streamed events (their order, each
`event:` line naming the data's type, sequence numbers, deltas concatenating to the text);
instructions and item lists with every role and part type; every refused field's message, and
the harmless ones changing nothing; previous_response_id over three turns, with the previous
prompt and answer restored from the prefix cache (cached_tokens), store: false, unknown ids,
another API key's ids; a bad request beside a running good one; a time-out in the middle of a
stream (response.failed).
"""

import http.client
import json
import os
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import serve_util  # noqa: E402
from serve_util import check, counts  # noqa: E402

RECUR, MODEL = sys.argv[1:3]
KEY, OTHER = "k-one", "k-two"
AUTH = {"Authorization": "Bearer " + KEY}
Q = "Tell me a fortune."

srv = serve_util.Server(RECUR, MODEL, "-np", "4", "--api-key", KEY, "--api-key", OTHER)


def post(path, body, key=KEY):
    return srv.post(path, body, headers={"Authorization": "Bearer " + key})


def responses(body, key=KEY):
    return post("/v1/responses", body, key)


def chat(messages, max_tokens):
    st, j, _ = post("/v1/chat/completions", {"messages": messages, "temperature": 0,
                                             "max_completion_tokens": max_tokens})
    assert st == 200, j
    return j["choices"][0]["message"]["content"], j["usage"]


def text_of(r):
    return "".join(p["text"] for o in r["output"] for p in o["content"])


def chatml(messages):
    """The chat in chatml, the shipped model's template, written here independently."""
    return "".join("<|im_start|>%s\n%s<|im_end|>\n" % (m["role"], m["content"])
                   for m in messages) + "<|im_start|>assistant\n"


def n_tokens(text):
    st, j, _ = post("/tokenize", {"content": text, "add_special": True, "parse_special": True})
    assert st == 200, j
    return len(j["tokens"])


def sse(body, key=KEY):
    """A streamed response's events [(event line, data)] and the status."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    conn.request("POST", "/v1/responses", body=json.dumps(body).encode(),
                 headers={"Authorization": "Bearer " + key})
    resp = conn.getresponse()
    raw = resp.read().decode()
    conn.close()
    out = []
    for block in raw.split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        ev = lines[0][len("event: "):] if lines[0].startswith("event: ") else None
        data = [json.loads(x[6:]) for x in lines if x.startswith("data: ")]
        out.append((ev, data[0] if len(data) == 1 else None))
    return resp.status, resp.getheader("Content-Type"), out


# ---- the whole answer ----------------------------------------------------------------------
st, r, _ = responses({"model": "any", "input": Q, "max_output_tokens": 20, "temperature": 0})
check("a string input: 200", st == 200, r)
check("the object", r.get("object") == "response" and r["id"].startswith("resp_") and
      isinstance(r["created_at"], (int, float)) and r["model"] and r["error"] is None, r)
out = r["output"]
check("one assistant message, one output_text part",
      len(out) == 1 and out[0]["type"] == "message" and out[0]["role"] == "assistant" and
      out[0]["id"].startswith("msg_") and len(out[0]["content"]) == 1 and
      out[0]["content"][0]["type"] == "output_text" and out[0]["content"][0]["annotations"] == [],
      out)
u = r["usage"]
check("usage adds up", u["total_tokens"] == u["input_tokens"] + u["output_tokens"] and
      u["output_tokens_details"] == {"reasoning_tokens": 0} and
      0 <= u["input_tokens_details"]["cached_tokens"] <= u["input_tokens"], u)
msgs = [{"role": "user", "content": Q}]
check("input_tokens: /tokenize's count of the chat in chatml",
      u["input_tokens"] == n_tokens(chatml(msgs)), (u, n_tokens(chatml(msgs))))
want, cu = chat(msgs, 20)
check("greedy text equals /v1/chat/completions'", text_of(r) == want, (text_of(r), want))
check("output_tokens equals chat's completion_tokens", u["output_tokens"] == cu["completion_tokens"])
limited = u["output_tokens"] == 20
check("status: incomplete (max_output_tokens) exactly when the length was reached",
      (r["status"] == "incomplete") == limited and out[0]["status"] == r["status"] and
      (r["incomplete_details"] == {"reason": "max_output_tokens"} if limited
       else r["incomplete_details"] is None), r)
check("the settings echoed", r["max_output_tokens"] == 20 and r["temperature"] == 0 and
      r["top_p"] == 1 and r["store"] is True and r["text"]["format"] == {"type": "text"} and
      r["tools"] == [] and r["instructions"] is None and r["previous_response_id"] is None and
      r["metadata"] == {} and r["truncation"] == "disabled", r)
check("no output_text field: the SDKs compute it", "output_text" not in r)

# a length the model's end of turn comes before: completed
st, long_r, _ = responses({"input": Q, "max_output_tokens": 400, "temperature": 0})
check("a long limit: completed or incomplete as the tokens say",
      st == 200 and (long_r["status"] == "completed") == (long_r["usage"]["output_tokens"] < 400)
      and (long_r["status"] != "completed" or long_r["completed_at"] >= long_r["created_at"]),
      long_r)

# ---- instructions and item lists ------------------------------------------------------------
items = [{"role": "user", "content": [{"type": "input_text", "text": "Hello."},
                                      {"type": "input_text", "text": " Again."}]},
         {"type": "message", "role": "assistant", "id": "msg_x", "status": "completed",
          "content": [{"type": "output_text", "text": "Hi.", "annotations": []}]},
         {"role": "developer", "content": "Be brief."},
         {"role": "system", "content": "Really brief."},
         {"role": "user", "content": Q}]
st, ri, _ = responses({"instructions": "You tell fortunes.", "input": items,
                       "max_output_tokens": 12, "temperature": 0})
as_chat = [{"role": "system", "content": "You tell fortunes."},
           {"role": "user", "content": "Hello. Again."}, {"role": "assistant", "content": "Hi."},
           {"role": "system", "content": "Be brief."}, {"role": "system", "content": "Really brief."},
           {"role": "user", "content": Q}]
want, cu = chat(as_chat, 12)
check("instructions + items: the text of chat's system + messages", st == 200 and
      text_of(ri) == want and ri["instructions"] == "You tell fortunes.", (ri, want))
check("instructions + items: input_tokens of the chatml text",
      ri["usage"]["input_tokens"] == n_tokens(chatml(as_chat)) == cu["prompt_tokens"], ri["usage"])
st, cnt, _ = post("/v1/responses/input_tokens", {"instructions": "You tell fortunes.",
                                                 "input": items})
check("/v1/responses/input_tokens: the same count",
      st == 200 and cnt == {"object": "response.input_tokens",
                            "input_tokens": ri["usage"]["input_tokens"]}, cnt)
st, cc, _ = post("/v1/chat/completions/input_tokens", {"messages": as_chat})
check("... and /v1/chat/completions/input_tokens' for the same messages",
      cc.get("input_tokens") == cnt.get("input_tokens"), cc)

# ---- streamed -------------------------------------------------------------------------------
body = {"input": Q, "max_output_tokens": 20, "temperature": 0, "stream": True}
st, ctype, evs = sse(body)
types = [d["type"] if d else None for _, d in evs]
check("streamed: 200, text/event-stream", st == 200 and ctype.startswith("text/event-stream"))
check("each event line names its data's type", all(e == (d or {}).get("type") for e, d in evs),
      evs[:3])
check("sequence numbers count up from 0",
      [d["sequence_number"] for _, d in evs] == list(range(len(evs))), types)
n_delta = types.count("response.output_text.delta")
final = "response.incomplete" if limited else "response.completed"
check("the events in OpenAI's order",
      types == ["response.created", "response.in_progress", "response.output_item.added",
                "response.content_part.added"] + ["response.output_text.delta"] * n_delta +
      ["response.output_text.done", "response.content_part.done", "response.output_item.done",
       final] and n_delta >= 1, types)
by = {}
for _, d in evs:
    by.setdefault(d["type"], d)
deltas = "".join(d["delta"] for _, d in evs if d["type"] == "response.output_text.delta")
done = by.get("response.output_text.done", {})
last = evs[-1][1]["response"]
check("deltas concatenate to the done text, the part, the item and the response's",
      deltas == done.get("text") == by["response.content_part.done"]["part"]["text"] ==
      by["response.output_item.done"]["item"]["content"][0]["text"] == text_of(last), deltas)
check("the streamed greedy text equals the whole answer's", deltas == text_of(r), deltas)
check("one id throughout", evs[0][1]["response"]["id"] == last["id"] and
      all(d.get("item_id", last["output"][0]["id"]) == last["output"][0]["id"] for _, d in evs))
check("created: in_progress, no output, usage null",
      evs[0][1]["response"]["status"] == "in_progress" and evs[0][1]["response"]["output"] == [] and
      evs[0][1]["response"]["usage"] is None)
check("the item added in progress and empty",
      by["response.output_item.added"]["item"]["status"] == "in_progress" and
      by["response.output_item.added"]["item"]["content"] == [])
check("the final response's usage equals the whole answer's", last["usage"]["output_tokens"] ==
      r["usage"]["output_tokens"] and last["usage"]["input_tokens"] == r["usage"]["input_tokens"])

# ---- refused and accepted fields -------------------------------------------------------------
refused = [
    ({"tools": [{"type": "web_search"}]}, "\"web_search\""),
    ({"tool_choice": "required"}, "\"tool_choice\""),
    ({"tool_choice": {"type": "function", "name": "f"}}, "\"tool_choice\""),
    ({"background": True}, "\"background\""),
    ({"conversation": "conv_1"}, "\"conversation\""),
    ({"prompt": {"id": "pmpt_1"}}, "\"prompt\""),
    ({"frobnicate": 1}, "unknown field \"frobnicate\""),
    ({"include": ["message.output_text.logprobs"]}, "message.output_text.logprobs"),
    ({"top_logprobs": 2}, "\"top_logprobs\""),
    ({"truncation": "auto"}, "\"truncation\""),
    ({"service_tier": "flex"}, "\"service_tier\""),
    ({"reasoning": {"effort": "extreme"}}, "\"reasoning\".effort"),
    ({"reasoning": {"budget": 3}}, "\"reasoning\".budget"),
    ({"text": {"format": {"type": "xml"}}}, "\"text\".format.type"),
    ({"text": {"format": {"type": "json_schema", "schema": {"type": "object"}}}},
     "\"text\".format.name"),
    ({"text": {"verbosity": "high"}}, "\"text\".verbosity"),
    ({"text": {"style": 1}}, "\"text\".style"),
    ({"max_output_tokens": 0}, "\"max_output_tokens\""),
    ({"max_output_tokens": 2.5}, "\"max_output_tokens\""),
    ({"temperature": 3}, "\"temperature\""),
    ({"instructions": 7}, "\"instructions\""),
    ({"store": "yes"}, "\"store\""),
    ({"metadata": {"a": 1}}, "\"metadata\".a"),
    ({"stream_options": {"x": 1}}, "\"stream_options\""),
    ({"previous_response_id": 5}, "\"previous_response_id\""),
    ({"input": None}, "\"input\" is required"),
    ({"input": []}, "\"input\""),
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]},
     "\"input\"[0].call_id \"c\""),
    ({"input": [{"role": "tool", "content": "x"}]}, "\"input\"[0].role"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "\"input_image\""),
    ({"input": [{"role": "user", "content": "x", "name": "bob"}]}, "\"input\"[0].name"),
    ({"input": [{"role": "user"}]}, "\"input\"[0].content"),
]
for patch, words in refused:
    b = {"input": Q, "max_output_tokens": 4}
    b.update(patch)
    st, j, _ = responses(b)
    msg = j.get("error", {}).get("message", "") if isinstance(j, dict) else ""
    check("refused %s: 400 naming it" % json.dumps(patch)[:70], st == 400 and words in msg,
          (st, j))
harmless = {"model": "gpt-x", "user": "u1", "safety_identifier": "s", "prompt_cache_key": "p",
            "prompt_cache_retention": "24h", "service_tier": "auto", "truncation": "disabled",
            "parallel_tool_calls": False, "tools": [], "tool_choice": "none",
            "reasoning": {"effort": "low", "summary": "auto"},
            "include": ["reasoning.encrypted_content"], "background": False,
            "metadata": {"k": "v"}, "store": True, "max_tool_calls": 3,
            "stream_options": {"include_obfuscation": True}, "top_logprobs": 0,
            "text": {"format": {"type": "text"}, "verbosity": "medium"}}
st, h, _ = responses(dict(harmless, input=Q, max_output_tokens=20, temperature=0))
check("the harmless fields together: the same greedy text", st == 200 and text_of(h) == text_of(r),
      h)
check("... echoed", st == 200 and h["metadata"] == {"k": "v"} and h["user"] == "u1" and
      h["reasoning"]["effort"] == "low" and h["tool_choice"] == "none" and
      h["parallel_tool_calls"] is False and h["service_tier"] == "auto", h)

# ---- structured output ----------------------------------------------------------------------
# json_object: the tiny model rambles inside a key, past any length, so the check is that the
# grammar is chat's response_format's: the same greedy text, starting an object
st, jo, _ = responses({"input": "JSON please.", "max_output_tokens": 40, "temperature": 0,
                       "text": {"format": {"type": "json_object"}}})
st2, cj, _ = post("/v1/chat/completions", {"messages": [{"role": "user", "content": "JSON please."}],
                                           "max_tokens": 40, "temperature": 0,
                                           "response_format": {"type": "json_object"}})
check("json_object: chat's response_format json_object text, an object's start",
      st == 200 and st2 == 200 and text_of(jo) == cj["choices"][0]["message"]["content"] and
      text_of(jo).startswith("{"), (jo, cj))
schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
          "additionalProperties": False}
st, js, _ = responses({"input": "A number.", "max_output_tokens": 200, "temperature": 0,
                       "text": {"format": {"type": "json_schema", "name": "num",
                                           "schema": schema, "strict": True}}})
try:
    parsed = json.loads(text_of(js))
except ValueError:
    parsed = None
check("json_schema: the text follows the schema", st == 200 and isinstance(parsed, dict) and
      list(parsed) == ["n"] and isinstance(parsed["n"], int), js)
check("json_schema: the format echoed", js["text"]["format"]["name"] == "num", js["text"])

# ---- previous_response_id ---------------------------------------------------------------------
turns = ["Tell me a fortune.", "Another one.", "A last one."]
conv, prev, prev_total = [], None, 0
for k, text in enumerate(turns):
    b = {"input": text, "max_output_tokens": 12, "temperature": 0, "instructions": "Be wise."}
    if prev:
        b["previous_response_id"] = prev["id"]
    st, t, _ = responses(b)
    conv.append({"role": "user", "content": text})
    want, cu = chat([{"role": "system", "content": "Be wise."}] + conv, 12)
    check("turn %d: the text of chat over the whole conversation" % (k + 1),
          st == 200 and text_of(t) == want and t["usage"]["input_tokens"] == cu["prompt_tokens"],
          (t, want))
    if prev:
        # the previous prompt and answer are in the prefix cache: all of them but the answer's
        # last token, which was sampled and never decoded (the state stops before it)
        cached = t["usage"]["input_tokens_details"]["cached_tokens"]
        check("turn %d: cached tokens cover the previous prompt and answer (%d >= %d - 1)" %
              (k + 1, cached, prev_total), cached >= prev_total - 1 and
              t["previous_response_id"] == prev["id"], t["usage"])
    conv.append({"role": "assistant", "content": text_of(t)})
    prev, prev_total = t, t["usage"]["input_tokens"] + t["usage"]["output_tokens"]
st, got, _ = srv.request("GET", "/v1/responses/" + prev["id"], headers=AUTH)
check("GET /v1/responses/{id}: the stored response", st == 200 and got == prev, got)
st, got, _ = srv.request("GET", "/v1/responses/" + prev["id"],
                         headers={"Authorization": "Bearer " + OTHER})
check("another API key does not find it (GET 404)", st == 404 and prev["id"] in
      got["error"]["message"], got)
st, j = responses({"input": "x", "previous_response_id": prev["id"]}, key=OTHER)[:2]
check("... nor as previous_response_id (400 previous_response_not_found)",
      st == 400 and j["error"].get("code") == "previous_response_not_found" and
      j["error"].get("param") == "previous_response_id" and prev["id"] in j["error"]["message"], j)
st, j = responses({"input": "x", "previous_response_id": "resp_0000"})[:2]
check("an unknown id: 400 naming it", st == 400 and "'resp_0000'" in j["error"]["message"], j)
st, ns, _ = responses({"input": Q, "max_output_tokens": 3, "store": False})
st, j = responses({"input": "x", "previous_response_id": ns["id"]})[:2]
check("store: false is not kept", ns["store"] is False and st == 400 and
      j["error"].get("code") == "previous_response_not_found", j)
st, j, _ = srv.request("DELETE", "/v1/responses/" + prev["id"], headers=AUTH)
check("DELETE: deleted", st == 200 and j == {"id": prev["id"], "object": "response",
                                            "deleted": True}, j)
st, j, _ = srv.request("GET", "/v1/responses/" + prev["id"], headers=AUTH)
check("... then GET 404", st == 404, j)
st, j, _ = srv.request("DELETE", "/v1/responses/" + prev["id"], headers=AUTH)
check("... and DELETE again 404", st == 404, j)
st, j, resp = srv.request("PUT", "/v1/responses/x", headers=AUTH)
check("PUT: 405 with Allow: GET, DELETE", st == 405 and resp.getheader("Allow") == "GET, DELETE",
      (st, resp.getheader("Allow")))
st, j, _ = srv.request("GET", "/v1/responses/" + r["id"])
check("the stored responses need the API key", st == 401, j)

# ---- a bad request beside a running good one ----------------------------------------------------
result = {}


def good():
    result["s"] = sse({"input": Q, "max_output_tokens": 20, "temperature": 0, "stream": True})


th = threading.Thread(target=good)
th.start()
bad = [responses({"input": [{"role": "wizard", "content": "x"}]}) for _ in range(5)]
th.join(60)
check("the bad requests: 400", all(b[0] == 400 for b in bad), bad[0])
s2 = result.get("s", (0, "", []))
check("the good stream beside them: the same events and text",
      s2[0] == 200 and [d["type"] for _, d in s2[2]] == types and
      "".join(d["delta"] for _, d in s2[2] if d["type"] == "response.output_text.delta") == deltas)
check("the server is healthy", srv.healthy())

# ---- a failure after the start: response.failed ---------------------------------------------
# --timeout 1: a json_object answer of the tiny model rambles on past 4096 tokens, seconds of
# decoding, so the request times out in the middle of its text
slow = serve_util.Server(RECUR, MODEL, "--timeout", "1")
ramble = {"input": "JSON please.", "max_output_tokens": 4096, "temperature": 0,
          "text": {"format": {"type": "json_object"}}}
conn = http.client.HTTPConnection("127.0.0.1", slow.port, timeout=60)
conn.request("POST", "/v1/responses", body=json.dumps(dict(ramble, stream=True)).encode())
raw = conn.getresponse().read().decode()
conn.close()
fev = [json.loads(x[6:]) for x in raw.split("\n") if x.startswith("data: ")]
ftypes = [e["type"] for e in fev]
check("a timed-out stream ends with response.failed, after the opening events",
      ftypes[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added"] and ftypes[-1] == "response.failed" and
      "response.completed" not in ftypes and
      [e["sequence_number"] for e in fev] == list(range(len(fev))), ftypes[-3:])
failed_resp = fev[-1].get("response", {}) if fev else {}
check("... its response: status failed, an error naming the time-out",
      failed_resp.get("status") == "failed" and
      "timed out" in (failed_resp.get("error") or {}).get("message", ""), failed_resp)
st, j, _ = slow.post("/v1/responses", ramble)
check("the whole answer of a timed-out request: 504", st == 504 and "timed out" in
      j["error"]["message"], (st, j))
slow.stop()

# ---- the openai npm package and the Vercel AI SDK -----------------------------------------------
node_dir = os.path.join(HERE, "openai")
if os.path.isdir(os.path.join(node_dir, "node_modules", "ai")):
    p = subprocess.run(["node", os.path.join(node_dir, "responses.mjs"),
                        "http://127.0.0.1:%d/v1" % srv.port, KEY], capture_output=True, text=True,
                       timeout=240)
    check("the openai package and the AI SDK: " + p.stdout.strip(), p.returncode == 0,
          p.stderr[-3000:])
else:
    check("the npm packages are installed (tests/serve/openai; the set-up runs npm ci)", False)

print("test_serve_responses: %d passed, %d failed" % (counts["passed"], counts["failed"]))
sys.exit(counts.exit_status())
