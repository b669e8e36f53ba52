#!/usr/bin/env python3
"""The layering check: every #include goes down the layer order of docs/architecture.md.

The order is the table under the heading "## The layer order" in docs/architecture.md (the
script reads it there, so the document and the check cannot drift): a row `| LEVEL | MODULES |
...` puts the modules (comma-separated folders; `A + B` is one module of two folders) at LEVEL.
It fails (exit 1, one line per breach, each naming the file, the line and what it breaks) when

  - a file of a module includes a file of another module whose level is not below its own;
  - a file under tools/ (other than tools/dev/) includes a header under src/: the programs
    see the library only through include/recur.h;
  - a test or benchmark compiles a library or program source itself (a .c under src/ or tools/
    named in an add_executable, add_library or target_sources of a CMakeLists.txt under
    tests/ or bench/, or #included by a file under tests/ or bench/): tests link recur,
    recur_internal or recur_serve instead.

    python3 scripts/check_layers.py [ROOT]      (default: the tree this script is in)
    python3 scripts/check_layers.py --self-test (the trees in tests/lib/layer_fixtures/*.txt)
Python's standard library only.
"""
import os
import re
import sys
import tempfile

HEADING = "## The layer order"
ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*([^|]+?)\s*\|")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
SOURCE_EXT = (".c", ".h")
# tools/dev may reach under the public API (it links recur_internal), so it is exempt from the
# rule on src/ headers; it still may include only what is below it.
SRC_ALLOWED = ("tools/dev",)


def read_order(root):
    """{module path: level} from the table under HEADING, or an error message."""
    path = os.path.join(root, "docs", "architecture.md")
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        return None, f"{path}: cannot read the layer order: {e.strerror}"
    try:
        start = lines.index(HEADING)
    except ValueError:
        return None, f"{path}: no heading '{HEADING}' with the layer order"
    order, folders = {}, {}
    for n, line in enumerate(lines[start + 1:], start + 2):
        if line.startswith("## "):
            break
        m = ROW.match(line)
        if not m:
            continue
        for mod in m.group(2).split(","):
            paths = [p.strip().strip("`").rstrip("/") for p in mod.split("+")]
            for p in paths:
                if p in folders:
                    return None, f"{path}:{n}: folder {p} is in the layer order twice"
                folders[p] = paths[0]
            order[paths[0]] = int(m.group(1))
    if not order:
        return None, f"{path}: the table under '{HEADING}' has no rows"
    return Order(order, folders), None


class Order(dict):
    """{module: level}; .folders maps each folder to its module (a module may have several)."""

    def __init__(self, levels, folders):
        super().__init__(levels)
        self.folders = folders


def module_of(rel, order):
    """The module of the longest folder of the order that holds rel, or None."""
    best = None
    for folder in getattr(order, "folders", order):
        if rel == folder or rel.startswith(folder + "/"):
            if best is None or len(folder) > len(best):
                best = folder
    return None if best is None else getattr(order, "folders", {best: best})[best]


def resolve(root, rel, quote, name, order):
    """The tree-relative path an include names, or None (a system header). A quoted include is
    looked up beside the file first; then, as the build's include paths do, in src/ and
    include/, and for the programs in each folder of tools/."""
    cands = []
    if quote == '"':
        cands.append(os.path.join(os.path.dirname(rel), name))
    cands += [os.path.join("src", name), os.path.join("include", name)]
    folders = getattr(order, "folders", {})
    cands += [os.path.join(d, name) for d in sorted(folders) if d.startswith("tools/")]
    for c in cands:
        c = os.path.normpath(c)
        if not c.startswith("..") and os.path.isfile(os.path.join(root, c)):
            return c.replace(os.sep, "/")
    return None


def walk(root, top, exts):
    for d, dirs, files in os.walk(os.path.join(root, top)):
        dirs[:] = sorted(x for x in dirs if not x.startswith(("build", ".", "node_modules")))
        for f in sorted(files):
            if f.endswith(exts):
                yield os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")


def check_includes(root, order):
    errors = []
    for top in ("src", "tools"):
        for rel in walk(root, top, SOURCE_EXT):
            mod = module_of(rel, order)
            if mod is None:
                errors.append(f"{rel}: in no module of the layer order (docs/architecture.md)")
                continue
            with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target = resolve(root, rel, m.group(1), m.group(2), order)
                    if target is None:
                        continue
                    if (rel.startswith("tools/") and target.startswith("src/")
                            and not mod.startswith(SRC_ALLOWED)):
                        errors.append(f"{rel}:{n}: {mod} includes {target}, a header under src/"
                                      " (the programs see only include/recur.h)")
                        continue
                    tmod = module_of(target, order)
                    if tmod is None or tmod == mod:
                        continue
                    if order[tmod] >= order[mod]:
                        errors.append(f"{rel}:{n}: {mod} (level {order[mod]}) includes {target}"
                                      f" of {tmod} (level {order[tmod]}), which is not below it")
    return errors


def cmake_commands(text):
    """(name, arguments, line) of each command of a CMake file, comments dropped."""
    text = re.sub(r"#[^\n]*", "", text)
    for m in re.finditer(r"\b(add_executable|add_library|target_sources)\s*\(", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        yield m.group(1), text[m.end():i - 1], text.count("\n", 0, m.start()) + 1


def check_tests(root):
    errors = []
    for top in ("tests", "bench"):
        for rel in walk(root, top, ("CMakeLists.txt",)):
            here = os.path.dirname(rel)
            with open(os.path.join(root, rel), encoding="utf-8") as f:
                text = f.read()
            for cmd, args, n in cmake_commands(text):
                for arg in args.split():
                    arg = arg.strip('"')
                    if not arg.endswith(".c"):
                        continue
                    path = arg.replace("${PROJECT_SOURCE_DIR}/", "").replace(
                        "${CMAKE_SOURCE_DIR}/", "").replace("${CMAKE_CURRENT_SOURCE_DIR}", here)
                    if "${" in path:
                        continue
                    if arg == path:
                        path = os.path.join(here, path)
                    path = os.path.normpath(path).replace(os.sep, "/")
                    if path.startswith(("src/", "tools/")):
                        errors.append(f"{rel}:{n}: {cmd} compiles {path} into a test: link the"
                                      " library that holds it (recur_internal, recur_serve)")
        for rel in walk(root, top, SOURCE_EXT):
            with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if m and m.group(2).endswith(".c"):
                        target = resolve(root, rel, m.group(1), m.group(2), {})
                        if target and target.startswith(("src/", "tools/")):
                            errors.append(f"{rel}:{n}: includes the source {target}: link the"
                                          " library that holds it")
    return errors


def check(root):
    order, err = read_order(root)
    if err:
        return [err]
    return check_includes(root, order) + check_tests(root)


def self_test(here):
    """Each fixture (tests/lib/layer_fixtures/NAME.txt) is a tree of files, each after a line
    "=== PATH", written to a temporary folder; the check must name exactly the lines of its
    section EXPECT, in order."""
    base = os.path.join(here, "..", "tests", "lib", "layer_fixtures")
    failed = 0
    for name in sorted(f for f in os.listdir(base) if f.endswith(".txt")):
        files, cur = {}, None
        with open(os.path.join(base, name), encoding="utf-8") as f:
            for line in f.read().splitlines():
                if line.startswith("=== "):
                    cur = line[4:]
                    files[cur] = []
                elif cur is not None:
                    files[cur].append(line)
        want = [x for x in files.pop("EXPECT", []) if x]
        with tempfile.TemporaryDirectory() as tree:
            for path, lines in files.items():
                os.makedirs(os.path.join(tree, os.path.dirname(path)), exist_ok=True)
                with open(os.path.join(tree, path), "w", encoding="utf-8") as f:
                    f.write("\n".join(lines) + "\n")
            got = check(tree)
        if got != want:
            failed += 1
            print(f"layer_fixtures/{name}: expected {len(want)} breaches, got {len(got)}:")
            for line in got:
                print("  got:      " + line)
            for line in want:
                print("  expected: " + line)
        else:
            print(f"layer_fixtures/{name}: {len(got)} breaches, as expected")
    return 1 if failed else 0


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    if argv[1:] == ["--self-test"]:
        return self_test(here)
    root = argv[1] if len(argv) > 1 else os.path.join(here, "..")
    errors = check(root)
    for e in errors:
        print(e)
    if errors:
        n = len(errors)
        print(f"check_layers: {n} breach{'es' if n != 1 else ''} of the layer order"
              " (docs/architecture.md)")
        return 1
    print("check_layers: every include goes down the layer order; no test compiles a source")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
