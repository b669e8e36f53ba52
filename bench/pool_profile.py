#!/usr/bin/env python3
"""Where a token's time goes between the thread pool's calls: runs a recur built with
-DRECUR_POOL_PROFILE=ON and reads the table its pool prints when it is freed.

    bench/pool_profile.py --recur build-prof/tools/recur -- bench -m MODEL -p 0 -n 128 -np 1 -t 2

Everything after -- is recur's command line. Per function the pool ran (named from the binary's
symbols by nm), per call: the caller's serial time before it (gap: the workers spin), worker 1's
lag to start, the caller's and worker 1's time in it, and the caller's wait for the workers; and
per token (--tokens N, default the command's -n times its runs and warm-up) the sum of each.
"""

import argparse
import bisect
import re
import subprocess
import sys

ROW = re.compile(r"rpool profile: fn rpool_run([+-]\d+) calls (\d+) gap ([\d.]+) lag ([\d.]+) "
                 r"caller ([\d.]+) worker ([\d.]+) wait ([\d.]+)")


def symbols(binary):
    """The binary's text symbols as a sorted list of (address, name), and rpool_run's address."""
    out = subprocess.run(["nm", binary], capture_output=True, text=True, check=True).stdout
    syms = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "tTwW":
            syms.append((int(parts[0], 16), parts[2]))
    syms.sort()
    base = next(a for a, n in syms if n == "rpool_run")
    return syms, base


def name_at(syms, addr):
    i = bisect.bisect_right([a for a, _ in syms], addr) - 1
    return syms[i][1] if i >= 0 else hex(addr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recur", required=True, help="a recur built with -DRECUR_POOL_PROFILE=ON")
    ap.add_argument("--tokens", type=int, default=0,
                    help="tokens the command decodes (default: bench's -n x (-r + 1))")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="-- and recur's arguments")
    a = ap.parse_args()
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    run = subprocess.run([a.recur] + args, capture_output=True, text=True)
    sys.stdout.write(run.stdout)
    rows = [m.groups() for m in map(ROW.search, run.stderr.splitlines()) if m]
    if run.returncode != 0 or not rows:
        sys.exit("recur failed or printed no profile (built without RECUR_POOL_PROFILE?):\n" +
                 run.stderr[-2000:])
    tokens = a.tokens
    if not tokens and args[:1] == ["bench"]:
        opt = dict(zip(args[1::1], args[2::1]))
        tokens = int(opt.get("-n", "128")) * (int(opt.get("-r", "5")) + 1)
    syms, base = symbols(a.recur)
    print("| function | calls | gap us | lag us | caller us | worker us | wait us |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    tot = [0.0] * 5
    for off, calls, gap, lag, caller, worker, wait in rows:
        calls = int(calls)
        vals = [float(v) for v in (gap, lag, caller, worker, wait)]
        print("| %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f |" %
              ((name_at(syms, base + int(off)), calls) + tuple(vals)))
        if "probe" not in name_at(syms, base + int(off)):
            tot = [t + v * calls for t, v in zip(tot, vals)]
    if tokens:
        print("\nper token (%d tokens, the machine probe left out): gaps %.1f us, lag %.1f us, "
              "caller in calls %.1f us, worker in calls %.1f us, caller waiting %.1f us" %
              ((tokens,) + tuple(t / tokens for t in tot)))


if __name__ == "__main__":
    main()
