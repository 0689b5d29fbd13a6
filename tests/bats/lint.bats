#!/usr/bin/env bats
# tests/bats-lint.py: finds each Bats pattern that cannot fail a test or can fail it by chance,
# passes a clean file, and finds nothing in the suite itself.

load common

lint() { python3 "$NMT_SRCDIR/tests/bats-lint.py" "$@"; }

setup() {
    cd "$BATS_TEST_TMPDIR"
}

# writes a suite with one test whose body is the arguments, one line each
suite() {
    { echo '#!/usr/bin/env bats'; echo 'load common'; echo '@test "t" {'; printf '    %s\n' "$@"; echo '}'; } > t.bats
}

@test "a '! cmd' line before the end of a test is found" {
    suite '! cmp -s a b' 'echo done'
    run lint t.bats
    [ "$status" -eq 1 ]
    [[ "$output" == "t.bats:4: '! cmd' before the test's last line never fails it"* ]]
    [ "${#lines[@]}" -eq 1 ]
}

@test "'! cmd' as the last line is fine (its status is the test's)" {
    suite 'echo start' '! cmp -s a b'
    run lint t.bats
    [ "$status" -eq 0 ]
    [ -z "$output" ]
}

@test "an 'A && B' line before the end of a test is found, also across a continuation" {
    suite '[ "$status" -eq 2 ] && [ "$output" = x ]' '[ -s a ] && \' '    [ -s b ]' 'echo done'
    run lint t.bats
    [ "$status" -eq 1 ]
    [ "${#lines[@]}" -eq 2 ]
    [[ "${lines[0]}" == "t.bats:4: 'A && B' before"* ]]
    [[ "${lines[1]}" == "t.bats:5: 'A && B' before"* ]]
}

@test "&& inside quotes, a command substitution, a subshell or control flow is not a chain" {
    suite 'awk '"'"'$1 == a && $2 > b'"'"' f' 'x=$(true && echo 1)' '( cd / && ls )' \
        'for f in a b; do [ -e "$f" ] && break; done' '[ -n "$x" ] && return 1 || true' "echo 'a && b'" 'echo done'
    run lint t.bats
    [ "$status" -eq 0 ]
    [ -z "$output" ]
}

@test "&& inside a quoted string spanning lines is not a chain" {
    suite "awk 'NF != 4 { exit 1 }" '     \$1 == l && \$3 > s { exit 1 }'"'"' f' 'echo done'
    run lint t.bats
    [ "$status" -eq 0 ]
}

@test "'|| skip' after a command under test is found; after a probe it is fine" {
    suite 'diff a b || skip "they differ"' 'command -v zstd >/dev/null || skip "no zstd"' \
        '[ -w /dev/full ] || skip "no /dev/full"' 'echo done'
    run lint t.bats
    [ "$status" -eq 1 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ "${lines[0]}" == "t.bats:4: '|| skip' after a command under test"* ]]
}

@test "a suite that does not load common (pipefail) is found" {
    printf '#!/usr/bin/env bats\n@test "t" {\n    true\n}\n' > t.bats
    run lint t.bats
    [ "$status" -eq 1 ]
    [[ "$output" == "t.bats:1: does not 'load common'"* ]]
}

@test "a pipe into a reader that may stop before its end is found, with the line of the reader" {
    suite 'echo "$page" | grep -q -- "$o" || { echo "missing $o"; false; }' \
        'nmt-cat a.nmt |' '    head -1 > first' \
        'if ldconfig -p 2>/dev/null | grep -qF libcuda; then echo yes; fi' \
        'x=$(nmt-cat a.nmt | sed -n "/seed/{p;q}")' \
        'nmt-decode -i a.en | cmp want -' \
        "nmt-cat a.nmt | awk '\$1 > 2 { exit 1 }'" \
        'nmt-cat a.nmt | grep --max-count=1 x' \
        'echo done'
    run lint t.bats
    [ "$status" -eq 1 ]
    [ "${#lines[@]}" -eq 7 ]
    [[ "${lines[0]}" == "t.bats:4: 'grep -q' stops at its first match: its writer may die of SIGPIPE"* ]]
    [[ "${lines[1]}" == "t.bats:6: 'head' stops"* ]]
    [[ "${lines[2]}" == "t.bats:7: 'grep -qF' stops"* ]]
    [[ "${lines[3]}" == "t.bats:8: 'sed' with a q command"* ]]
    [[ "${lines[4]}" == "t.bats:9: 'cmp' reading a pipe"* ]]
    [[ "${lines[5]}" == "t.bats:10: 'awk' with an exit"* ]]
    [[ "${lines[6]}" == "t.bats:11: 'grep --max-count=1' stops"* ]]
    for l in "${lines[@]}"; do [[ "$l" == *"under pipefail by chance"* ]]; done
}

@test "a racy pipe in a helper function or setup is found too" {
    printf '%s\n' '#!/usr/bin/env bats' 'load common' 'setup() {' '    nmt-cat a.nmt | head -c 8 > magic' '}' \
        'has() {' '    nmt-cat "$1" | grep -q "$2"' '}' '@test "t" {' '    has a.nmt seed' '}' > t.bats
    run lint t.bats
    [ "$status" -eq 1 ]
    [ "${#lines[@]}" -eq 2 ]
    [[ "${lines[0]}" == "t.bats:4: 'head' stops"* ]]
    [[ "${lines[1]}" == "t.bats:7: 'grep -q' stops"* ]]
}

@test "here-strings, files, process substitutions and readers of their whole input are fine" {
    suite 'grep -q -- "$o" <<< "$page"' 'nmt-cat a.nmt > a.txt' 'head -1 a.txt' 'cmp want <(nmt-cat a.nmt)' \
        'diff <(nmt-cat a.nmt | head -3) want' 'nmt-cat a.nmt | same_as want' 'nmt-cat a.nmt | grep -c seed' \
        "nmt-cat a.nmt | grep 'a|b' | sort" 'nmt-cat a.nmt | sed -n 1,60p' 'nmt-cat a.nmt | head -n -1' \
        "nmt-cat a.nmt | awk '\$1 > 2 { bad = 1 } END { exit bad }'" 'nmt-cat a.nmt | grep -e -q -e -m x' \
        'nmt-cat a.nmt || grep -q x a.txt' "echo 'a | head -1'" 'echo done # | grep -q x'
    run lint t.bats
    [ "$status" -eq 0 ]
    [ -z "$output" ]
}

@test "every pattern in one file: one finding each, with its line" {
    suite '! true' 'true && false' 'false || skip x' 'seq 9 | head -1' 'echo end'
    run lint t.bats
    [ "$status" -eq 1 ]
    [ "${#lines[@]}" -eq 4 ]
    [[ "${lines[0]}" == t.bats:4:* ]]
    [[ "${lines[1]}" == t.bats:5:* ]]
    [[ "${lines[2]}" == t.bats:6:* ]]
    [[ "${lines[3]}" == t.bats:7:* ]]
}

@test "what the lint finds does fail under Bats: pipefail and fails() from common.bash" {
    # a pipeline whose first stage fails fails the test (common.bash sets pipefail), also when it
    # dies of SIGPIPE because the reader stopped early (yes never ends: it always does); the same
    # match on a here-string passes
    { echo '#!/usr/bin/env bats'; echo "load '$NMT_SRCDIR/tests/bats/common'"
      echo '@test "p" {'; echo '    false | cat'; echo '    true'; echo '}'
      echo '@test "f" {'; echo '    fails true'; echo '    true'; echo '}'
      echo '@test "g" {'; echo '    fails false'; echo '}'
      echo '@test "r" {'; echo '    yes | grep -q y'; echo '    true'; echo '}'
      echo '@test "h" {'; echo '    page=$(seq 100000)'; echo '    grep -q "^1$" <<< "$page"'; echo '}'; } > p.bats
    run bats --tap p.bats
    [ "$status" -ne 0 ]
    [[ "$output" == *"not ok 1 p"* ]]
    [[ "$output" == *"not ok 2 f"* ]]
    [[ "$output" == *"ok 3 g"* ]]
    [[ "$output" == *"not ok 4 r"* ]]
    [[ "$output" == *"ok 5 h"* ]]
}

@test "same_as of common.bash: its input, read to the end, is the file, byte for byte" {
    seq 100000 > big
    seq 100000 | same_as big
    printf '1\n' | fails same_as big
    printf '1\n2\n' > small
    # a long input that differs early is still read to its end: its writer does not die of SIGPIPE
    run bash -c 'source "$1"; seq 100000 | same_as small; echo "${PIPESTATUS[*]}"' _ \
        "$NMT_SRCDIR/tests/bats/common.bash"
    [ "$status" -eq 0 ]
    [ "${lines[-1]}" = "0 1" ]
    [[ "${lines[0]}" == "cmp: EOF on small after byte 4"* ]]
}

@test "the suite itself has none of these patterns" {
    run lint "$NMT_SRCDIR"/tests/bats/*.bats "$NMT_SRCDIR"/tests/bats/common.bash
    [ "$status" -eq 0 ]
    [ -z "$output" ]
}
