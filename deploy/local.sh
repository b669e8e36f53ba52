#!/usr/bin/env bash
# Redis, N `recur serve` replicas and nginx in front of them, on loopback: the layout of
# deploy/README.md on one machine, for trying it and for the tests.
#
#   deploy/local.sh up DIR [N] [-- extra recur serve flags]   start; prints nginx's URL
#   deploy/local.sh down DIR                                   stop everything started in DIR
#
# DIR holds the generated nginx.conf, the pids, ports and logs. Ports are picked free.
# Environment: RECUR (the recur binary, default build-test/tools/recur), RECUR_MODEL (the
# model, default the shipped one).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 up|down DIR [N] [-- flags]" >&2; exit 2; }

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_port() { # port, seconds
    for _ in $(seq 1 $(( $2 * 20 ))); do
        if (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null; then return 0; fi
        sleep 0.05
    done
    echo "local.sh: nothing listens on port $1 after $2 s" >&2
    return 1
}

case "$cmd" in
up)
    n=${3:-3}
    shift 3 || shift $#
    [ "${1:-}" = "--" ] && shift
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    recur=${RECUR:-$root/build-test/tools/recur}
    model=${RECUR_MODEL:-$root/models/recur-mamba-fortunes.gguf}
    rport=$(free_port)
    # no persistence: Redis is a cache here; a bounded memory, least recently used out first
    redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no \
        --maxmemory 256mb --maxmemory-policy allkeys-lru --daemonize no \
        >"$dir/redis.log" 2>&1 &
    echo $! >"$dir/redis.pid"
    echo "$rport" >"$dir/redis.port"
    wait_port "$rport" 10
    upstreams=""
    for i in $(seq 1 "$n"); do
        p=$(free_port)
        "$recur" serve -m "$model" --port "$p" -t 1 \
            --prefix-cache-store "redis://127.0.0.1:$rport" "$@" >"$dir/replica$i.log" 2>&1 &
        echo $! >"$dir/replica$i.pid"
        echo "$p" >"$dir/replica$i.port"
        upstreams+="        server 127.0.0.1:$p max_fails=1 fail_timeout=10s;"$'\n'
    done
    for i in $(seq 1 "$n"); do wait_port "$(cat "$dir/replica$i.port")" 60; done
    nport=$(free_port)
    mkdir -p "$dir/body" "$dir/proxy" "$dir/fastcgi" "$dir/uwsgi" "$dir/scgi"
    python3 - "$here/nginx.conf.in" "$dir/nginx.conf" "$dir" "127.0.0.1:$nport" "$upstreams" <<'PY'
import sys
src, dst, prefix, listen, ups = sys.argv[1:]
t = open(src).read().replace("@PREFIX@", prefix).replace("@LISTEN@", listen)
open(dst, "w").write(t.replace("@UPSTREAMS@", ups.rstrip("\n")))
PY
    nginx=$(command -v nginx || echo /usr/sbin/nginx)
    "$nginx" -p "$dir" -c "$dir/nginx.conf" >"$dir/nginx.out" 2>&1 &
    echo $! >"$dir/nginx.pid.own"
    echo "$nport" >"$dir/nginx.port"
    wait_port "$nport" 10
    echo "http://127.0.0.1:$nport"
    ;;
down)
    [ -d "$dir" ] || exit 0
    for f in "$dir"/nginx.pid.own "$dir"/replica*.pid "$dir"/redis.pid; do
        [ -f "$f" ] || continue
        kill "$(cat "$f")" 2>/dev/null || true
    done
    for f in "$dir"/nginx.pid.own "$dir"/replica*.pid "$dir"/redis.pid; do
        [ -f "$f" ] || continue
        pid=$(cat "$f")
        for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
        kill -9 "$pid" 2>/dev/null || true
        rm -f "$f"
    done
    ;;
*)
    echo "usage: $0 up|down DIR [N] [-- flags]" >&2
    exit 2
    ;;
esac
