#!/bin/bash
# ab_qdot.sh: two versions of x86/qdot_k.h (the K types' integer products) timed in one process,
# their AVX-512 builds taking turns round by round, so that a shared machine's swings (which
# moved whole runs of `recur bench` by 30% from one minute to the next) fall on both alike.
#
#   bench/ab_qdot.sh A.h B.h [TYPE THREADS ROUNDS LAYERS [N] [, TYPE THREADS ...]]
#
# A.h and B.h are two copies of src/ops/x86/qdot_k.h (say `git show HEAD~1:src/ops/x86/qdot_k.h
# > /tmp/a.h` and the working tree's); each is built into a copy of ops_avx512.c whose kernel
# table alone stays global (rops_kernels_avx512_A / _B), against build/librecur_internal.a (the
# README's build). Each group of numbers after them (groups apart by a lone ",") is one run of
# bench/ab_qdot.c, whose comment says what they are (default: q4_K, one input, in cache and from
# memory, one and two threads).
# Needs an AVX-512 + VNNI CPU.
set -eu
[ $# -ge 2 ] || { sed -n '2,/^set -eu/p' "$0" | sed '$d'; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
lib=$root/build/librecur_internal.a
[ -f "$lib" ] || { echo "ab_qdot.sh: $lib missing: build the project first (README)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
variant() { # NAME HEADER
    mkdir -p "$work/$1/src"
    cp -r "$root/src/." "$work/$1/src/"
    cp "$2" "$work/$1/src/ops/x86/qdot_k.h"
    gcc -O3 -std=c11 -D_POSIX_C_SOURCE=200809L -DNDEBUG -fvisibility=hidden -mavx512f -mavx512bw \
        -mavx512vl -mavx512dq -mavx512vnni -mavx2 -mfma -mf16c -I"$root/include" \
        -Drops_kernels_avx512=rops_kernels_avx512_$1 -c "$work/$1/src/ops/ops_avx512.c" \
        -o "$work/$1/raw.o"
    objcopy --keep-global-symbol=rops_kernels_avx512_$1 "$work/$1/raw.o" "$work/$1.o"
}
variant A "$1"
variant B "$2"
shift 2
gcc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -o "$work/ab_qdot" "$root/bench/ab_qdot.c" \
    "$work/A.o" "$work/B.o" -I"$root/src" "$lib" -lm -lpthread
if [ $# -eq 0 ]; then set -- 12 1 20 1 , 12 1 8 48 , 12 2 8 48; fi
args=()
for a in "$@" ,; do
    if [ "$a" = , ]; then
        [ ${#args[@]} -eq 0 ] || "$work/ab_qdot" "${args[@]}"
        args=()
    else
        args+=("$a")
    fi
done
