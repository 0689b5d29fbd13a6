#!/usr/bin/env bash
# Benchmark of nmt-tokenize | nmt-vocab against SentencePiece (spm_train / spm_encode), side by side
# in one run: BPE learning (8000 pieces, joint en+de) on Multi30k train and on a 10x corpus (Multi30k
# repeated with perturbed words), encoding throughput with peak memory, and pieces per sentence.
# Run from the repository root after `make`:  flock /tmp/nmt-bench.lock bash bench/tok.sh
set -eu
B=${NMT_BIN:-$PWD/bin}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
zcat data/multi30k/train.en.gz > "$W/en"
zcat data/multi30k/train.de.gz > "$W/de"
cat "$W/en" "$W/de" > "$W/ende"
# 10x: ten copies; in copies 1..9 every word is perturbed with probability 0.3 (a letter doubled,
# dropped or swapped), so the corpus has many more distinct words, like a larger real corpus.
python3 - "$W" <<'PY'
import random, sys
w = sys.argv[1]
rng = random.Random(1)
def perturb(word):
    if len(word) < 3 or rng.random() > 0.3: return word
    i = rng.randrange(1, len(word) - 1); op = rng.randrange(3)
    if op == 0: return word[:i] + word[i] + word[i:]
    if op == 1: return word[:i] + word[i+1:]
    return word[:i] + word[i+1] + word[i] + word[i+2:]
for side in ("en", "de"):
    lines = open(f"{w}/{side}", encoding="utf-8").read().split("\n")[:-1]
    with open(f"{w}/{side}10", "w", encoding="utf-8") as f:
        for k in range(10):
            for l in lines:
                f.write((l if k == 0 else " ".join(perturb(x) for x in l.split(" "))) + "\n")
PY
cat "$W/en10" "$W/de10" > "$W/ende10"

best() { # best wall time and its peak RSS over 3 runs of a shell command: prints "secs maxrss_kb"
    local b=999999 m=0
    for i in 1 2 3; do
        /usr/bin/time -f "%e %M" -o "$W/t" bash -c "$1" > /dev/null
        read -r s k < "$W/t"
        if awk -v s="$s" -v b="$b" 'BEGIN{exit !(s<b)}'; then b=$s; m=$k; fi
    done
    echo "$b $m"
}

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
echo "corpus: multi30k train en+de $(wc -l < "$W/ende") lines, $(wc -c < "$W/ende") bytes; 10x: $(wc -l < "$W/ende10") lines, $(wc -c < "$W/ende10") bytes"
for c in "" 10; do
    n=$(best "$B/nmt-tokenize --src $W/en$c --tgt $W/de$c | $B/nmt-vocab -s 8000 -o $W/nmt$c.vocab")
    s=$(best "spm_train --input=$W/ende$c --model_prefix=$W/spm$c --model_type=bpe --vocab_size=8000 --character_coverage=1.0 --minloglevel=2 --input_sentence_size=100000000")
    set -- $n $s
    echo "learn${c:+ 10x}: nmt ${1}s ${2}KB  spm ${3}s ${4}KB  speedup $(awk -v a="$1" -v b="$3" 'BEGIN{printf "%.1f", b/a}')x"
done
for c in "" 10; do
    n=$(best "$B/nmt-tokenize --vocab $W/nmt.vocab $W/ende$c -o /dev/null")
    s=$(best "spm_encode --model=$W/spm.model --output_format=id < $W/ende$c")
    set -- $n $s
    lines=$(wc -l < "$W/ende$c")
    echo "encode${c:+ 10x} ($lines lines): nmt ${1}s ${2}KB $(awk -v l="$lines" -v t="$1" 'BEGIN{printf "%.0f", l/t}') lines/s  spm ${3}s ${4}KB $(awk -v l="$lines" -v t="$3" 'BEGIN{printf "%.0f", l/t}') lines/s  speedup $(awk -v a="$1" -v b="$3" 'BEGIN{printf "%.1f", b/a}')x"
done
for f in train val test_2016_flickr; do
    for l in en de; do
        zcat data/multi30k/$f.$l.gz > "$W/x"
        a=$("$B/nmt-tokenize" --vocab "$W/nmt.vocab" --text=ids "$W/x" | awk '{n+=NF} END{printf "%.3f", n/NR}')
        b=$(spm_encode --model="$W/spm.model" < "$W/x" | awk '{n+=NF} END{printf "%.3f", n/NR}')
        echo "pieces/sentence $f.$l: nmt $a  spm $b  diff $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%+.2f%%", 100*(a-b)/b}')"
    done
done
