#!/usr/bin/env bash
# Set-up shared by run.sh and test.sh: installs the Debian packages recur needs (only those
# missing, so a second run asks apt nothing), then configures and builds one build folder.
#   scripts/setup.sh BUILD_DIR BUILD_TYPE [extra cmake -D flags...]
set -euo pipefail

build_dir=$1
build_type=$2
shift 2

# gcc, ninja and cmake build it; libxxhash-dev gives the checksums of state streams
# (compiled in from its header); libpcre2-dev the tokenizer's pre-tokenizer pattern (linked:
# libpcre2-8); libmicrohttpd-dev recur serve's HTTP; libcjson-dev the JSON of recur serve and
# of the library's JSON schemas; python3-numpy runs the reference of the model tests;
# python3-jinja2 renders the real chat templates that the chat template test compares recur
# with; python3-regex the independent reference of the 'default' pre-tokenizer
# (tests/ref/gen_vocab_default.py, run by ctest); python3-jsonschema validates the grammar tests'
# JSON outputs; node and npm the openai client of the server tests; chromium the browser
# that the web page's test (tests/serve/webui, playwright-core from npm) drives; curl the
# server examples of the docs, which the docs' test runs (scripts/doc_commands.py).
packages=(gcc libc6-dev cmake ninja-build libxxhash-dev libpcre2-dev libmicrohttpd-dev
    libcjson-dev libhiredis-dev redis-server nginx-light python3 python3-numpy python3-jinja2 python3-regex python3-jsonschema curl)
# Node.js may come from elsewhere than Debian (the machines here have it); only when there is
# none are Debian's packages installed.
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)
# the same for the browser: any chromium on PATH does, else Debian's
command -v chromium >/dev/null 2>&1 || packages+=(chromium)

missing=()
for p in "${packages[@]}"; do
    if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}" >&2
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

root=$(cd "$(dirname "$0")/.." && pwd)
# Configuring an existing build folder takes a fraction of a second and picks up changed flags.
generator=()
[ -f "$root/$build_dir/CMakeCache.txt" ] || generator=(-G Ninja)
cmake -S "$root" -B "$root/$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE="$build_type" "$@" >/dev/null
cmake --build "$root/$build_dir" -j "$(nproc)"

# the official openai npm package and the Vercel AI SDK, for the server tests (locked in
# tests/serve/openai): installed again whenever the lock changed, which a copy of the lock
# kept beside the packages (node_modules/.recur-lock) tells
openai_dir="$root/tests/serve/openai"
if ! cmp -s "$openai_dir/package-lock.json" "$openai_dir/node_modules/.recur-lock"; then
    (cd "$openai_dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    cp "$openai_dir/package-lock.json" "$openai_dir/node_modules/.recur-lock"
fi
# the official Anthropic npm package, for /v1/messages' test (locked in tests/serve/anthropic)
if [ ! -d "$root/tests/serve/anthropic/node_modules/@anthropic-ai/sdk" ]; then
    (cd "$root/tests/serve/anthropic" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
# playwright-core (no browser download: it drives the chromium above), for tests/serve/webui
if [ ! -d "$root/tests/serve/webui/node_modules/playwright-core" ]; then
    (cd "$root/tests/serve/webui" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
