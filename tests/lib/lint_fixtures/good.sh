#!/usr/bin/env bash
# Planted code for scripts/lint_tests.py --self-test that reads $? correctly: the lint must
# pass it.
. ../check.sh
recur run -p x >out 2>err
rc=$?
check "run exits 0 ($(head -c 200 err))" [ "$rc" -eq 0 ]
out=$(recur tokenize -p x); rc=$?
out=$(recur tokenize -p x) && echo "$?"
out=$(recur tokenize -p x) || echo "failed: $?"
check "cmp in the substitution" [ "$(cmp -s a b; echo $?)" = 1 ]
echo '$(not run) $?' "$?" $'\n' "$(cat err)"
# a comment: check "$(cat err)" [ $? -eq 0 ]
echo $? "$(cat err)"
n=$((1 + 2)) m=$?
cat <<EOT
$(cat err) $? in an unquoted here-document: not a command
EOT
echo "${#out} $(cat err)" 2>&1 | cat; echo $?
( recur run -p x ); echo $?
case $out in a) echo "$(cat err)" ;; *) echo $? ;; esac
tr -d x <<<"$(cat err)"; echo $?
finish good
