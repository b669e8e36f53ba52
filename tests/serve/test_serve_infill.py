#!/usr/bin/env python3
"""POST /infill (tools/serve/infill.c), llama-server's code infilling (python3 standard library
only).

    test_serve_infill.py RECUR_BIN MODEL_WITHOUT_FIM

The models with fill-in-the-middle tokens are written here by `recur mkmodel --fim` from the
GPT-2 vocabulary of tests/data: one naming PRE, SUF and MID, one naming REP and SEP too. The
test assembles each infill prompt itself from /tokenize's answers, in llama-server's order

    [extra] [BOS] PRE prefix prompt SUF suffix MID       (--spm-infill: SUF suffix PRE prefix prompt MID)

and checks that /infill evaluated exactly that many tokens, and that its greedy answer (text,
token ids and prompt text) is the one /completion gives for that token list. Then: streaming,
input_extra in both patterns (the snippet separator, and REP/SEP's repository-level one), a
token-array prefix, the model without FIM tokens (501, llama-server's words) and bad fields
(400 naming them).
"""

import os
import shutil
import subprocess
import sys
import tempfile

RECUR, PLAIN = sys.argv[1:3]
from serve_util import check, counts
import serve_util

VOCAB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                     "ggml-vocab-gpt-2.gguf")
PRE, SUF, MID, REP, SEP = 295, 296, 297, 298, 299

tmp = tempfile.mkdtemp(prefix="recur-infill-")


def mkmodel(name, fim):
    path = os.path.join(tmp, name + ".gguf")
    subprocess.run([RECUR, "mkmodel", path, "--arch", "mamba", "--vocab-file", VOCAB, "--embd",
                    "32", "--layers", "2", "--vocab", "300", "--state", "4", "--seed", "40",
                    "--fim", fim], check=True, capture_output=True)
    return path


fim3 = mkmodel("fim3", "%d,%d,%d" % (PRE, SUF, MID))
fim5 = mkmodel("fim5", "%d,%d,%d,%d,%d" % (PRE, SUF, MID, REP, SEP))


def tok(srv, text, special=False):
    status, body, _ = srv.post("/tokenize", {"content": text, "add_special": False,
                                             "parse_special": special})
    assert status == 200, body
    return body["tokens"]


def bos(srv):
    # what the model puts before a prompt: nothing tokenized with add_special
    return srv.post("/tokenize", {"content": "", "add_special": True})[1]["tokens"]


def extra_tokens(srv, extra, repo):
    out = []
    if repo:
        out += [REP] + tok(srv, "myproject\n")
    for chunk in extra:
        if repo:
            out += [SEP] + tok(srv, chunk.get("filename", "tmp") + "\n")
        else:
            out += tok(srv, "\n\n--- snippet ---\n\n")
        out += tok(srv, chunk["text"])
    if repo:
        out += [SEP] + tok(srv, "filename\n")
    return out


def assemble(srv, req, spm=False, repo=False):
    prefix = req["input_prefix"]
    prefix = tok(srv, prefix) if isinstance(prefix, str) else prefix
    first = [PRE] + prefix + tok(srv, req.get("prompt", ""), special=True)
    second = [SUF] + tok(srv, req["input_suffix"])
    if spm:
        first, second = second, first
    return extra_tokens(srv, req.get("input_extra", []), repo) + bos(srv) + first + second + [MID]


GREEDY = {"temperature": 0, "n_predict": 8, "return_tokens": True, "cache_prompt": False}


def same_as_completion(name, srv, req, spm=False, repo=False):
    """/infill's answer equals /completion's of the tokens assembled here; returns them."""
    want = assemble(srv, req, spm, repo)
    status, got, _ = srv.post("/infill", dict(req, **GREEDY))
    check(name + ": 200", status == 200, str(got))
    if status != 200:
        return want
    check(name + ": tokens_evaluated is the assembled prompt's length",
          got["tokens_evaluated"] == len(want), "%s vs %d" % (got["tokens_evaluated"], len(want)))
    status, ref, _ = srv.post("/completion", dict(GREEDY, prompt=want))
    check(name + ": /completion of the assembled tokens answers", status == 200, str(ref))
    for k in ("content", "tokens", "prompt", "tokens_evaluated", "tokens_predicted"):
        check(name + ": " + k + " equals /completion's", got.get(k) == ref.get(k),
              "%r vs %r" % (got.get(k), ref.get(k)))
    check(name + ": the answer has /completion's shape", set(got) == set(ref),
          str(set(got) ^ set(ref)))
    return want


BASIC = {"input_prefix": "def add(a, b):\n    return", "input_suffix": "\n\nprint(add(1, 2))",
         "prompt": " a +"}

psm = serve_util.Server(RECUR, fim3)
psm_tokens = same_as_completion("PSM", psm, BASIC)
check("PSM: prefix before suffix", psm_tokens.index(PRE) < psm_tokens.index(SUF), str(psm_tokens))
# no prompt, empty suffix: still PRE ... SUF MID
same_as_completion("no prompt", psm, {"input_prefix": "x = ", "input_suffix": ""})
# a prefix of token ids, as /completion's prompt takes them
same_as_completion("token prefix", psm, {"input_prefix": [10, 20, 30], "input_suffix": "y"})
# input_extra without REP/SEP tokens: each file after the snippet separator, before the rest
extra = [{"filename": "util.py", "text": "def sub(a, b):\n    return a - b\n"},
         {"text": "X = 1\n"}]
ex = same_as_completion("extra (snippets)", psm, dict(BASIC, input_extra=extra))
check("extra (snippets): the files come first", ex[:len(tok(psm, "\n\n--- snippet ---\n\n"))] ==
      tok(psm, "\n\n--- snippet ---\n\n"), str(ex))
# streamed: the same text
status, events, done = psm.stream("/infill", dict(BASIC, temperature=0, n_predict=8,
                                                  stream=True))
whole = psm.post("/infill", dict(BASIC, temperature=0, n_predict=8))[1]
check("stream: 200 and [DONE]-free llama events end with stop", status == 200 and events and
      events[-1].get("stop") is True, str(events[-1:]))
check("stream: the same text as the whole answer",
      "".join(e.get("content", "") for e in events) == whole.get("content"), str(events))

# bad fields: 400 naming the field
for body, want in (({"input_suffix": "x"}, '"input_prefix" is required'),
                   ({"input_prefix": "x"}, '"input_suffix" is required'),
                   ({"input_prefix": "x", "input_suffix": 5}, '"input_suffix" must be a string'),
                   ({"input_prefix": {"a": 1}, "input_suffix": ""}, '"input_prefix" must be'),
                   (dict(BASIC, prompt=7), '"prompt" must be a string'),
                   (dict(BASIC, prompt=[1, 2]), '"prompt" must be a string'),
                   (dict(BASIC, input_extra="x"), '"input_extra" must be an array'),
                   (dict(BASIC, input_extra=[{"filename": "a"}]), '"input_extra"[0].text'),
                   (dict(BASIC, input_extra=["text"]), '"input_extra"[0].text'),
                   (dict(BASIC, input_extra=[{"text": "a"}, {"text": "b", "filename": 3}]),
                    '"input_extra"[1].filename'),
                   (dict(BASIC, input_extra=[{"text": "a", "path": "b"}]),
                    '"input_extra"[0] has the field "path"'),
                   (dict(BASIC, temperature="hot"), '"temperature"'),
                   (dict(BASIC, n_predict=-5), '"n_predict"'),
                   (dict(BASIC, bogus=1), 'unknown field "bogus": /infill')):
    status, got, _ = psm.post("/infill", body)
    msg = got.get("error", {}).get("message", "") if isinstance(got, dict) else str(got)
    check("400 for %s" % want, status == 400 and want in msg, "%d %r" % (status, got))
status, got, _ = psm.request("POST", "/infill", raw=b"[1, 2]")
check("a body that is not an object: 400", status == 400, str(got))
psm.stop()

# --spm-infill: suffix first; the same equality with the tokens in that order
spm = serve_util.Server(RECUR, fim3, "--spm-infill")
spm_tokens = same_as_completion("SPM", spm, BASIC, spm=True)
check("SPM: suffix before prefix", spm_tokens.index(SUF) < spm_tokens.index(PRE), str(spm_tokens))
check("SPM: the same tokens as PSM, in another order",
      sorted(spm_tokens) == sorted(psm_tokens) and spm_tokens != psm_tokens)
spm.stop()

# REP and SEP: the repository-level pattern
repo = serve_util.Server(RECUR, fim5)
rp = same_as_completion("extra (repository)", repo, dict(BASIC, input_extra=extra), repo=True)
check("extra (repository): REP first, a SEP per file and one before the prefix",
      rp[0] == REP and rp.count(SEP) == len(extra) + 1, str(rp))
same_as_completion("no extra (repository)", repo, BASIC, repo=True)
repo.stop()

# a model without FIM tokens: llama-server's 501 and words
plain = serve_util.Server(RECUR, PLAIN)
status, got, _ = plain.post("/infill", BASIC)
msg = got.get("error", {}).get("message", "") if isinstance(got, dict) else str(got)
check("no FIM tokens: 501 not_supported_error", status == 501 and
      got["error"]["type"] == "not_supported_error", "%d %r" % (status, got))
check("no FIM tokens: the message names the missing tokens",
      msg == "Infill is not supported by this model: prefix token is missing. suffix token is "
      "missing. middle token is missing. ", msg)
plain.stop()

shutil.rmtree(tmp)
print("test_serve_infill: %d passed, %d failed" % (counts["passed"], counts["failed"]))
sys.exit(counts.exit_status())
