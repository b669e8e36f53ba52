#!/usr/bin/env python3
"""test_grammar_gen.py: structured output from the shipped model, checked independently.

    test_grammar_gen.py WHAT GRAMMAR_GEN RECUR MODEL DATA_DIR

WHAT is a grammar of tests/data/grammars (without .gbnf), "schema" or "cli".
 - A grammar: 200 outputs sampled at temperature 1.0 (tests/cli/grammar_gen.c, the public API),
   at most TOKENS tokens each. An output that ended with end of sequence must be a complete
   parse for gbnf_earley.py, a recognizer written apart from the engine; one cut at the
   length limit must be a viable prefix for it (a trailing incomplete UTF-8 character is
   allowed there, when its bytes can start a character). For json.gbnf and json_arr.gbnf, a
   complete output must also load with Python's json.
 - schema: tests/data/grammars/schema-10.json (10 properties: strings with lengths and a
   pattern, bounded integers, enum, const, a nested object, arrays, anyOf, $ref) through
   recur_json_schema_to_grammar; 200 outputs that must all end (the schema bounds every
   length) and pass Python's json and jsonschema (Debian's python3-jsonschema).
 - cli: `recur run --grammar / --grammar-file / --json-schema`: output that follows the
   grammar, exit status 2 with line and column for bad grammars and schemas.
"""

import json
import os
import subprocess
import sys
import tempfile

try:
    import jsonschema
except ImportError:
    # Debian's python3-jsonschema belongs to /usr/bin/python3, which may not be first in PATH.
    if os.path.exists("/usr/bin/python3") and not os.environ.get("RECUR_GRAMMAR_REEXEC"):
        os.environ["RECUR_GRAMMAR_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    jsonschema = None

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gbnf_earley  # noqa: E402

# 200 outputs; the sanitizer build asks for fewer (tests/CMakeLists.txt), and says so
N_OUT = int(os.environ.get("RECUR_GRAMMAR_OUTPUTS", "200"))
if N_OUT != 200:
    print("NOTE: %d outputs per grammar instead of 200 (sanitizer build)" % N_OUT)
TOKENS = {"json": 48, "json_arr": 48}  # others: 32
failures = []
passes = [0]


def check(cond, msg):
    if cond:
        passes[0] += 1
    else:
        failures.append(msg)
        print("FAIL:", msg, file=sys.stderr)


def generate(gen, model, flag, path, n_out, n_tok, seed):
    r = subprocess.run([gen, model, flag, path, str(n_out), str(n_tok), str(seed)],
                       capture_output=True, timeout=900)
    if r.returncode != 0:
        sys.exit("grammar_gen failed: " + r.stderr.decode(errors="replace"))
    outs = []
    for line in r.stdout.decode().splitlines():
        done, _, hexed = line.partition(" ")
        outs.append((done == "1", bytes.fromhex(hexed)))
    if len(outs) != n_out:
        sys.exit("grammar_gen printed %d outputs, not %d" % (len(outs), n_out))
    return outs


def split_utf8_tail(b):
    """(text, tail): tail is an incomplete UTF-8 character at the end of b, if any."""
    for k in range(1, 4):
        if len(b) >= k:
            lead = b[-k]
            need = 2 if lead >> 5 == 6 else 3 if lead >> 4 == 14 else 4 if lead >> 3 == 30 else 0
            if need > k and all(x >> 6 == 2 for x in b[len(b) - k + 1:]):
                return b[:-k].decode("utf-8"), b[-k:]
    return b.decode("utf-8"), b""


def test_grammar(name, gen, model, data):
    path = os.path.join(data, "grammars", name + ".gbnf")
    with open(path, encoding="utf-8") as f:
        g = gbnf_earley.Grammar(f.read())
    outs = generate(gen, model, "--grammar-file", path, N_OUT, TOKENS.get(name, 32), 1)
    n_complete = 0
    for i, (done, raw) in enumerate(outs):
        try:
            text, tail = split_utf8_tail(raw)
        except UnicodeDecodeError:
            check(False, "%s output %d is not UTF-8: %r" % (name, i, raw))
            continue
        if done:
            n_complete += 1
            check(not tail and g.accepts(text), "%s output %d ended but is not a complete parse: %r"
                  % (name, i, raw))
            if name in ("json", "json_arr"):
                try:
                    json.loads(text)
                except ValueError as e:
                    check(False, "%s output %d ended but is not JSON (%s): %r" % (name, i, e, text))
        else:
            check(g.viable_prefix(text), "%s output %d is not a viable prefix: %r" % (name, i, raw))
            if tail:  # some character of the grammar could still start with these bytes
                check(len(tail) < 4, "%s output %d: tail %r" % (name, i, tail))
    print("%s: %d outputs (%d complete, %d cut at the length limit) checked"
          % (name, len(outs), n_complete, len(outs) - n_complete))


def test_schema(gen, model, data):
    if jsonschema is None:
        sys.exit("test_grammar_gen: python3-jsonschema is required (scripts/setup.sh installs it)")
    path = os.path.join(data, "grammars", "schema-10.json")
    with open(path) as f:
        schema = json.load(f)
    validator = jsonschema.Draft202012Validator(schema)
    outs = generate(gen, model, "--schema-file", path, N_OUT, 600, 7)
    for i, (done, raw) in enumerate(outs):
        check(done, "schema output %d did not end within 600 tokens: %r" % (i, raw))
        try:
            doc = json.loads(raw.decode("utf-8"))
        except ValueError as e:
            check(False, "schema output %d is not JSON (%s): %r" % (i, e, raw))
            continue
        errors = [e.message for e in validator.iter_errors(doc)]
        check(not errors, "schema output %d does not match the schema: %s: %r" % (i, errors, raw))
    print("schema: %d outputs valid JSON matching the schema" % len(outs))


def run(recur, model, *args):
    return subprocess.run([recur, "run", "-m", model, "-p", "Q:", "-n", "24"] + list(args),
                          capture_output=True, timeout=300)


def test_cli(recur, model, data):
    r = run(recur, model, "--temp", "1", "--grammar", 'root ::= ("yes" | "no") "!"')
    out = r.stdout.decode(errors="replace")
    check(r.returncode == 0 and out.strip() in ("Q:yes!", "Q:no!"),
          "run --grammar: %d %r %r" % (r.returncode, out, r.stderr))
    r = run(recur, model, "--grammar-file", os.path.join(data, "grammars", "chess.gbnf"),
            "--lookup", "4", "--temp", "0")
    out = r.stdout.decode(errors="replace")
    g = gbnf_earley.Grammar(open(os.path.join(data, "grammars", "chess.gbnf")).read())
    check(r.returncode == 0 and out.startswith("Q:") and g.viable_prefix(out[2:].rstrip("\n")),
          "run --grammar-file --lookup: %d %r" % (r.returncode, out))
    # with the prompt cache: the second run restores the prompt's state, same grammar, same text
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "p.cache")
        args = ["--temp", "0", "--grammar", 'root ::= [a-z ]+ "."', "--prompt-cache", cache]
        r1, r2 = run(recur, model, *args), run(recur, model, *args)
        o1, o2 = r1.stdout.decode(errors="replace"), r2.stdout.decode(errors="replace")
        check(r1.returncode == 0 and r2.returncode == 0 and o1 == o2 and
              gbnf_earley.Grammar('root ::= [a-z ]+ "."').viable_prefix(o1[2:].rstrip("\n")) and
              "(1 reused)" in r2.stderr.decode(), "run --grammar --prompt-cache: %r %r %r"
              % (o1, o2, r2.stderr))
    schema = '{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}'
    r = run(recur, model, "-n", "64", "--json-schema", schema)
    out = r.stdout.decode(errors="replace")
    try:
        doc = json.loads(out[2:])
    except ValueError:
        doc = None
    check(r.returncode == 0 and isinstance(doc, dict) and list(doc) == ["ok"] and
          isinstance(doc["ok"], bool), "run --json-schema: %d %r" % (r.returncode, out))
    # bad input: exit status 2, what and where
    bad = [
        (["--grammar", 'root ::= "a" b'], "line 1, column 14: undefined rule 'b'"),
        (["--grammar", 'root ::= "a"\n  x ::= [a-'], "line 2, column 9: unterminated"),
        (["--grammar", "root ::= root"], "left recursion"),
        (["--json-schema", '{"type":"string","format":"email"}'], "'format' 'email' is not supported"),
        (["--json-schema", "{"], "not valid JSON"),
        (["--grammar", 'root ::= "a"', "--json-schema", "{}"], "at most one of"),
    ]
    for args, msg in bad:
        r = run(recur, model, *args)
        err = r.stderr.decode(errors="replace")
        check(r.returncode == 2 and msg in err, "%s: exit %d, %r" % (args, r.returncode, err))
    with tempfile.NamedTemporaryFile("w", suffix=".gbnf", delete=False) as f:
        f.write("root ::= [0-9]+\n\nnum ::= (\n")
    r = run(recur, model, "--grammar-file", f.name)
    os.unlink(f.name)
    err = r.stderr.decode(errors="replace")
    check(r.returncode == 2 and "line 3, column 9" in err, "grammar file: %r" % err)
    r = run(recur, model, "--grammar-file", "/nonexistent.gbnf")
    check(r.returncode == 1 and "/nonexistent.gbnf" in r.stderr.decode(), "missing grammar file")
    print("cli: checked")


def main():
    what, gen, recur, model, data = sys.argv[1:6]
    if what == "schema":
        test_schema(gen, model, data)
    elif what == "cli":
        test_cli(recur, model, data)
    else:
        test_grammar(what, gen, model, data)
    print("test_grammar_gen %s: %d passed, %d failed" % (what, passes[0], len(failures)))
    if passes[0] == 0:
        print("FAIL: no check ran", file=sys.stderr)
    sys.exit(1 if failures or passes[0] == 0 else 0)


if __name__ == "__main__":
    main()
