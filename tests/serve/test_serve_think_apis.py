#!/usr/bin/env python3
"""A reasoning model's thought on /v1/responses (a reasoning output item) and /v1/messages (a
thinking block), against /v1/chat/completions' reasoning_content (python3 standard library only).

    test_serve_think_apis.py RECUR_BIN MODEL

Those two endpoints take no grammar, so the output cannot be forced as test_serve_reasoning.py
forces chat's. Instead the server runs with --chat-template deepseek-r1, whose generation
prompt opens the thought ("<think>\\n"): the shipped model never writes "</think>", so its whole
output (greedy, temperature 0) is reasoning. The reference is chat's answer to the same messages
(its split is checked against written-out texts by test_serve_reasoning.py): the Responses
reasoning item and the Messages thinking block must hold chat's reasoning_content, the message
and the text block chat's content, streamed deltas joined the same, and the counts chat's. A
thought that closes (reasoning then answer, both non-empty) cannot be made from this model
without a grammar; the ordering code for it is the same as for a thought alone followed by the
answer's (empty) item or block, which is checked here event by event. The chatml server (no
thought opened) and --reasoning-format none check that nothing is split where chat splits
nothing.
"""

import http.client
import json
import os
import subprocess
import sys
import tempfile

RECUR, MODEL = sys.argv[1:3]
from serve_util import check, counts
import serve_util

USER = "Tell me a fortune."
MSGS = [{"role": "user", "content": USER}]
N = 12  # max tokens: the thought never closes, so the length ends every answer
TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                         "chat-templates")


def sse(srv, path, body):
    """The (event name, data) pairs of a stream with "event:" lines."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    conn.request("POST", path, body=json.dumps(body).encode())
    resp = conn.getresponse()
    text = resp.read().decode()
    conn.close()
    out = []
    for block in text.split("\n\n"):
        lines = [l for l in block.split("\n") if l]
        if not lines:
            continue
        name = lines[0][len("event: "):] if lines[0].startswith("event: ") else None
        data = [json.loads(l[6:]) for l in lines if l.startswith("data: ")]
        out.append((name, data[0] if data else None))
    return resp.status, out


def chat_ref(srv, msgs, max_tokens=N, **kw):
    st, ans, _ = srv.post("/v1/chat/completions", dict(messages=msgs, max_tokens=max_tokens,
                                                        temperature=0, **kw))
    assert st == 200, ans
    m = ans["choices"][0]["message"]
    return dict(reasoning=m.get("reasoning_content", ""), content=m["content"],
                tokens=ans["usage"]["completion_tokens"], prompt=ans["usage"]["prompt_tokens"],
                reasoning_tokens=ans["usage"]["completion_tokens_details"]["reasoning_tokens"])


def responses(srv, name, ref, body):
    """/v1/responses whole and streamed against chat's answer ref."""
    st, ans, _ = srv.post("/v1/responses", dict(body, temperature=0, max_output_tokens=N))
    check("%s: responses 200" % name, st == 200, ans)
    out = ans.get("output", []) if st == 200 else []
    kinds = [o["type"] for o in out]
    if ref["reasoning"]:
        check("%s: output = a reasoning item, then the message" % name,
              kinds == ["reasoning", "message"], kinds)
        rs = out[0] if out else {}
        check("%s: the reasoning item's text = chat's reasoning_content" % name,
              rs.get("content") == [{"type": "reasoning_text", "text": ref["reasoning"]}] and
              rs.get("summary") == [] and rs.get("id", "").startswith("rs_"), rs)
        check("%s: the reasoning cut by the length is incomplete" % name,
              rs.get("status") == ("incomplete" if not ref["content"] else "completed"), rs)
    else:
        check("%s: output = the message alone (no reasoning)" % name, kinds == ["message"], kinds)
    msg = out[-1] if out else {}
    check("%s: the message's text = chat's content" % name,
          msg.get("content", [{}])[0].get("text") == ref["content"], msg)
    u = ans.get("usage", {})
    check("%s: output_tokens and reasoning_tokens = chat's" % name,
          u.get("output_tokens") == ref["tokens"] and
          u.get("output_tokens_details", {}).get("reasoning_tokens") == ref["reasoning_tokens"],
          (u, ref))
    # streamed
    st, ev = sse(srv, "/v1/responses", dict(body, temperature=0, max_output_tokens=N,
                                            stream=True))
    data = [d for _, d in ev]
    check("%s: stream: sequence numbers 0, 1, 2, ..." % name,
          [d["sequence_number"] for d in data] == list(range(len(data))))
    names = [n for n, _ in ev if n not in ("response.reasoning_text.delta",
                                            "response.output_text.delta")]
    item = ["response.output_item.added", "response.content_part.added"]
    done_rs = ["response.reasoning_text.done", "response.content_part.done",
               "response.output_item.done"]
    done_msg = ["response.output_text.done", "response.content_part.done",
                "response.output_item.done"]
    want = (["response.created", "response.in_progress"] +
            (item + done_rs if ref["reasoning"] else []) + item + done_msg +
            ["response.incomplete"])
    check("%s: stream: the events in order" % name, names == want, names)
    rdeltas = [d for n, d in ev if n == "response.reasoning_text.delta"]
    tdeltas = [d for n, d in ev if n == "response.output_text.delta"]
    check("%s: stream: reasoning deltas joined = chat's reasoning_content" % name,
          "".join(d["delta"] for d in rdeltas) == ref["reasoning"])
    check("%s: stream: text deltas joined = chat's content" % name,
          "".join(d["delta"] for d in tdeltas) == ref["content"])
    def of_message(d):
        return (d.get("item_id") or d.get("item", {}).get("id") or "").startswith("msg_")
    first_msg = next((i for i, (_, d) in enumerate(ev) if of_message(d)), len(ev))
    check("%s: stream: every reasoning event before the message's first one" % name,
          all(i < first_msg for i, (n, d) in enumerate(ev)
              if (d.get("item_id") or d.get("item", {}).get("id") or "").startswith("rs_")))
    # the reasoning's events at output_index 0 under its id, the message's after it
    idx = {}
    for n, d in ev:
        if "item_id" in d:
            idx.setdefault(d["item_id"], set()).add(d["output_index"])
        if n.startswith("response.output_item"):
            idx.setdefault(d["item"]["id"], set()).add(d["output_index"])
    ids = [i for i in idx if i.startswith("rs_")], [i for i in idx if i.startswith("msg_")]
    check("%s: stream: the items' output_index" % name,
          (len(ids[0]) == (1 if ref["reasoning"] else 0) and len(ids[1]) == 1 and
           all(idx[i] == {0} for i in ids[0]) and
           idx[ids[1][0]] == ({1} if ref["reasoning"] else {0})), idx)
    parts = [d["part"] for n, d in ev if n == "response.content_part.added"]
    check("%s: stream: the parts added: reasoning_text, then output_text" % name,
          [p["type"] for p in parts] == (["reasoning_text"] if ref["reasoning"] else []) +
          ["output_text"], parts)
    final = data[-1].get("response", {}) if data else {}
    strip = [{k: v for k, v in o.items() if k != "id"} for o in final.get("output", [])]
    check("%s: stream: the final response's output = the whole answer's" % name,
          strip == [{k: v for k, v in o.items() if k != "id"} for o in out], final)
    return ans


def messages(srv, name, ref, body, thinking=None, shown=True):
    """/v1/messages whole and streamed against chat's answer ref."""
    body = dict(body, model="recur", max_tokens=N, temperature=0)
    if thinking:
        body["thinking"] = thinking
    st, ans, _ = srv.post("/v1/messages", body)
    check("%s: messages 200" % name, st == 200, ans)
    blocks = ans.get("content", []) if st == 200 else []
    omit = bool(thinking and thinking.get("display") == "omitted")
    think = ref["reasoning"] and shown
    want = ([{"type": "thinking", "thinking": "" if omit else ref["reasoning"], "signature": ""}]
            if think else []) + [{"type": "text", "text": ref["content"]}]
    check("%s: content = %s" % (name, "a thinking block, then the text" if think else
                                "the text alone"), blocks == want, (blocks, want))
    check("%s: output_tokens = chat's" % name,
          ans.get("usage", {}).get("output_tokens") == ref["tokens"], ans)
    st, ev = sse(srv, "/v1/messages", dict(body, stream=True))
    names = [n for n, _ in ev if n != "content_block_delta"]
    want_names = (["message_start", "content_block_start", "ping"] +
                  (["content_block_stop", "content_block_start"] if think else []) +
                  ["content_block_stop", "message_delta", "message_stop"])
    check("%s: stream: the events in order" % name, names == want_names, names)
    starts = [d for n, d in ev if n == "content_block_start"]
    check("%s: stream: the blocks started" % name,
          [(d["index"], d["content_block"]["type"]) for d in starts] ==
          ([(0, "thinking")] if think else []) + [(1 if think else 0, "text")], starts)
    deltas = [d for n, d in ev if n == "content_block_delta"]
    th = [d for d in deltas if d["delta"]["type"] == "thinking_delta"]
    sig = [d for d in deltas if d["delta"]["type"] == "signature_delta"]
    tx = [d for d in deltas if d["delta"]["type"] == "text_delta"]
    check("%s: stream: thinking deltas joined = chat's reasoning_content" % name,
          "".join(d["delta"]["thinking"] for d in th) ==
          (ref["reasoning"] if think and not omit else "") and all(d["index"] == 0 for d in th))
    check("%s: stream: one signature_delta, last in the thinking block" % name,
          (len(sig) == 1 and sig[0]["index"] == 0 and sig[0]["delta"]["signature"] == "" and
           deltas.index(sig[0]) == len(th)) if think else not sig, deltas)
    check("%s: stream: text deltas joined = chat's content" % name,
          "".join(d["delta"]["text"] for d in tx) == ref["content"] and
          all(d["index"] == (1 if think else 0) for d in tx))


# ---- a template that opens the thought: the output is reasoning ----------------------------
srv = serve_util.Server(RECUR, MODEL, "--chat-template", "deepseek-r1")
ref = chat_ref(srv, MSGS)
check("reference: chat's answer is all reasoning (the thought opened by the prompt)",
      ref["reasoning"] and ref["content"] == "" and ref["reasoning_tokens"] == ref["tokens"] == N,
      ref)
first = responses(srv, "forced open", ref, {"input": USER})
sys_msgs = [{"role": "system", "content": "Be brief."}] + MSGS
ref_sys = chat_ref(srv, sys_msgs)
responses(srv, "forced open, instructions", ref_sys, {"instructions": "Be brief.", "input": USER})
messages(srv, "forced open", ref, {"messages": MSGS})
messages(srv, "forced open, thinking enabled", ref, {"messages": MSGS},
         {"type": "enabled", "budget_tokens": N})
messages(srv, "forced open, thinking adaptive, omitted", ref, {"messages": MSGS},
         {"type": "adaptive", "display": "omitted"})
messages(srv, "forced open, thinking disabled", ref, {"messages": MSGS}, {"type": "disabled"},
         shown=False)
messages(srv, "forced open, system", ref_sys, {"system": "Be brief.", "messages": MSGS})

# the official clients: the openai package's reasoning items, the Anthropic SDK's thinking blocks
HERE = os.path.dirname(os.path.abspath(__file__))
ref_sdk = chat_ref(srv, MSGS, max_tokens=16)
fd, exp_path = tempfile.mkstemp(prefix="recur-think-expected-", suffix=".json")
with os.fdopen(fd, "w") as f:
    json.dump({"input": USER, "max": 16, "reasoning": ref_sdk["reasoning"],
               "content": ref_sdk["content"]}, f)
for name, pkg, script, url in [
        ("the openai package", os.path.join("openai", "node_modules", "openai"),
         os.path.join("openai", "reasoning.mjs"), "http://127.0.0.1:%d/v1" % srv.port),
        ("the @anthropic-ai/sdk client", os.path.join("anthropic", "node_modules", "@anthropic-ai",
                                                      "sdk"),
         os.path.join("anthropic", "thinking.mjs"), "http://127.0.0.1:%d" % srv.port)]:
    if not os.path.isdir(os.path.join(HERE, pkg)):
        check("%s is installed (the set-up runs npm ci)" % name, False)
        continue
    r = subprocess.run(["node", os.path.join(HERE, script), url, exp_path], capture_output=True,
                       text=True, timeout=120)
    check("%s: %s" % (name, r.stdout.strip()), r.returncode == 0, r.stderr[-3000:] + r.stdout)
    print("%s: %s" % (name, r.stdout.strip()))
os.unlink(exp_path)

# previous_response_id: the stored answer is its content, not its thought (chat's history)
hist = MSGS + [{"role": "assistant", "content": ref["content"]},
               {"role": "user", "content": "Another."}]
raw_hist = MSGS + [{"role": "assistant", "content": ref["reasoning"]},
                   {"role": "user", "content": "Another."}]
want_prompt = chat_ref(srv, hist, max_tokens=1)["prompt"]
check("reference: the thought in the history would change the prompt",
      chat_ref(srv, raw_hist, max_tokens=1)["prompt"] != want_prompt)
st, nxt, _ = srv.post("/v1/responses", {"previous_response_id": first.get("id"),
                                        "input": "Another.", "max_output_tokens": 1})
check("previous_response_id: the prompt = chat's with the answer's content only",
      st == 200 and nxt["usage"]["input_tokens"] == want_prompt, (nxt, want_prompt))


def input_tokens(srv, body):
    st, ans, _ = srv.post("/v1/responses/input_tokens", body)
    return st, ans.get("input_tokens") if st == 200 else ans


def count_tokens(srv, msgs):
    st, ans, _ = srv.post("/v1/messages/count_tokens", {"model": "recur", "messages": msgs})
    return st, ans.get("input_tokens") if st == 200 else ans


# reasoning items and thinking blocks sent back: left out as the template leaves them out
RS = {"type": "reasoning", "id": "rs_1", "summary": [],
      "content": [{"type": "reasoning_text", "text": "R1"}], "status": "completed"}
ASSIST = {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
          "content": [{"type": "output_text", "text": "A1", "annotations": []}]}
with_rs = [{"role": "user", "content": "Q1"}, RS, ASSIST, {"role": "user", "content": "Q2"}]
without_rs = [m for m in with_rs if m is not RS]
got, plain = input_tokens(srv, {"input": with_rs}), input_tokens(srv, {"input": without_rs})
check("input: a reasoning item is left out (DeepSeek-R1 drops a past thought)",
      got[0] == 200 and got == plain, (got, plain))
alone = [{"role": "user", "content": "Q1"}, RS, dict(RS, id="rs_2"),
         {"role": "user", "content": "Q2"}]
as_chat = [{"role": "user", "content": "Q1"}, {"role": "assistant", "content": ""},
           {"role": "user", "content": "Q2"}]
got, plain = input_tokens(srv, {"input": alone}), input_tokens(srv, {"input": as_chat})
check("input: reasoning items with no message: an assistant turn with no text, as chat holds it",
      got[0] == 200 and got == plain and got != input_tokens(srv, {"input": [alone[0], alone[3]]}),
      (got, plain))
th = [{"role": "user", "content": "Q1"},
      {"role": "assistant", "content": [{"type": "thinking", "thinking": "R1", "signature": ""},
                                        {"type": "redacted_thinking", "data": "xyz"},
                                        {"type": "text", "text": "A1"}]},
      {"role": "user", "content": "Q2"}]
plain_th = [th[0], {"role": "assistant", "content": "A1"}, th[2]]
got, plain = count_tokens(srv, th), count_tokens(srv, plain_th)
check("messages: thinking blocks of the history are left out", got[0] == 200 and got == plain,
      (got, plain))
for name, item in [("content not reasoning_text", dict(RS, content=[{"type": "output_text",
                                                                      "text": "x"}])),
                   ("an unknown field", dict(RS, extra=1)),
                   ("summary not a list", dict(RS, summary="x"))]:
    st, e, _ = srv.post("/v1/responses/input_tokens", {"input": [item, ASSIST]})
    check("input: a reasoning item with %s: 400 naming input[0]" % name,
          st == 400 and "\"input\"[0]" in e["error"]["message"], e)
check("the server exits cleanly", srv.stop() == 0, srv.log[-5:])

# ---- a template that writes a past reasoning into its prompt: refused, not dropped ---------
nemotron = os.path.join(TEMPLATES, "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja")
srv = serve_util.Server(RECUR, MODEL, "--chat-template", open(nemotron).read())
st, e = input_tokens(srv, {"input": with_rs})
check("Nemotron 3: a reasoning item sent back is refused", st == 400 and
      "\"input\"[1] (a reasoning item)" in str(e), e)
st, e = input_tokens(srv, {"input": without_rs})
check("Nemotron 3: the same input without it is accepted", st == 200, e)
st, e = count_tokens(srv, th)
check("Nemotron 3: a thinking block of the history is refused", st == 400 and
      "\"messages\"[1].content[0] (a thinking block)" in str(e), e)
check("the server exits cleanly", srv.stop() == 0, srv.log[-5:])

# ---- Qwen3: a past reasoning is dropped before the last user message, written after it ------
qwen3 = os.path.join(TEMPLATES, "Qwen-Qwen3-0.6B.jinja")
srv = serve_util.Server(RECUR, MODEL, "--chat-template", open(qwen3).read())
got, plain = input_tokens(srv, {"input": with_rs}), input_tokens(srv, {"input": without_rs})
check("Qwen3: a reasoning item before the last user message is left out",
      got[0] == 200 and got == plain, (got, plain))
st, e = input_tokens(srv, {"input": with_rs[:3]})
check("Qwen3: a reasoning item of the last turn is refused", st == 400 and
      "\"input\"[1] (a reasoning item)" in str(e), e)
st, e = input_tokens(srv, {"input": with_rs[:2]})
check("Qwen3: a reasoning item alone at the end is refused", st == 400 and
      "\"input\"[1] (a reasoning item)" in str(e), e)
got, plain = count_tokens(srv, th), count_tokens(srv, plain_th)
check("Qwen3: a thinking block before the last user message is left out",
      got[0] == 200 and got == plain, (got, plain))
st, e = count_tokens(srv, th[:2])
check("Qwen3: a thinking block in the last assistant turn (a prefill) is refused",
      st == 400 and "\"messages\"[1].content[0] (a thinking block)" in str(e), e)
check("the server exits cleanly", srv.stop() == 0, srv.log[-5:])

# ---- no thought opened (the model's chatml): nothing is reasoning --------------------------
srv = serve_util.Server(RECUR, MODEL)
ref = chat_ref(srv, MSGS)
check("reference: chat's answer has no reasoning", ref["reasoning"] == "" and ref["content"] and
      ref["reasoning_tokens"] == 0, ref)
responses(srv, "chatml", ref, {"input": USER})
messages(srv, "chatml", ref, {"messages": MSGS})
messages(srv, "chatml, thinking enabled", ref, {"messages": MSGS},
         {"type": "enabled", "budget_tokens": 100})
check("the server exits cleanly", srv.stop() == 0, srv.log[-5:])

# ---- --reasoning-format none: the raw text, and thinking cannot be asked for ---------------
srv = serve_util.Server(RECUR, MODEL, "--chat-template", "deepseek-r1", "--reasoning-format",
                        "none")
ref = chat_ref(srv, MSGS)
check("reference: format none: chat's content is the raw text", ref["reasoning"] == "" and
      ref["content"] and ref["reasoning_tokens"] == 0, ref)
responses(srv, "format none", ref, {"input": USER})
messages(srv, "format none", ref, {"messages": MSGS})
st, e, _ = srv.post("/v1/messages", {"model": "recur", "max_tokens": N, "messages": MSGS,
                                     "thinking": {"type": "enabled", "budget_tokens": N}})
check("format none: thinking enabled is refused naming --reasoning-format",
      st == 400 and "--reasoning-format none" in e["error"]["message"], e)
check("the server exits cleanly", srv.stop() == 0, srv.log[-5:])

# ---- deepseek-legacy: the Responses item and the thinking block hold the thought ----------
srv = serve_util.Server(RECUR, MODEL, "--chat-template", "deepseek-r1", "--reasoning-format",
                        "deepseek-legacy")
ref = chat_ref(srv, MSGS)  # whole: legacy splits as deepseek does
responses(srv, "deepseek-legacy", ref, {"input": USER})
messages(srv, "deepseek-legacy", ref, {"messages": MSGS})
check("the server exits cleanly", srv.stop() == 0, srv.log[-5:])

print("test_serve_think_apis: %d passed, %d failed" % (counts["passed"], counts["failed"]))
sys.exit(counts.exit_status())
