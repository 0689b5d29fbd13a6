# Loaded by every suite (`load common`): a failing stage of a pipeline fails the pipeline, so a
# check fed by a pipeline or a process substitution's producer sees the failure; helpers.
set -o pipefail

# Runs a command that must fail (status not 0); a test line `fails cmd` fails the test when cmd
# succeeds, where a `! cmd` line before the test's end would not (set -e ignores `!`).
fails() {
    if "$@"; then
        echo "expected to fail: $*" >&2
        return 1
    fi
}

# Fails unless its standard input is the file $1, byte for byte. Unlike `cmp $1 -` it reads all of its
# input first, so the command writing to it never dies of SIGPIPE (a failure of its own under pipefail).
same_as() {
    local got st=0
    got=$(mktemp "$BATS_TEST_TMPDIR/same_as.XXXXXX")
    cat > "$got"
    cmp "$1" "$got" || st=$?
    rm -f "$got"
    return $st
}

# Shows checkpoint $1 without what names its run (the stored configuration of nmt-train, train.config):
# its other metadata, tensor names and shapes, and a checksum of the tensors' bytes. Two checkpoints of
# one model and training state show the same.
model_view() {
    nmt-cat "$1" | awk '/^train\.config\t/ { skip = 1; next } skip && /^\t/ { next } { skip = 0; print }'
    local n; n=$(od -An -tu8 -N8 "$1" | tr -d ' ')
    tail -c +$((9 + n)) "$1" | cksum
}

# Fails unless checkpoints $1 and $2 hold the same model and training state, bit for bit.
same_model() {
    cmp <(model_view "$1") <(model_view "$2")
}

# The names of the programs in $NMT_BIN (nmt and the nmt-* tools, not the plugins), one a line.
nmt_tools() {
    for t in "$NMT_BIN"/nmt "$NMT_BIN"/nmt-*; do
        [ -x "$t" ] && [ "${t%.so}" = "$t" ] && basename "$t"
    done
    return 0
}

# Skips the test unless this CPU can run the cpu plugin built on the tile emulation of
# plugins/cpu/amx.h (AVX-512 with VNNI); else sets AMXEMU to that plugin, which takes its AMX paths.
need_amxemu() {
    local flags f
    flags=" $(grep -m1 '^flags' /proc/cpuinfo) "
    for f in avx512f avx512dq avx512bw avx512vl avx512_vnni; do
        [[ "$flags" == *" $f "* ]] || skip "this CPU lacks $f: the emulated AMX path runs where the VNNI one would"
    done
    AMXEMU="$NMT_BIN/../build/tests/plugins/amxemu.so"
}

# Writes a small training set into $D: 2000 pairs of multi30k (tr.en, tr.de) and the next 100
# (va.en, va.de), a 500-piece vocabulary (v.txt), and their batches of 1500 tokens (tr.b, va.b).
small_training_set() {
    local M="$NMT_SRCDIR/data/multi30k"
    zcat "$M/train.en.gz" | sed -n 1,2000p > "$D/tr.en"
    zcat "$M/train.de.gz" | sed -n 1,2000p > "$D/tr.de"
    zcat "$M/train.en.gz" | sed -n 2001,2100p > "$D/va.en"
    zcat "$M/train.de.gz" | sed -n 2001,2100p > "$D/va.de"
    nmt-tokenize --src "$D/tr.en" --tgt "$D/tr.de" | nmt-vocab -s 500 -o "$D/v.txt" 2>/dev/null
    nmt-tokenize --src "$D/tr.en" --tgt "$D/tr.de" --vocab "$D/v.txt" | nmt-batch -t 1500 -o "$D/tr.b" 2>/dev/null
    nmt-tokenize --src "$D/va.en" --tgt "$D/va.de" --vocab "$D/v.txt" | nmt-batch -t 1500 -o "$D/va.b" 2>/dev/null
}
