#!/usr/bin/env python3
"""First-token time of each turn of a chat through recur serve, with and without prompt reuse.

    python3 bench/chat_turns.py [--recur build/tools/recur] [--model M] [--turns 10]
                                [--words 75] [--reply 100] [--reps 3] [--threads 2]

One server (-np 1); a chat of --turns turns, each a user message of about 100 tokens
(--words words of fortune-like text) and a greedy assistant reply of --reply tokens, sent to
/v1/chat/completions as a stream. The first-token time of a turn is from sending the request
to the first chunk that carries content (the role chunk comes before any decoding). "cached"
sends cache_prompt true (the default: turn k restores turns 1..k-1 from the prefix cache and
decodes only the new message); "uncached" sends cache_prompt false (the whole history is
decoded every turn). The two runs see the same chat (greedy replies, replayed). Prints a
Markdown table of medians over --reps repetitions, and the prompt / cached token counts.
"""

import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

WORDS = ("the stars say that a journey of some length will bring you to a door you have "
         "seen before and behind it a friend who remembers what you forgot about the rain "
         "and the road and the long evening when nothing went as planned but all was well "
         "in the end because patience is a kind of luck that grows with use").split()


def user_message(k, n_words):
    words = [WORDS[(k * 7 + i) % len(WORDS)] for i in range(n_words)]
    return "Turn %d. " % k + " ".join(words) + "?"


def start(recur, model, threads):
    proc = subprocess.Popen([recur, "serve", "-m", model, "--port", "0", "-np", "1", "-t",
                             str(threads)], stderr=subprocess.PIPE, text=True)
    m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", proc.stderr.readline())
    if not m:
        proc.kill()
        raise SystemExit("the server did not start")
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    return proc, int(m.group(1))


def turn(port, messages, reply, cache):
    """(seconds to the first content chunk, the reply's text, usage)."""
    body = {"messages": messages, "max_tokens": reply, "temperature": 0, "stream": True,
            "cache_prompt": cache, "stream_options": {"include_usage": True}}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body).encode())
    resp = conn.getresponse()
    first, text, usage = None, [], None
    while True:
        line = resp.readline()
        if not line:
            break
        line = line.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if ev.get("usage"):
            usage = ev["usage"]
        for ch in ev["choices"]:
            piece = ch["delta"].get("content")
            if piece:
                if first is None:
                    first = time.perf_counter() - t0
                text.append(piece)
    conn.close()
    return first, "".join(text), usage


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recur", default=os.path.join(ROOT, "build", "tools", "recur"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "recur-mamba-fortunes.gguf"))
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--words", type=int, default=75)
    ap.add_argument("--reply", type=int, default=100)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    proc, port = start(a.recur, a.model, a.threads)
    try:
        # the chat, fixed once: its greedy replies
        messages, chat = [], []
        for k in range(1, a.turns + 1):
            messages.append({"role": "user", "content": user_message(k, a.words)})
            _, text, _ = turn(port, messages, a.reply, False)
            messages.append({"role": "assistant", "content": text})
            chat.append(list(messages[:-1]))
        times = {True: [[] for _ in chat], False: [[] for _ in chat]}
        usage = {}
        for rep in range(a.reps):
            for cache in (True, False):
                for k, msgs in enumerate(chat):
                    first, _, u = turn(port, msgs, a.reply, cache)
                    times[cache][k].append(first)
                    usage[(cache, k)] = u
            # a cached run must start cold: a later repetition would hit every turn's prompt
            proc.terminate()
            proc.wait()
            proc, port = start(a.recur, a.model, a.threads)
        print("| turn | prompt tokens | cached tokens | first token, cached (ms) | "
              "first token, uncached (ms) |")
        print("|---:|---:|---:|---:|---:|")
        for k in range(len(chat)):
            u = usage[(True, k)]
            print("| %d | %d | %d | %.1f | %.1f |" % (
                k + 1, u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"],
                1e3 * statistics.median(times[True][k]),
                1e3 * statistics.median(times[False][k])))
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
