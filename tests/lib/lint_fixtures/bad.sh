#!/usr/bin/env bash
# Planted sites for scripts/lint_tests.py --self-test: every line that ends in "# planted"
# reads $? after a command substitution in the same command; the lint must name exactly those.
. ../check.sh
recur run -p x >out 2>err
check "run exits 0 ($(head -c 200 err))" [ $? -eq 0 ] # planted
recur run -p x >out 2>err
check "run exits 0 ($(tail -c 300 err))" \
    [ $? -eq 0 ] # planted
recur run -p x >out 2>err
check "run exits 0 (`cat err`)" [ $? -eq 0 ] # planted
out=$(recur tokenize -p x) rc=$? # planted
echo "$(cat err)" $(($? + 1)) # planted
x="$(recur run "$(cat prompt)" $?)" # planted
cat <<'END'
$(inside a here-document) $? is text
END
check "after a here-document ($(cat err))" [ "$?" = 0 ] # planted
check "in a string over lines ($(cat err)
    still the same command)" test $? -eq 0 # planted
finish bad
