# Shared by the shell tests (source it): a scratch folder $work removed on exit, pass / fail
# counters, and the two checks.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0

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
