#!/usr/bin/env bats
# Usage errors across every tool: exit 2, one line naming the tool and what was wrong, then the
# --help hint; and short options that mean the same in every tool (nmt-bleu keeps sacreBLEU's).

load common

setup() { cd "$BATS_TEST_TMPDIR"; }

# Fails unless the last `run` was a usage error of tool $1 whose message matches the regex $2:
# status 2, "TOOL: ..." (the tool's name, however it was started), then the --help hint, nothing more.
usage_error() {
    [ "$status" -eq 2 ] || { echo "$1: status $status, not 2: $output"; return 1; }
    [ "${#lines[@]}" -eq 2 ] || { echo "$1: ${#lines[@]} lines, not 2: $output"; return 1; }
    [[ "${lines[0]}" == "$1: "* ]] || { echo "$1: first line does not name the tool: ${lines[0]}"; return 1; }
    [[ "${lines[0]}" =~ $2 ]] || { echo "$1: '${lines[0]}' does not match '$2'"; return 1; }
    [ "${lines[1]}" = "Try '$1 --help' for more information." ] || { echo "$1: no --help hint: $output"; return 1; }
}

@test "usage: the tools are all found (nmt and the twelve nmt-* programs)" {
    [ "$(nmt_tools | tr '\n' ' ')" = "nmt nmt-avg nmt-backends nmt-batch nmt-bleu nmt-cat nmt-decode nmt-export nmt-import nmt-serve nmt-tokenize nmt-train nmt-vocab " ]
}

@test "usage: an unknown long option exits 2 in every tool, naming it, with the --help hint" {
    for t in $(nmt_tools); do
        run "$NMT_BIN/$t" --no-such-option < /dev/null
        usage_error "$t" "option.*'--no-such-option'"
    done
}

@test "usage: an unknown short option exits 2 in every tool, naming it, with the --help hint" {
    for t in $(nmt_tools); do
        run "$NMT_BIN/$t" -Z < /dev/null
        usage_error "$t" "option.*'-?Z'"
    done
}

@test "usage: every option that takes a value exits 2 without one, in every tool" {
    n=0
    for t in $(nmt_tools); do
        for opt in $("$NMT_BIN/$t" --help | grep -oE -- '--[a-z][a-z0-9-]* [A-Z]' | cut -d' ' -f1 | sort -u); do
            run "$NMT_BIN/$t" "$opt" < /dev/null
            usage_error "$t" "'$opt'.*(argument|value)"
            n=$((n + 1))
        done
    done
    [ "$n" -gt 60 ] # the help texts were read: every tool but nmt has options with values
}

@test "usage: a value given to an option that takes none exits 2" {
    for t in $(nmt_tools); do
        [ "$t" = nmt ] && continue # the dispatcher takes no such options
        run "$NMT_BIN/$t" --help=x < /dev/null
        usage_error "$t" "'--help"
    done
}

@test "usage: a short option means the same long option in every tool that has it (nmt-bleu: sacreBLEU's)" {
    for t in $(nmt_tools); do
        [ "$t" = nmt-bleu ] && continue
        "$NMT_BIN/$t" --help | grep -oE -- '^ +-[a-zA-Z], --[a-z][a-z0-9-]*' | sed "s/^ *//; s/,//; s/$/ $t/"
    done > shorts.txt
    [ "$(grep -c . shorts.txt)" -gt 30 ]
    # one long name per letter
    awk '{ if (($1 in long) && long[$1] != $2) { print $1 ": " long[$1] " (" tool[$1] ") and " $2 " (" $3 ")"; bad = 1 }
           long[$1] = $2; tool[$1] = $3 } END { exit bad }' shorts.txt
    grep -qx -- '-v --vocab nmt-train' shorts.txt
    grep -qx -- '-v --vocab nmt-tokenize' shorts.txt
    # and a tool accepts no short option its help does not list: each letter of another tool is unknown
    for t in $(nmt_tools); do
        [ "$t" = nmt-bleu ] && continue
        for s in $(cut -d' ' -f1 shorts.txt | sort -u); do
            grep -q -- "^$s .* $t\$" shorts.txt && continue
            run "$NMT_BIN/$t" "$s" 1 < /dev/null
            usage_error "$t" "(invalid|unknown|unrecognized) option.*'?${s#-}'"
        done
    done
}

@test "usage: an option value out of range or of the wrong kind exits 2 naming the option" {
    run nmt-batch --max-tokens x;            usage_error nmt-batch "--max-tokens 'x'"
    run nmt-vocab --size 12;                 usage_error nmt-vocab "--size '12'"
    run nmt-cat --head -3;                   usage_error nmt-cat "--head.*'-3'"
    run nmt-decode -m m.ckpt --beam 0;       usage_error nmt-decode "--beam '0'"
    run nmt-tokenize --dropout 2;            usage_error nmt-tokenize "--dropout '2'"
    run nmt-train -o m.ckpt --warmup x;      usage_error nmt-train "--warmup 'x'"
    run nmt-backends --threads x;            usage_error nmt-backends "'x'"
    run nmt-bleu -w x r.txt;                 usage_error nmt-bleu "'x'"
    run nmt-avg -o a.ckpt;                   usage_error nmt-avg "checkpoint"
    [ ! -e m.ckpt ]
    [ ! -e a.ckpt ]
}
