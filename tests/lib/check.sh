# Shared by the shell tests (source it): a scratch folder $work removed on exit, pass / fail /
# skip counters, the checks, and the closing line.
#
# A test ends with `finish NAME`, which prints "NAME: N passed, N failed" (", N skipped" when
# a check was skipped) and exits 1 when a check failed or none passed (a run that checked
# nothing proves nothing), 77 (ctest's SKIP_RETURN_CODE) when a check was skipped and none
# failed, else 0. A test that ends any other way with status 0 (a stray `exit`, a `return` at
# the top level) exits 1: what came after was never checked.
#
# In a check's arguments, `$?` must be read before any `$(...)`: a command substitution sets
# it (to 0 in the usual case), so read it right after the command, `rc=$?`, and check "$rc".
# scripts/lint_tests.py enforces this.
work=$(mktemp -d)
passed=0
failed=0
skipped=0
check_finished=false

check_on_exit() {
    local rc=$?
    rm -rf "$work"
    if ! $check_finished && [ "$rc" -eq 0 ]; then
        echo "FAILED: the test ended before its closing line (finish): later checks never ran" >&2
        exit 1
    fi
}
trap check_on_exit EXIT

check() { # check NAME COMMAND...: the command must succeed
    local name=$1
    shift
    if "$@"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAILED: $name" >&2
    fi
}

# expect_exit NAME CODE MESSAGE COMMAND...: exit status CODE and MESSAGE on stderr
expect_exit() {
    local name=$1 code=$2 msg=$3
    shift 3
    "$@" >"$work/out" 2>"$work/err"
    local got=$?
    if [ "$got" -eq "$code" ] && { [ -z "$msg" ] || grep -aqF -- "$msg" "$work/err"; }; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAILED: $name: exit $got (want $code), stderr: $(head -c 300 "$work/err")" >&2
    fi
}

# skip NAME WHY: a check that cannot run here; never counted as passed, and it makes the whole
# test a skip (exit 77) unless another check failed
skip() {
    skipped=$((skipped + 1))
    echo "SKIPPED: $1 ($2)"
}

# finish NAME: the closing line, and the exit status (see the top)
finish() {
    check_finished=true
    local extra=""
    [ "$skipped" -eq 0 ] || extra=", $skipped skipped"
    echo "$1: $passed passed, $failed failed$extra"
    if [ "$failed" -ne 0 ]; then
        exit 1
    elif [ "$passed" -eq 0 ]; then
        echo "$1: no check ran" >&2
        exit 1
    elif [ "$skipped" -ne 0 ]; then
        exit 77
    fi
    exit 0
}
