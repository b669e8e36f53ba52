#!/usr/bin/env python3
"""Prompt reuse on a hybrid model through recur serve: the prompt tokens each request actually
decodes, and its first token's time, in the cases where llama-server's reuse was hardest.

    python3 bench/hybrid_reuse.py --recur build/tools/recur --model M.gguf
                                  [--turns 20] [--words 75] [--reply 30] [--threads 2]
                                  [--cache-mb 4096]

Cases (docs/hybrid.md, issue 31): every turn of a --turns-turn chat, against a cold prefill of
the last one (cache_prompt false); regenerating the last answer; the last user message with an
edited end; an earlier answer (the middle turn's) shortened; four conversations interleaved on
two slots; and a turn after the server restarts with a folder as the prefix cache's second tier.

A request's decoded tokens are its prompt tokens less the cached ones (usage). The tokens
after its change are the prompt's tokens less their longest common prefix with what the server
held of it: the previous request's prompt and reply, each rendered by the model's chat
template (/apply-template) and tokenized (/tokenize) as the server does. Reuse restores the
newest checkpoint before the change, so decoded - after is how far back that checkpoint was
(the server keeps one every 64 positions). Chat replies are greedy; the chat is sent as a
client sends it, its history resent each turn.
"""

import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time

import chat_turns

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

def user_message(conv, k, n_words):
    """chat_turns.py's text, each conversation starting elsewhere in it."""
    words = [chat_turns.WORDS[(conv * 13 + k * 7 + i) % len(chat_turns.WORDS)]
             for i in range(n_words)]
    return "Conversation %d, turn %d. " % (conv, k) + " ".join(words) + "?"


class Server:
    def __init__(self, a, slots, extra=()):
        args = [a.recur, "serve", "-m", a.model, "--port", "0", "-np", str(slots), "-t",
                str(a.threads), "--prefix-cache-mb", str(a.cache_mb)] + list(extra)
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.proc.stderr.readline())
        if not m:
            self.proc.kill()
            raise SystemExit("the server did not start: %s" % " ".join(args))
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()
        self.port = int(m.group(1))

    def post(self, path, body):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=900)
        conn.request("POST", path, body=json.dumps(body).encode())
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        if resp.status != 200:
            raise SystemExit("%s: %d %s" % (path, resp.status, data[:300]))
        return json.loads(data)

    def tokens(self, messages):
        prompt = self.post("/apply-template", {"messages": messages})["prompt"]
        return self.post("/tokenize", {"content": prompt, "add_special": True})["tokens"]

    def chat(self, messages, reply, cache=True):
        """(first token seconds, reply text, prompt tokens, cached tokens)"""
        first, text, usage = chat_turns.turn(self.port, messages, reply, cache)
        return (first, text, usage["prompt_tokens"],
                usage["prompt_tokens_details"]["cached_tokens"])

    def metric(self, name):
        """A value of /metrics, None when not served."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        text = resp.read().decode()
        conn.close()
        m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
        return float(m.group(1)) if resp.status == 200 and m else None

    def store_queued(self):
        """Entries waiting for the second tier's writer, None when not served."""
        return self.metric("recur_prefix_store_queued")

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def lcp(a, b):
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


ROWS = []


def row(case, srv, messages, held, reply, cache=True):
    """Sends messages; held: the token lists of what the server holds of this conversation
    (None: nothing). Returns (reply text, prompt tokens)."""
    mine = srv.tokens(messages)
    after = len(mine) - max([lcp(mine, h) for h in held or []] + [0])
    first, text, n_prompt, cached = srv.chat(messages, reply, cache)
    if n_prompt != len(mine):
        print("warning: %s: the server counted %d prompt tokens, /tokenize %d"
              % (case, n_prompt, len(mine)))
    ROWS.append((case, n_prompt, cached, n_prompt - cached, after, 1e3 * first))
    return text, mine


def held_after(srv, messages, text):
    """The tokens the server holds after answering messages with text."""
    return [srv.tokens(messages + [{"role": "assistant", "content": text}])]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recur", default=os.path.join(ROOT, "build", "tools", "recur"))
    ap.add_argument("--model", required=True)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--words", type=int, default=75)
    ap.add_argument("--reply", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache-mb", type=int, default=4096)
    a = ap.parse_args()

    # 1. a chat of --turns turns on one slot, then its last turn cold
    srv = Server(a, 1)
    try:
        msgs, held = [], None
        for k in range(1, a.turns + 1):
            msgs.append({"role": "user", "content": user_message(0, k, a.words)})
            text, _ = row("turn %d" % k, srv, msgs, held, a.reply)
            held = held_after(srv, msgs, text)
            msgs.append({"role": "assistant", "content": text})
        last = msgs[:-1]
        cache_mb = srv.metric("recur_prefix_cache_bytes")
        cache_entries = srv.metric("recur_prefix_cache_entries")
        # 2. regenerate the last answer: the same prompt again
        row("regenerate the last answer", srv, last, [srv.tokens(last)], a.reply)
        # 3. the last user message with its last words changed
        edited = last[:-1] + [dict(last[-1], content=last[-1]["content"][:-25] + " or not?")]
        row("edited end of the last message", srv, edited, [srv.tokens(last)], a.reply)
        # 4. the middle turn's answer shortened to half its text
        mid = 2 * (a.turns // 2) - 1
        short = list(last)
        short[mid] = dict(short[mid], content=short[mid]["content"][:len(short[mid]["content"]) // 2])
        row("turn %d's answer shortened" % (mid // 2 + 1), srv, short, [srv.tokens(last)],
            a.reply)
        # the cold prefill of the last turn
        row("turn %d cold (cache_prompt false)" % a.turns, srv, last, None, a.reply, cache=False)
    finally:
        srv.stop()

    # 5. four conversations interleaved on two slots, three turns each
    srv = Server(a, 2)
    try:
        convs = [[] for _ in range(4)]
        helds = [None] * 4
        for k in range(1, 4):
            for c in range(4):
                convs[c].append({"role": "user", "content": user_message(c + 1, k, a.words)})
                text, _ = row("4 conversations on 2 slots: %s, turn %d" % ("ABCD"[c], k), srv,
                              convs[c], helds[c], a.reply)
                helds[c] = held_after(srv, convs[c], text)
                convs[c].append({"role": "assistant", "content": text})
    finally:
        srv.stop()

    # 6. a turn after a restart, the prefix cache's second tier in a folder
    folder = tempfile.mkdtemp(prefix="recur-hybrid-reuse-")
    try:
        srv = Server(a, 1, ["--prefix-cache-store", folder])
        msgs, held = [], None
        try:
            for k in range(1, 4):
                msgs.append({"role": "user", "content": user_message(9, k, a.words)})
                text, _ = row("before a restart: turn %d" % k, srv, msgs, held, a.reply)
                held = held_after(srv, msgs, text)
                msgs.append({"role": "assistant", "content": text})
            # the folder tier writes in the background: wait until its queue is empty
            deadline = time.time() + 120
            while time.time() < deadline and srv.store_queued() != 0:
                time.sleep(0.2)
        finally:
            srv.stop()
        srv = Server(a, 1, ["--prefix-cache-store", folder])
        try:
            msgs.append({"role": "user", "content": user_message(9, 4, a.words)})
            row("after a restart (folder tier): turn 4", srv, msgs, held, a.reply)
        finally:
            srv.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    print("| case | prompt tokens | cached | decoded | tokens after the change | "
          "first token (ms) |")
    print("|---|---:|---:|---:|---:|---:|")
    for case, n_prompt, cached, decoded, after, ms in ROWS:
        print("| %s | %d | %d | %d | %d | %.0f |" % (case, n_prompt, cached, decoded, after, ms))
    cold = [r for r in ROWS if "cold" in r[0]][0][5]
    warm = [r for r in ROWS if r[0] == "turn %d" % a.turns][0][5]
    print("\nturn %d: %.0f ms with reuse, %.0f ms cold: %.1fx sooner"
          % (a.turns, warm, cold, cold / warm))
    if cache_mb is not None:
        print("the prefix cache after turn %d: %.1f MB in %s entries"
              % (a.turns, cache_mb / 1e6, "%.0f" % cache_entries if cache_entries is not None
                 else "?"))


if __name__ == "__main__":
    main()
