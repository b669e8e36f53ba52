"""test_chat_templates.py: recur's chat formats against the real templates, byte for byte.

Each .jinja file of tests/data/chat-templates/ (real models' tokenizer.chat_template, from
llama.cpp's test data) is rendered with Jinja2 (Debian's python3-jinja2, with the sandboxed
environment and the options transformers uses: trim_blocks, lstrip_blocks) and compared with
recur_chat_apply_template on the same messages (tests/unit/chat_render.c), for conversations with
system, user and assistant turns, one and several turns, with and without the generation
prompt. The test also checks that each file is recognised as the expected builtin format.

Variables the templates need, and the values given:
  bos_token  ""  recur never writes BOS text: its tokenizer adds the BOS token where the model
                 asks for it (as llama.cpp does), so the templates' leading {{ bos_token }}
                 renders as nothing on both sides.
  eos_token  the model's end-of-sequence text ("</s>", "<|endoftext|>", "<｜end▁of▁sentence｜>"),
             which formats write after an assistant turn.
  raise_exception  raises (a case a template refuses is a test error, never silently passed)
  strftime_now, date_string  a fixed date, 26 Jul 2024 (only where a case shows it, see below)
Cases a template renders with text recur cannot know are excluded or adapted, each said where
it is (a default system prompt with today's date, a knowledge-cutoff header).

Formats without a real template in the test data (llama2, zephyr, command-r: its only template
here is a tool-use one whose tools preamble is always written, deepseek, deepseek2, phi4,
mistral-v1/-v3/-v7) are checked against independently written strings in test_chat.c.

Run: test_chat_templates.py CHAT_RENDER   (last line: "test_chat_templates: N passed, M failed")
"""
import os
import subprocess
import sys

if os.path.exists("/usr/bin/python3") and not os.environ.get("RECUR_CHAT_REEXEC"):
    # Debian's python3-jinja2 belongs to /usr/bin/python3, which may not be first in PATH.
    os.environ["RECUR_CHAT_REEXEC"] = "1"
    os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)

import jinja2
import jinja2.sandbox

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data", "chat-templates")
RENDER = sys.argv[1]

DS_EOS = "<\uff5cend\u2581of\u2581sentence\uff5c>"


def raise_exception(msg):
    raise jinja2.exceptions.TemplateError(msg)


def jinja_render(path, messages, add_generation_prompt, eos, extra):
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: __import__("datetime").date(2024, 7, 26).strftime(fmt)
    with open(path, encoding="utf-8") as f:
        tmpl = env.from_string(f.read())
    return tmpl.render(messages=messages, add_generation_prompt=add_generation_prompt,
                       bos_token="", eos_token=eos, **extra)


def recur_render(path, messages, add_ass):
    args = [RENDER, path, "1" if add_ass else "0"]
    for m in messages:
        args += [m["role"], m["content"]]
    r = subprocess.run(args, capture_output=True)
    if r.returncode != 0:
        raise RuntimeError("chat_render failed: " + r.stderr.decode())
    return r.stdout.decode("utf-8")


def msg(role, content):
    return {"role": role, "content": content}


SYS = msg("system", "You are a terse assistant.")
U1 = msg("user", "Hello there!")
A1 = msg("assistant", "Hi. What do you need?")
U2 = msg("user", "  A joke about  cats, please.\n")  # spaces: formats that trim must trim
A2 = msg("assistant", "Cats nap.\nThat is the joke. ")
U3 = msg("user", "Another.")

# conversations: (label, messages); each is rendered with and without the generation prompt
WITH_SYS = [("sys+user", [SYS, U1]),
            ("sys+3 turns", [SYS, U1, A1, U2, A2, U3]),
            ("sys+user+assistant", [SYS, U1, A1])]
NO_SYS = [("user", [U1]),
          ("3 turns", [U1, A1, U2, A2, U3]),
          ("user+assistant", [U1, A1])]
BOTH = WITH_SYS + NO_SYS
ENDS_USER = [c for c in BOTH if c[1][-1]["role"] == "user"]

LLAMA31_HEAD = "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"


def llama3_adapt(messages):
    # Llama 3.1/3.2 always open the system turn with a knowledge-cutoff and date header that
    # recur cannot know; recur is given the system text as the template extends it.
    return [msg("system", LLAMA31_HEAD + m["content"]) if m["role"] == "system" else m
            for m in messages]


# (file, expected format, eos text, conversations, extra variables, adapt(messages) for recur,
#  what the template adds after a chat without generation prompt)
TEMPLATES = [
    # without a system message Qwen2.5 writes its own default one ("You are Qwen, ...")
    ("Qwen-Qwen2.5-7B-Instruct.jinja", "chatml", "<|im_end|>", WITH_SYS, {}, None, ""),
    # the header with the date is always written, so only conversations with a system message
    ("meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3", "<|eot_id|>", WITH_SYS, {},
     llama3_adapt, ""),
    ("meta-llama-Llama-3.2-3B-Instruct.jinja", "llama3", "<|eot_id|>", WITH_SYS,
     {"date_string": "26 Jul 2024"}, llama3_adapt, ""),
    # Nemo writes the system message into the LAST user turn only when it is the last message
    # (so it vanishes from a chat that ends with the assistant); recur, as llama.cpp, puts it
    # in the first user turn: the two agree on a system message with one user turn.
    ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral-v3-tekken", "</s>",
     NO_SYS + [("sys+user", [SYS, U1])], {}, None, ""),
    # a long default system prompt with today's date when there is none
    ("Mistral-Small-3.2-24B-Instruct-2506.jinja", "mistral-v7-tekken", "</s>", WITH_SYS, {},
     None, ""),
    ("unsloth-mistral-Devstral-Small-2507.jinja", "mistral-v7-tekken", "</s>", WITH_SYS, {},
     None, ""),
    # Phi-3.5 ends a chat without generation prompt with eos_token; recur, as llama.cpp, does
    # not (the model's EOS is a token it generates, not prompt text): checked as that suffix
    ("microsoft-Phi-3.5-mini-instruct.jinja", "phi3", "<|endoftext|>", BOTH, {}, None,
     "<|endoftext|>"),
    # Gemma 2 refuses a system message (recur merges it into the first user turn, as
    # llama.cpp; test_chat.c checks that)
    ("google-gemma-2-2b-it.jinja", "gemma", "<eos>", NO_SYS, {}, None, ""),
    ("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "deepseek-r1", DS_EOS, BOTH, {}, None,
     ""),
    # this one closes the thought at once unless enable_thinking is true (a request option
    # recur's formats do not take): rendered with thinking on, as R1-Distill-Llama
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "deepseek-r1", DS_EOS, BOTH,
     {"enable_thinking": True}, None, ""),
    ("deepseek-ai-DeepSeek-V3.1.jinja", "deepseek-v3.1", DS_EOS, BOTH, {}, None, ""),
    # without a system message Granite writes a default one with today's date
    ("ibm-granite-granite-3.3-2B-Instruct.jinja", "granite", "<|end_of_text|>", WITH_SYS, {},
     None, ""),
    ("llama-cpp-rwkv-world.jinja", "rwkv-world", "\n\n", BOTH, {}, None, ""),
    # Granite 4.0 (granitehybrid) and 4.1 write a default system message when there is none
    # (4.0 only), so only conversations with one
    ("ibm-granite-granite-4.0.jinja", "granite-4.0", "<|end_of_text|>", WITH_SYS, {}, None, ""),
    ("ibm-granite-granite-4.1.jinja", "granite-4.1", "<|end_of_text|>", BOTH, {}, None, ""),
    # Nemotron 3 (nemotron_h_moe): every conversation, with and without a system message
    ("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", "nemotron3", "<|im_end|>", BOTH, {}, None, ""),
    # Nemotron Nano 2 / Nemotron-H (nemotron_h) reopens a final assistant message with a
    # thought: conversations that end with a user message (see chat.c)
    ("NVIDIA-Nemotron-Nano-v2.jinja", "nemotron-v2", "<SPECIAL_12>", ENDS_USER, {}, None, ""),
]

# files that are only recognised (their formats' output is not plain chat: see above)
DETECT_ONLY = [("CohereForAI-c4ai-command-r-plus-tool_use.jinja", "command-r")]

passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL: " + what)


def show(s):
    return repr(s) if len(s) < 400 else repr(s[:200]) + " ... " + repr(s[-200:])


for path, name, eos, convs, extra, adapt, tail in TEMPLATES:
    full = os.path.join(DATA, path)
    got = subprocess.run([RENDER, "--name", full], capture_output=True, text=True).stdout.strip()
    check(got == name, "%s is recognised as %s, got %r" % (path, name, got))
    for label, messages in convs:
        for gen in (True, False):
            want = jinja_render(full, messages, gen, eos, extra)
            have = recur_render(full, adapt(messages) if adapt else messages, gen)
            if not gen and tail:
                check(want.endswith(tail), "%s: %s: ends with %r" % (path, label, tail))
                want = want[:len(want) - len(tail)]
            ok = have == want
            check(ok, "%s [%s, add_generation_prompt=%s]:\n  jinja: %s\n  recur: %s" %
                  (path, label, gen, show(want), show(have)))

for path, name in DETECT_ONLY:
    got = subprocess.run([RENDER, "--name", os.path.join(DATA, path)], capture_output=True,
                         text=True).stdout.strip()
    check(got == name, "%s is recognised as %s, got %r" % (path, name, got))

# every builtin name renders through the same path as a template text does
r = subprocess.run([RENDER, "no-such-format", "1", "user", "x"], capture_output=True, text=True)
check(r.returncode == 1 and "supported: " in r.stderr and "chatml" in r.stderr,
      "an unknown template is refused with the supported names: %r" % r.stderr)

print("test_chat_templates: %d passed, %d failed" % (passed, failed))
if passed == 0:
    print("FAIL: no check ran")
sys.exit(1 if failed or passed == 0 else 0)
