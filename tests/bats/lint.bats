#!/usr/bin/env bats
# tests/bats-lint.py: finds each Bats pattern that cannot fail a test, passes a clean file, and
# finds nothing in the suite itself.

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

@test "every pattern in one file: one finding each, with its line" {
    suite '! true' 'true && false' 'false || skip x' 'echo end'
    run lint t.bats
    [ "$status" -eq 1 ]
    [ "${#lines[@]}" -eq 3 ]
    [[ "${lines[0]}" == t.bats:4:* ]]
    [[ "${lines[1]}" == t.bats:5:* ]]
    [[ "${lines[2]}" == t.bats:6:* ]]
}

@test "what the lint finds does fail under Bats: pipefail and fails() from common.bash" {
    # a pipeline whose first stage fails fails the test (common.bash sets pipefail)
    { echo '#!/usr/bin/env bats'; echo "load '$NMT_SRCDIR/tests/bats/common'"
      echo '@test "p" {'; echo '    false | cat'; echo '    true'; echo '}'
      echo '@test "f" {'; echo '    fails true'; echo '    true'; echo '}'
      echo '@test "g" {'; echo '    fails false'; echo '}'; } > p.bats
    run bats --tap p.bats
    [ "$status" -ne 0 ]
    [[ "$output" == *"not ok 1 p"* ]]
    [[ "$output" == *"not ok 2 f"* ]]
    [[ "$output" == *"ok 3 g"* ]]
}

@test "the suite itself has none of these patterns" {
    run lint "$NMT_SRCDIR"/tests/bats/*.bats
    [ "$status" -eq 0 ]
    [ -z "$output" ]
}
