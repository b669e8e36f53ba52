"""What the server benchmarks share: the test suite's server helpers (tests/serve/serve_util.py,
fake_redis.py) on the import path, the flags every one takes (--recur, --model), and a
percentile."""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "serve"))


def parser(doc):
    """An argument parser with --recur (required) and --model (the shipped model)."""
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--recur", required=True, help="the recur binary to measure")
    ap.add_argument("--model", default=os.path.join(HERE, "..", "models",
                                                    "recur-mamba-fortunes.gguf"))
    return ap


def pct(xs, p):
    """The p-th percentile of xs (the element at that rank), NaN for none."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))] if xs else float("nan")
