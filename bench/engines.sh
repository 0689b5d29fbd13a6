#!/usr/bin/env bash
# nmt-decode against CTranslate2 and Marian on the same weights, side by side:
#   bash bench/engines.sh decode CHECKPOINT VOCAB SOURCE REFERENCE
# Exports CHECKPOINT with nmt-export (--to ctranslate2 in float32 and int8; --to marian when the model
# can be expressed there, then marian-conv makes its intgemm8 model), segments SOURCE once with VOCAB
# (the checkpoint's vocabulary), and gives every engine the same pre-segmented input (nmt-decode an
# ids stream, the others its pieces), the same beam, the same thread count and the same length bound
# (MAXLEN output pieces, default 256; Marian bounds the output by MARIAN_LENGTH_FACTOR, default 3, times
# the source's length instead, the only bound it has), no length normalisation in beam search (nmt-decode
# --alpha 0, ct2-translator --length_penalty 0, marian-decoder -n 0: one search), each in its fastest
# CPU setting:
#   nmt-decode --max-tokens 4096 (and its default of at most 16 sentences a batch on the cpu, sentences
#     joining the batch under way as others end) --threads T
#     --precision float32|NMT_INT8 (default int8-all: the output
#     projection in int8 too, as nmt-export --quantize int8 gives it to CTranslate2; NMT_INT8=int8
#     keeps it in float32; int8-a8-all, 8-bit activations, is nmt's fastest int8 on VNNI and AMX
#     CPUs, int8-a7-all on AVX2 ones)
#   ct2-translator --intra_threads T (ct2), and with T > 1 also --inter_threads T --intra_threads 1
#     (ct2i: T translators of one thread), each batching of CT2_BATCHES (default "tokens:4096
#     examples:32"), each its own columns, --compute_type float32|int8 (int8 on a CPU with AMX:
#     oneDNN capped at AVX-512 VNNI, its faster setting there)
#   marian-decoder --cpu-threads T (its workers, one thread each: OPENBLAS_NUM_THREADS=1, without
#     which Debian's OpenBLAS runs each worker's products on every core) --mini-batch 32 --maxi-batch 100
#     --maxi-batch-sort src; int8: the marian-conv -g intgemm8avx2 model (intgemm8avx512 when the CPU has
#     AVX-512 and NMT_CPU_ISA is not avx2)
# Rows: MODES (default "greedy beam4") x THREADS (default "1 2") x PRECISIONS (default
# "float32 int8"); ROUNDS (default 6) rounds, each running every engine of every row once in turn
# (interleaved), timed whole (process start and model load included) with /usr/bin/time, which also
# gives the peak RSS. Prints one line per run, then a Markdown table of medians: seconds, nmt's
# speed-up over each engine, peak RSS, BLEU (nmt-bleu against REFERENCE) and the number of lines
# identical to nmt-decode's float32 greedy output. ENGINES (default "nmt ct2 marian", nmt first) picks engines.
# CT2=DIR and MARIAN=DIR name the peers (default ../shared/peers/{ctranslate2,marian}; CT2's library
# is found in DIR/lib). NMT_CPU_ISA is passed to nmt-decode (avx2 caps CTranslate2, oneDNN and
# Marian's OpenBLAS too). Run it alone: timings need an idle machine.
#
#   bash bench/engines.sh train VOCAB TRAIN_SRC TRAIN_TGT VALID_SRC VALID_TGT
# nmt-train against Marian's CPU training (`marian --type transformer`): the same architecture, data,
# schedule and steps, side by side.
# VOCAB: an nmt vocabulary (nmt-vocab); the texts raw. Both engines read the same pieces: nmt-train an
# nmt-batch stream of MAX_TOKENS (default 4096) padded tokens a batch, Marian the pieces as text
# (nmt-tokenize --text=pieces) with the vocabulary as its .yml (written by nmt-export --to marian from
# the first nmt model), --mini-batch-words set to nmt's mean target tokens a step (both reported).
# The model: nmt's PRESET (default tiny) with the options Marian's transformer has
# (its positions, zero start, output bias, layer-norm epsilon 1e-6, ReLU as --transformer-ffn-activation
# relu); DROPOUT (default 0.1) on the residual branches and the embeddings (nmt-train --dropout, Marian's
# --transformer-dropout), label smoothing 0.1, Adam (0.9, 0.98, 1e-9), no clipping, the inverse square-root
# schedule with WARMUP (default 4000) warm-up steps at nmt's peak rate (--lr 1: d^-0.5 WARMUP^-0.5); both
# engines start from the same weights (nmt-train --save-init, exported to Marian's --pretrained-model). First
# a line on whether the two take the same steps: 40 updates of each on one batch, the losses compared
# (SAME_BATCH=0 skips it: on `base` it takes longer than the runs).
# STEPS updates (default 300), then the validation perplexity of each (the same measure: exp of the mean negative
# log-likelihood of the reference pieces and </s>, no label smoothing). For each thread count of THREADS
# (default "1 2"): target tokens/s (median of the logged rates after step LO, default 20), target tokens
# an update, peak RSS (/usr/bin/time), validation perplexity. TRAIN_PRECISIONS (default float32; also
# bf16) are nmt-train's --precision runs, each a row before Marian's (Marian trains in float32 on a
# CPU). On T > 1 threads each also as nmt-train --ranks T: T processes of one thread each, on batches of
# MAX_TOKENS / T (Marian's workers too split each update's batch), its memory the ranks' peaks added.
# Marian on T threads: T workers of one thread each (`marian`: --cpu-threads T,
# OPENBLAS_NUM_THREADS=1), and with T > 1 also one worker whose products use T threads
# (`marian/blas`: --cpu-threads 1, OPENBLAS_NUM_THREADS=T). Without OPENBLAS_NUM_THREADS Debian's
# OpenBLAS takes every core, whatever --cpu-threads says.
# WORK keeps the files (default a temporary folder). Run it alone: timings need an idle machine.
set -u
top=$(cd "$(dirname "$0")/.." && pwd); B=$top/bin
ct2=${CT2:-$top/../shared/peers/ctranslate2} marian=${MARIAN:-$top/../shared/peers/marian}
# NMT_CPU_ISA=avx2 stands for an AVX2 machine: CTranslate2 and its oneDNN capped likewise
if [ "${NMT_CPU_ISA:-}" = avx2 ]; then
    export CT2_FORCE_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2 ONEDNN_MAX_CPU_ISA=AVX2
fi
# On a CPU with AMX, oneDNN 2.6's int8 GEMM (CTranslate2's int8) is faster capped at AVX-512 VNNI
# (bench/RESULTS.md, "The int8 layer on AMX"): its int8 runs get that cap, its fastest setting,
# unless the caller capped oneDNN
ct2_int8_cap=()
if [ -z "${ONEDNN_MAX_CPU_ISA:-}${DNNL_MAX_CPU_ISA:-}" ] && grep -qw amx_int8 /proc/cpuinfo; then
    ct2_int8_cap=(env ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI DNNL_MAX_CPU_ISA=AVX512_CORE_VNNI)
fi
# Marian's OpenBLAS on the sgemm kernel nmt's cpu plugin gives its own (OpenBLAS names its kernels by
# CPU model and falls back to SSE3 ones on a model newer than its table): SkylakeX with AVX-512 (not
# under NMT_CPU_ISA=avx2), else Haswell with AVX2; OPENBLAS_CORETYPE set by the caller wins
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
    flags=" $(grep -m1 '^flags' /proc/cpuinfo) "
    if [ "${NMT_CPU_ISA:-}" != avx2 ] && [[ $flags == *" avx512f "* && $flags == *" avx512dq "* &&
        $flags == *" avx512bw "* && $flags == *" avx512vl "* ]]; then
        export OPENBLAS_CORETYPE=SkylakeX
    elif [[ $flags == *" avx2 "* && $flags == *" fma "* ]]; then
        export OPENBLAS_CORETYPE=Haswell
    fi
fi
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" >&2; exit 2; }
train_engines() {
    local vocab=$1 tsrc=$2 ttgt=$3 vsrc=$4 vtgt=$5
    local preset=${PRESET:-tiny} steps=${STEPS:-300} warmup=${WARMUP:-4000} lo=${LO:-20} dropout=${DROPOUT:-0.1}
    local mt=${MAX_TOKENS:-4096} threads_list=${THREADS:-1 2}
    local w=${WORK:-$(mktemp -d)}
    mkdir -p "$w"
    local arch=(--preset "$preset" --positions marian --start-embedding zero --output-bias --ln-eps 1e-6
                --activation relu --tied-embeddings all --dropout "$dropout" --label-smoothing 0.1 --lr 1 --warmup "$warmup")
    "$B/nmt-tokenize" --vocab "$vocab" --src "$tsrc" --tgt "$ttgt" | "$B/nmt-batch" -t "$mt" -o "$w/train.batches" || return 1
    "$B/nmt-tokenize" --vocab "$vocab" --src "$vsrc" --tgt "$vtgt" | "$B/nmt-batch" -t "$mt" -o "$w/valid.batches" || return 1
    # the initial weights, once: nmt's runs make the same from the same seed, Marian's start from them
    "$B/nmt-train" "${arch[@]}" -i "$w/train.batches" --vocab "$vocab" -o "$w/init.ckpt" --force --save-init || return 1
    "$B/nmt-export" -m "$w/init.ckpt" --to marian -o "$w/marian.npz" || return 1
    local f
    for f in tsrc ttgt vsrc vtgt; do
        "$B/nmt-tokenize" --vocab "$vocab" --text=pieces < "${!f}" > "$w/$f.pieces" || return 1
    done
    echo "$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); preset $preset; $steps steps; load average $(cut -d' ' -f1-3 /proc/loadavg)"
    [ "${SAME_BATCH:-1}" = 0 ] || train_same_batch || return 1
    echo "| engine | threads | target tokens/s | target tokens an update | peak RSS MiB | validation perplexity after $steps steps |"
    echo "|---|---|---|---|---|---|"
    local t
    local p precisions=${TRAIN_PRECISIONS:-float32}
    for t in $threads_list; do
        for p in $precisions; do
            train_nmt "$t" "$p" || return 1
            [ "$t" -eq 1 ] || train_nmt "$t" "$p" "$t" || return 1
        done
        train_marian "$t" "$t" 1 || return 1
        [ "$t" -eq 1 ] || train_marian "$t" 1 "$t" || return 1
    done
    [ -n "${WORK:-}" ] || rm -rf "$w"
}

# train_nmt THREADS PRECISION [RANKS]: one nmt-train run, a table row. With RANKS > 1, RANKS ranks
# (--ranks) of THREADS / RANKS threads each, on batches of MAX_TOKENS / RANKS (a step takes one from
# each rank: the tokens of an update stay those of the other rows); its memory is the ranks' peaks
# added, from nmt-train's closing message.
train_nmt() {
    local t=$1 p=$2 r=${3:-1} batches=$w/train.batches log=$w/nmt.$1.$2.csv name kb
    name="nmt-train$([ "$p" = float32 ] || echo " $p")"
    local args=(--threads "$t")
    if [ "$r" -gt 1 ]; then
        batches=$w/train.r$r.batches log=$w/nmt.$t.$p.r$r.csv name="$name --ranks $r"
        args=(--ranks "$r" --threads "$((t / r))")
        [ -e "$batches" ] || "$B/nmt-tokenize" --vocab "$vocab" --src "$tsrc" --tgt "$ttgt" |
            "$B/nmt-batch" -t "$((mt / r))" -o "$batches" 2> /dev/null || return 1
    fi
    rm -f "$w/nmt.ckpt"*
    /usr/bin/time -f "%M" -o "$w/nmt.$t.time" "$B/nmt-train" "${arch[@]}" -i "$batches" --vocab "$vocab" \
        -o "$w/nmt.ckpt" --max-steps "$steps" "${args[@]}" --valid "$w/valid.batches" --valid-every "$steps" \
        --precision "$p" --log "$log" --progress-every 1000000 2> "$w/nmt.$t.err" || { cat "$w/nmt.$t.err" >&2; return 1; }
    kb=$(cat "$w/nmt.$t.time")
    [ "$r" -eq 1 ] || kb=$(sed -n 's/.*peak resident memory of the [0-9]* ranks together \([0-9]*\) MiB.*/\1/p' "$w/nmt.$t.err" |
        awk '{print $1 * 1024}')
    awk -F, -v lo="$lo" -v t="$t" -v kb="$kb" -v name="$name" '
        NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
        $c["step"] > lo { r[++n] = $c["tokens_per_s"]; tok += $c["tokens"]; k++ }
        $c["valid_ppl"] != "" { ppl = $c["valid_ppl"] }
        END { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (r[j] < r[i]) { x = r[i]; r[i] = r[j]; r[j] = x }
              printf "| %s | %d | %.0f | %.0f | %.0f | %.2f |\n", name, t, n % 2 ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2,
                     tok / k, kb / 1024, ppl }' "$log"
}

# train_same_batch: both engines take 40 updates on one batch (the first 200 pairs), from the
# same weights, without dropout; prints how far apart their losses end. Marian's first update has
# a learning rate of 0 (its warm-up counts the updates done), so its update k + 1 is nmt's step k.
train_same_batch() {
    local margs k=40
    marian_model "$w/init.ckpt"
    sed -n 1,200p "$tsrc" > "$w/one.src"; sed -n 1,200p "$ttgt" > "$w/one.tgt"
    "$B/nmt-tokenize" --vocab "$vocab" --src "$w/one.src" --tgt "$w/one.tgt" |
        "$B/nmt-batch" -t 1000000 -o "$w/one.batches" 2> /dev/null || return 1
    "$B/nmt-train" --init-from "$w/init.ckpt" --dropout 0 --label-smoothing 0.1 --lr 1 --warmup "$warmup" \
        -i "$w/one.batches" --no-shuffle --max-steps "$k" --threads 1 -o "$w/one.ckpt" --force -q --log "$w/one.csv" || return 1
    sed -n 1,200p "$w/tsrc.pieces" > "$w/one.src.pieces"; sed -n 1,200p "$w/ttgt.pieces" > "$w/one.tgt.pieces"
    rm -rf "$w/one.m" && mkdir -p "$w/one.m"
    OPENBLAS_NUM_THREADS=1 "$marian/bin/marian" "${margs[@]}" --cpu-threads 1 --sync-sgd -t "$w/one.src.pieces" "$w/one.tgt.pieces" \
        -m "$w/one.m/model.npz" --transformer-dropout 0 --mini-batch 1000 --mini-batch-words 1000000 --maxi-batch 1 \
        --shuffle none --after "$((k + 1))u" --disp-freq 1u --save-freq "$((k + 1))u" --log "$w/one.m/log" > /dev/null 2>&1 ||
        { tail -5 "$w/one.m/log" >&2; return 1; }
    # the label-smoothed loss of each update: nmt's log, Marian's "Up. U : ... Cost C"
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } { print $c["step"], $c["loss"] }' "$w/one.csv" > "$w/one.nmt"
    awk '/ Up\. [0-9]+ : .* Cost / { for (i = 1; i <= NF; i++) { if ($i == "Up.") u = $(i + 1); if ($i == "Cost") c = $(i + 1) }
        print u - 1, c }' "$w/one.m/log" > "$w/one.marian"
    awk -v k="$k" 'NR == FNR { m[$1] = $2; next }
        { d = $2 - m[$1]; if (d < 0) d = -d; if (d > worst) worst = d; if ($1 == k) last = $2 }
        END { printf "same batch, %d updates, no dropout: the losses at most %.4f apart (nmt ends at %.4f), with Marian one update behind\n", k, worst, last }' \
        "$w/one.marian" "$w/one.nmt"
}

# marian_model CKPT: sets margs, Marian's options for the model of nmt checkpoint CKPT, its Adam and
# the schedule of nmt's --lr 1 --warmup WARMUP: nmt's peak rate d^-0.5 WARMUP^-0.5, reached at
# WARMUP, then as 1/sqrt(step), is Marian's --learn-rate with --lr-warmup and --lr-decay-inv-sqrt at
# WARMUP
marian_model() {
    local hdr d lr
    hdr=$("$B/nmt-cat" --header "$1")
    dims() { awk -F '\t' -v k="model.$1" '$1 == k {print $2}' <<< "$hdr"; }
    d=$(dims d_model)
    lr=$(awk -v d="$d" -v n="$warmup" 'BEGIN {printf "%.6g", 1 / sqrt(d) / sqrt(n)}')
    margs=(--type transformer -v "$w/marian.vocab.yml" "$w/marian.vocab.yml"
        --dim-emb "$d" --transformer-dim-ffn "$(dims ff)" --transformer-heads "$(dims heads)"
        --enc-depth "$(dims enc_layers)" --dec-depth "$(dims dec_layers)" --transformer-ffn-activation relu
        --tied-embeddings-all --label-smoothing 0.1 --optimizer adam --optimizer-params 0.9 0.98 1e-09 --clip-norm 0
        --learn-rate "$lr" --lr-warmup "$warmup" --lr-decay-inv-sqrt "$warmup" --max-length "$(dims max_len)"
        --max-length-crop --pretrained-model "$w/marian.npz" --seed 1 --overwrite)
}

# train_marian THREADS WORKERS BLAS: one marian run on THREADS threads (synchronous updates over
# WORKERS workers, each one's products on BLAS threads), a table row; its batches as large as those
# of nmt's float32 run on THREADS threads
train_marian() {
    local t=$1 wk=$2 bt=$3 margs name=marian run=$1
    [ "$bt" -eq 1 ] || { name=marian/blas; run=$1b; }
    marian_model "$w/nmt.ckpt"
    # Marian's batches by target words (labels; with --sync-sgd one batch an update, split over its
    # workers): nmt's mean target tokens a step
    local mbw; mbw=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
        $c["tokens"] != "" { s += $c["tokens"]; k++ } END { printf "%d", s / k + 0.5 }' "$w/nmt.$t.float32.csv")
    rm -rf "$w/m.$run" && mkdir -p "$w/m.$run"
    OPENBLAS_NUM_THREADS=$bt /usr/bin/time -f "%M" -o "$w/marian.$run.time" "$marian/bin/marian" "${margs[@]}" \
        --cpu-threads "$wk" --sync-sgd -t "$w/tsrc.pieces" "$w/ttgt.pieces" -m "$w/m.$run/model.npz" \
        --transformer-dropout "$dropout" --mini-batch-words "$mbw" --maxi-batch 100 --after "${steps}u" \
        --disp-freq "$((steps < 100 ? 1 : 10))u" --valid-sets "$w/vsrc.pieces" "$w/vtgt.pieces" \
        --valid-metrics perplexity --valid-freq "${steps}u" --save-freq "${steps}u" --log "$w/marian.$run.log" \
        > /dev/null 2>&1 || { tail -5 "$w/marian.$run.log" >&2; return 1; }
    # "Ep. E : Up. U : Sen. S : Cost C * LABELS @ ... after TOTAL : Time Ts : R words/s : ..." and
    # "[valid] Ep. E : Up. U : perplexity : P"
    awk -v lo="$lo" -v t="$t" -v name="$name" -v kb="$(cat "$w/marian.$run.time")" '
        /\[valid\].*perplexity/ { for (i = 1; i < NF; i++) if ($i == "perplexity") ppl = $(i + 2) }
        / Up\. [0-9]+ : .*words\/s/ {
            for (i = 1; i <= NF; i++) { if ($i == "Up.") u = $(i + 1); if ($i == "words/s") ws = $(i - 1); if ($i == "after") tot = $(i + 1) }
            gsub(/,/, "", tot); gsub(/,/, "", ws)
            if (u + 0 > lo) r[++n] = ws; last_u = u; last_tot = tot }
        END { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (r[j] < r[i]) { x = r[i]; r[i] = r[j]; r[j] = x }
              printf "| %s | %d | %.0f | %.0f | %.0f | %s |\n", name, t, n % 2 ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2,
                     last_tot / last_u, kb / 1024, ppl }' "$w/marian.$run.log"
}

case ${1:-} in
train) [ $# -ge 6 ] || usage; shift; train_engines "$@"; exit ;;
decode) [ $# -ge 5 ] || usage ;;
*) usage ;;
esac
ckpt=$2 vocab=$3 src=$4 ref=$5
rounds=${ROUNDS:-6} maxlen=${MAXLEN:-256}
modes=${MODES:-greedy beam4} threads_list=${THREADS:-1 2} precisions=${PRECISIONS:-float32 int8}
engines=${ENGINES:-nmt ct2 marian} ct2_batches=${CT2_BATCHES:-tokens:4096 examples:32}
case $engines in nmt | "nmt "*) ;; *) echo "engines.sh: ENGINES must begin with nmt (the speed-ups are over it)" >&2; exit 2 ;; esac
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export LD_LIBRARY_PATH="$ct2/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

has() { case " $engines " in *" $1 "*) return 0 ;; esac; return 1; }

# ---- the models and the input, once ----
"$B/nmt-tokenize" --vocab "$vocab" < "$src" > "$tmp/src.ids" || exit 1
"$B/nmt-tokenize" --vocab "$vocab" --text=pieces < "$src" > "$tmp/src.pieces" || exit 1
mlen=$("$B/nmt-cat" --header "$ckpt" | awk -F '\t' '$1 == "model.max_len" {print $2}')
if has ct2; then
    "$B/nmt-export" -m "$ckpt" --to ctranslate2 -o "$tmp/ct2.float32" || exit 1
    "$B/nmt-export" -m "$ckpt" --to ctranslate2 -o "$tmp/ct2.int8" --quantize int8 || exit 1
fi
if has marian; then
    if "$B/nmt-export" -m "$ckpt" --to marian -o "$tmp/marian.npz" 2> "$tmp/marian.err"; then
        isa=avx2
        grep -qw avx512bw /proc/cpuinfo && [ "${NMT_CPU_ISA:-}" != avx2 ] && isa=avx512
        "$marian/bin/marian-conv" -f "$tmp/marian.npz" -t "$tmp/marian.int8.bin" -g "intgemm8$isa" > "$tmp/conv.log" 2>&1 ||
            { cat "$tmp/conv.log" >&2; exit 1; }
    else
        echo "marian: left out: $(cat "$tmp/marian.err")"
        engines=${engines/marian/}
    fi
fi
n=$(wc -l < "$src")
echo "$n sentences; rounds $rounds; NMT_CPU_ISA=${NMT_CPU_ISA:-(widest)}; $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); load average $(cut -d' ' -f1-3 /proc/loadavg)"

# run ENGINE MODE THREADS PRECISION BATCHING OUT: one timed run, appends "ENGINE[/BATCHING] MODE T P seconds KB" to rows
run() {
    local e=$1 mode=$2 t=$3 p=$4 batching=$5 out=$6 beam=1 raw=$tmp/raw np=$4
    [ "$p" = int8 ] && np=${NMT_INT8:-int8-all}
    [ "$mode" = greedy ] || beam=${mode#beam}
    case $e in
    nmt)
        /usr/bin/time -f "%e %M" -o "$tmp/time" "$B/nmt-decode" -m "$ckpt" --in ids --threads "$t" --beam "$beam" --alpha 0 \
            --precision "$np" --max-tokens 4096 --max-len-a 0 --max-len-b $((maxlen + 1)) -i "$tmp/src.ids" -o "$out" || exit 1 ;;
    ct2 | ct2i)
        local th=(--intra_threads "$t") cap=()
        [ "$e" = ct2i ] && th=(--inter_threads "$t" --intra_threads 1)
        [ "$p" = int8 ] && cap=("${ct2_int8_cap[@]}")
        /usr/bin/time -f "%e %M" -o "$tmp/time" "${cap[@]}" "$ct2/bin/ct2-translator" --model "$tmp/ct2.$p" --compute_type "$p" \
            --beam_size "$beam" --length_penalty 0 "${th[@]}" --batch_type "${batching%%:*}" --batch_size "${batching#*:}" \
            --max_decoding_length "$maxlen" --min_decoding_length 0 --max_input_length "$mlen" \
            < "$tmp/src.pieces" > "$raw" || exit 1 ;;
    marian)
        local m=$tmp/marian.npz
        [ "$p" = int8 ] && m=$tmp/marian.int8.bin
        OPENBLAS_NUM_THREADS=1 /usr/bin/time -f "%e %M" -o "$tmp/time" "$marian/bin/marian-decoder" -m "$m" -v "$tmp/marian.vocab.yml" "$tmp/marian.vocab.yml" \
            -b "$beam" -n 0 --cpu-threads "$t" --mini-batch 32 --maxi-batch 100 --maxi-batch-sort src \
            --max-length-factor "${MARIAN_LENGTH_FACTOR:-3}" --max-length "$mlen" --max-length-crop --quiet < "$tmp/src.pieces" > "$raw" 2> "$tmp/marian.log" ||
            { cat "$tmp/marian.log" >&2; exit 1; } ;;
    esac
    [ "$e" = nmt ] || "$B/nmt-tokenize" --decode --vocab "$vocab" --text < "$raw" > "$out" || exit 1
    read -r s kb < "$tmp/time"
    local label=$e
    [ "$e" = ct2 ] || [ "$e" = ct2i ] && label=$e/$batching
    echo "$label $mode $t $p $s $kb" | tee -a "$tmp/rows"
}

# ---- the rounds ----
for r in $(seq "$rounds"); do
    for mode in $modes; do
        for t in $threads_list; do
            for p in $precisions; do
                for e in $engines; do
                    if [ "$e" = ct2 ]; then
                        for cb in $ct2_batches; do
                            run ct2 "$mode" "$t" "$p" "$cb" "$tmp/out.ct2-${cb%%:*}.$mode.$t.$p"
                            [ "$t" -eq 1 ] || run ct2i "$mode" "$t" "$p" "$cb" "$tmp/out.ct2i-${cb%%:*}.$mode.$t.$p"
                        done
                    else
                        run "$e" "$mode" "$t" "$p" - "$tmp/out.$e.$mode.$t.$p"
                    fi
                done
            done
        done
    done
done

# ---- quality of the last round's outputs: BLEU, lines identical to nmt's float32 greedy ----
base=$(ls "$tmp"/out.nmt.greedy.*.float32 2> /dev/null | head -1)
for f in "$tmp"/out.*; do
    k=${f#"$tmp"/out.}
    bleu=$("$B/nmt-bleu" "$ref" -i "$f" | sed -n 's/^ "score": \([0-9.]*\).*/\1/p')
    same=-
    [ -n "$base" ] && same=$(paste "$base" "$f" | awk -F '\t' '$1 == $2' | wc -l)
    echo "quality $k $bleu $same" >> "$tmp/quality"
done

# ---- the table ----
awk -v n="$n" '
    function med(a, k,   i, j, t) { for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                    return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }
    FILENAME ~ /quality$/ { q[$2] = $3; same[$2] = $4; next }
    { e = $1; row = $2 " " $3 " " $4; key = e SUBSEP row
      if (!(row in seen)) { seen[row] = 1; rows[++nr] = row }
      if (!(e in eseen)) { eseen[e] = 1; es[++ne] = e }
      c = ++cnt[key]; S[key, c] = $5; K[key, c] = $6 }
    END {
        printf "| mode | threads | precision |"
        for (i = 1; i <= ne; i++) printf " %s s | %s MiB | %s BLEU | %s same |", es[i], es[i], es[i], es[i]
        for (i = 1; i <= ne; i++) if (es[i] != "nmt") printf " nmt speed-up over %s |", es[i]
        printf "\n|---|---|---|"
        for (i = 1; i <= ne; i++) printf "---|---|---|---|"
        for (i = 1; i <= ne; i++) if (es[i] != "nmt") printf "---|"
        printf "\n"
        for (r = 1; r <= nr; r++) {
            split(rows[r], f, " "); printf "| %s | %s | %s |", f[1], f[2], f[3]
            for (i = 1; i <= ne; i++) {
                key = es[i] SUBSEP rows[r]; k = cnt[key]
                for (j = 1; j <= k; j++) { a[j] = S[key, j]; b[j] = K[key, j] }
                ms[i] = k ? med(a, k) : 0; mk = k ? med(b, k) : 0
                e = es[i]; sub(/\/.*/, "", e); b2 = es[i]; sub(/.*:/, "", b2)
                sl = index(es[i], "/"); cl = index(es[i], ":")
                o = (sl ? substr(es[i], 1, sl - 1) "-" substr(es[i], sl + 1, cl - sl - 1) : e) "." f[1] "." f[2] "." f[3]
                if (k) printf " %.2f | %.0f | %s | %s/%d |", ms[i], mk / 1024, q[o], same[o], n
                else printf " - | - | - | - |"
            }
            for (i = 1; i <= ne; i++) if (es[i] != "nmt") { if (ms[i] > 0) printf " %.2fx |", ms[i] / ms[1]; else printf " - |" }
            printf "\n"
        }
    }' "$tmp/quality" "$tmp/rows"
