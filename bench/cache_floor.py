#!/usr/bin/env python3
"""What one layer of the speed models costs with its weights in the caches, set against the
time the machine's memory takes to deliver it: the most of the probe's bandwidth that
single-sequence generation can reach on this machine with these kernels, however well its
reads overlap its work.

    bench/cache_floor.py [--recur PATH] [--type TYPE] [--rounds N] [--threads T]
                         [--only FAMILY[,FAMILY...]] [--dir DIR] [--no-repack]

For each family (bench/speed.sh's shapes: Mamba and Mamba-2 130M, RWKV-6 and RWKV-7 0.1B),
`recur mkmodel` makes two f16 models with few layers and a vocabulary of 512 (an output matrix
of 0.4 MB, where the full files' is 32 MB), and `recur quantize` rewrites them in TYPE (default
Q4_K_M). The larger one is 12-24 MB: a token's weights stay in the 32 MiB L3 between tokens,
so what a token costs is the threads' work, the kernels, the scans and the hand-offs, without
the memory's noise. Each model runs

    recur bench -m M -p 0 -n 256 -np 1 -t T -r 5 --no-probe --json

in alternated rounds; the fastest run of each (neighbours only ever slow a run down). One layer
is the difference of the two models' token times over the difference of their layer counts, and
its bytes the difference of their bytes read a token (weights and state, as recur bench counts
them). Then one probe (`recur bench` on the smaller model) gives the memory's read rate, and the
table sets the layer's time in the caches against its bytes at that rate:

    ceiling = min(1, bytes a layer / cache time a layer / probe's GB/s)

Below 1, two threads cannot compute a layer as fast as the memory delivers it at that moment,
so no overlap of reads and work brings the layers to the probe's rate. The probe moves with
the neighbours (31-58 GB/s within an hour on the machines of bench/RESULTS.md); the cache time
barely does, which also makes it the figure to compare two builds by.
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = os.path.join(ROOT, "tests", "data", "ggml-vocab-gpt-2.gguf")

# family: mkmodel's shape flags (bench/speed.sh's), and the two layer counts
FAMILIES = {
    "mamba": (["--arch", "mamba", "--embd", "768", "--state", "16", "--inner", "1536",
               "--dt-rank", "48"], 3, 5),
    "mamba2": (["--arch", "mamba2", "--embd", "768", "--state", "128", "--heads", "24",
                "--groups", "1"], 3, 5),
    "rwkv6": (["--arch", "rwkv6", "--embd", "768", "--head-size", "64"], 2, 4),
    "rwkv7": (["--arch", "rwkv7", "--embd", "768", "--head-size", "64"], 2, 4),
}


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return p.stdout


def bench_json(recur, model, threads, probe, extra=()):
    """recur bench's JSON (it prints its table after the object)."""
    cmd = [recur, "bench", "-m", model, "-p", "0", "-n", "256" if not probe else "16", "-np",
           "1", "-t", str(threads), "-r", "5" if not probe else "1", "--json"] + list(extra)
    if not probe:
        cmd.append("--no-probe")
    return json.JSONDecoder().raw_decode(run(cmd))[0]


def model(recur, folder, family, layers, qtype):
    """The family's model of `layers` layers in qtype, made when missing."""
    flags, _, _ = FAMILIES[family]
    f16 = os.path.join(folder, f"{family}-L{layers}-f16.gguf")
    out = os.path.join(folder, f"{family}-L{layers}-{qtype}.gguf")
    if not os.path.exists(out):
        if not os.path.exists(f16):
            run([recur, "mkmodel", f16] + flags + ["--layers", str(layers), "--vocab", "512",
                                                   "--seed", "1", "--type", "f16",
                                                   "--vocab-file", VOCAB])
        run([recur, "quantize", f16, out, qtype])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recur", default=os.path.join(ROOT, "build", "tools", "recur"))
    ap.add_argument("--type", default="Q4_K_M", help="llama-quantize file type (default Q4_K_M)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default=",".join(FAMILIES))
    ap.add_argument("--dir", default=os.path.join(ROOT, "build", "floor"),
                    help="where the small models are made (default build/floor)")
    ap.add_argument("--no-repack", action="store_true",
                    help="recur bench --no-repack: the file's layout only, without the "
                         "interleaved copies the one-input kernels read")
    a = ap.parse_args()
    families = a.only.split(",")
    for f in families:
        if f not in FAMILIES:
            sys.exit(f"--only: unknown family {f!r} (known: {', '.join(FAMILIES)})")
    if a.rounds < 1 or a.threads < 1:
        sys.exit("--rounds and --threads must be at least 1")
    os.makedirs(a.dir, exist_ok=True)
    files = {(f, n): model(a.recur, a.dir, f, n, a.type)
             for f in families for n in FAMILIES[f][1:]}
    best = {}  # (family, layers) -> (us a token, bytes a token)
    for r in range(a.rounds):
        order = list(files) if r % 2 == 0 else list(reversed(files))
        for key in order:
            d = bench_json(a.recur, files[key], a.threads, False,
                           ["--no-repack"] if a.no_repack else [])
            us = 1e6 / d["results"][0]["max_tps"]
            w = d["weights"]
            nbytes = w["bytes_per_token"] + w["state_bytes_per_seq"]
            if key not in best or us < best[key][0]:
                best[key] = (us, nbytes)
    probe = bench_json(a.recur, files[(families[0], FAMILIES[families[0]][1])], a.threads,
                       True)["machine"]["read_gbps"]
    print(f"{a.type}{' --no-repack' if a.no_repack else ''}, {a.threads} threads, fastest of "
          f"{a.rounds} rounds; probe {probe:.1f} GB/s")
    print("| family | cache us a token (layers) | cache us a layer | MB a layer | cache GB/s "
          "| memory us a layer at the probe | ceiling |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for f in families:
        _, lo, hi = FAMILIES[f]
        (t0, b0), (t1, b1) = best[(f, lo)], best[(f, hi)]
        us, mb = (t1 - t0) / (hi - lo), (b1 - b0) / (hi - lo) / 1e6
        gbps = mb / us * 1e3
        mem_us = mb / probe * 1e3
        print(f"| {f} | {t0:.1f} ({lo}), {t1:.1f} ({hi}) | {us:.1f} | {mb:.3f} | {gbps:.1f} | "
              f"{mem_us:.1f} | {min(1.0, gbps / probe):.0%} |")


if __name__ == "__main__":
    main()
