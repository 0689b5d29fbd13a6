#!/usr/bin/env bats
# Every tool has a man page that renders without warnings and documents every option --help lists.

load common

setup() { cd "$NMT_SRCDIR"; }

@test "every tool has a man page" {
    for t in $(nmt_tools); do
        [ -f "man/$t.1" ] || { echo "missing man/$t.1"; return 1; }
    done
}

@test "every man page renders without warnings" {
    command -v groff >/dev/null || skip "groff not installed"
    for m in man/*.[1-9]; do
        out=$(groff -man -ww -z "$m" 2>&1)
        [ -z "$out" ] || { echo "$m: $out"; return 1; }
        if command -v man >/dev/null; then
            out=$(MANWIDTH=80 man -l "$m" 2>&1 >/dev/null)
            [ -z "$out" ] || { echo "$m: $out"; return 1; }
        fi
    done
}

@test "every option in --help is documented in the tool's man page" {
    for t in $(nmt_tools); do
        page=$(sed 's/\\-/-/g; s/\\f[BIRP]//g' "man/$t.1")
        for opt in $("$NMT_BIN/$t" --help | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u); do
            grep -qF -- "$opt" <<< "$page" || { echo "$t: $opt is not in man/$t.1"; return 1; }
        done
    done
}
