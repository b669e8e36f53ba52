#!/usr/bin/env python3
"""recur and llama.cpp side by side on issue 21's table: the speed.sh models (Mamba f16, q8_0,
q4_0; Mamba-2, RWKV-6, RWKV-7 f16), each program's runs of a model back to back, the order
swapped every other round, so that both see the same minutes of a noisy machine.

    bench/side_by_side.py --llama DIR [--recur PATH] [--models DIR] [--rounds N] [--threads T]
                          [--only NAME[,NAME...]] [--types TYPE[,TYPE...]] [--out FILE]

DIR holds llama-bench and llama-batched-bench, built by whoever runs this, outside the
repository (the issue says how); this script builds nothing. --models (default build/speed)
holds the models, made there by `bench/speed.sh DIR --families --models-only` when missing.
--only: model names as the table prints them (mamba-f16, mamba-q8_0, mamba-q4_0, mamba2,
rwkv6, rwkv7). --types: instead of the table's files, the four families' f16 models rewritten by
`recur quantize F16 OUT TYPE` in each TYPE (a llama-quantize file type: Q4_K_M, Q6_K, ...; made
in the models folder when missing), named FAMILY-TYPE (mamba-Q4_K_M, ...), every column run.

The commands, per model and round:
  recur bench -m M -p 512 -n 128 -np 1 -t T -r 2 --json          pp512, tg128 (median of 2)
  recur bench -m M -p 1 -n 64 -np 4,16,64 -t T -r 2 --json       4, 16, 64 sequences
  llama-bench -m M -p 512 -n 128 -t T -r 2 -o json               pp512, tg128 (mean of 2)
  llama-batched-bench -m M -c 8192 -b 2048 -ub 512 -npp 32 -ntg 64 -npl 4,16,64 -t T
      --output-format jsonl                                      S_TG of 4, 16, 64 sequences
(the sequence columns for the f16 models only, as in the issue). Each cell of the table: every
round's figure of both programs and the ratio of their bests. The CPU model and its vector
flags head the table: record both with the figures (bench/RESULTS.md).
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name in the table, file in the models folder, whether the sequence columns run
MODELS = [
    ("mamba-f16", "mamba-130m-shape-f16.gguf", True),
    ("mamba-q8_0", "mamba-130m-shape-q8_0.gguf", False),
    ("mamba-q4_0", "mamba-130m-shape-q4_0.gguf", False),
    ("mamba2", "mamba2-130m-shape-f16.gguf", True),
    ("rwkv6", "rwkv6-0.1b-shape-f16.gguf", True),
    ("rwkv7", "rwkv7-0.1b-shape-f16.gguf", True),
]
# the f16 model of each family, which --types quantizes
FAMILIES = [("mamba", "mamba-130m-shape-f16.gguf"), ("mamba2", "mamba2-130m-shape-f16.gguf"),
            ("rwkv6", "rwkv6-0.1b-shape-f16.gguf"), ("rwkv7", "rwkv7-0.1b-shape-f16.gguf")]
SEQS = [4, 16, 64]
TESTS = ["pp512", "tg128"] + ["%d seqs" % n for n in SEQS]


def run(cmd):
    """stdout of cmd; a failure stops the script with the command and its stderr."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit("side_by_side: %s failed (exit %d):\n%s" % (" ".join(cmd), p.returncode,
                                                             p.stderr[-2000:]))
    return p.stdout


def recur_figures(recur, model, threads, seqs):
    out = {}
    d = json.loads(run([recur, "bench", "-m", model, "-p", "512", "-n", "128", "-np", "1",
                        "-t", str(threads), "-r", "2", "--json"]))
    for r in d["results"]:
        if r["test"] in ("pp512", "tg128"):
            out[r["test"]] = r["median_tps"]
    if seqs:
        d = json.loads(run([recur, "bench", "-m", model, "-p", "1", "-n", "64", "-np",
                            ",".join(str(n) for n in SEQS), "-t", str(threads), "-r", "2",
                            "--json"]))
        for r in d["results"]:
            if r["n_seq"] in SEQS:
                out["%d seqs" % r["n_seq"]] = r["median_tps"]
    return out


def llama_figures(bindir, model, threads, seqs):
    out = {}
    d = json.loads(run([os.path.join(bindir, "llama-bench"), "-m", model, "-p", "512", "-n",
                        "128", "-t", str(threads), "-r", "2", "-o", "json"]))
    for r in d:
        if r["n_prompt"] == 512 and r["n_gen"] == 0:
            out["pp512"] = r["avg_ts"]
        elif r["n_prompt"] == 0 and r["n_gen"] == 128:
            out["tg128"] = r["avg_ts"]
    if seqs:
        text = run([os.path.join(bindir, "llama-batched-bench"), "-m", model, "-c", "8192",
                    "-b", "2048", "-ub", "512", "-npp", "32", "-ntg", "64", "-npl",
                    ",".join(str(n) for n in SEQS), "-t", str(threads), "--output-format",
                    "jsonl"])
        for line in text.splitlines():
            if line.startswith("{"):
                r = json.loads(line)
                if r.get("pl") in SEQS:
                    out["%d seqs" % r["pl"]] = r["speed_tg"]
    return out


def machine():
    info = {"model name": "?", "cpu family": "?", "model": "?", "flags": ""}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                k = k.strip()
                if k in info and info[k] in ("?", ""):
                    info[k] = v.strip()
    except OSError:
        pass
    flags = sorted(f for f in info["flags"].split()
                   if f.startswith(("avx", "fma", "f16c", "amx")))
    return "%s (family %s, model %s), %d CPUs; %s" % (info["model name"], info["cpu family"],
                                                      info["model"], os.cpu_count() or 0,
                                                      " ".join(flags))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama", required=True, help="folder of llama-bench, llama-batched-bench")
    ap.add_argument("--recur", default=os.path.join(ROOT, "build", "tools", "recur"))
    ap.add_argument("--models", default=os.path.join(ROOT, "build", "speed"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="")
    ap.add_argument("--types", default="")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    a.recur, a.models = os.path.abspath(a.recur), os.path.abspath(a.models)
    types = [x for x in a.types.split(",") if x]
    models = MODELS
    if types:
        models = [("%s-%s" % (fam, t), "%s-%s.gguf" % (fam, t), True)
                  for fam, _ in FAMILIES for t in types]
    names = [m[0] for m in models]
    only = [x for x in a.only.split(",") if x]
    for x in only:
        if x not in names:
            sys.exit("side_by_side: --only %s: not one of %s" % (x, ", ".join(names)))
    if a.rounds < 1:
        sys.exit("side_by_side: --rounds %d: at least 1" % a.rounds)
    for tool in ("llama-bench", "llama-batched-bench"):
        if not os.access(os.path.join(a.llama, tool), os.X_OK):
            sys.exit("side_by_side: no executable %s in %s" % (tool, a.llama))
    if not os.access(a.recur, os.X_OK):
        sys.exit("side_by_side: no executable recur at %s (run ./run.sh once)" % a.recur)
    chosen = [m for m in models if not only or m[0] in only]
    need = [f for _, f in FAMILIES] if types else [f for _, f, _ in chosen]
    if any(not os.path.exists(os.path.join(a.models, f)) for f in need):
        env = dict(os.environ, RECUR=a.recur)
        subprocess.run([os.path.join(ROOT, "bench", "speed.sh"), a.models, "--families",
                        "--models-only"], check=True, env=env)
    for fam, f16 in FAMILIES if types else []:
        for t in types:
            out = os.path.join(a.models, "%s-%s.gguf" % (fam, t))
            if not os.path.exists(out):
                run([a.recur, "quantize", os.path.join(a.models, f16), out, t])

    # fig[name][test] = ([recur per round], [llama.cpp per round])
    fig = {m[0]: {t: ([], []) for t in TESTS} for m in chosen}
    for rnd in range(a.rounds):
        for name, f, seqs in chosen:
            path = os.path.join(a.models, f)
            order = ["recur", "llama"] if rnd % 2 == 0 else ["llama", "recur"]
            for prog in order:
                got = (recur_figures(a.recur, path, a.threads, seqs) if prog == "recur"
                       else llama_figures(a.llama, path, a.threads, seqs))
                for t, v in got.items():
                    fig[name][t][0 if prog == "recur" else 1].append(v)
            print("round %d, %s: done" % (rnd + 1, name), file=sys.stderr)

    lines = ["Machine: %s; %d threads, %d round%s, the order swapped every other round." %
             (machine(), a.threads, a.rounds, "" if a.rounds == 1 else "s"), "",
             "| model | test | recur t/s | llama.cpp t/s | recur / llama.cpp |",
             "|---|---|---|---|---:|"]
    for name, _, _ in chosen:
        for t in TESTS:
            r, l = fig[name][t]
            if not r and not l:
                continue
            ratio = "%.2fx" % (max(r) / max(l)) if r and l and max(l) > 0 else "?"
            lines.append("| %s | %s | %s | %s | %s |" % (
                name, t, ", ".join("%.1f" % v for v in r), ", ".join("%.1f" % v for v in l),
                ratio))
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
