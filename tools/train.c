/* nmt-train: trains the Transformer on a batch stream with a backend plugin (nmt-train(1)).
 * Options and files here; the model, its checkpoints and the kernels are in libcommon/nn/model.c. */
#include <csv.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nn/backend_loader.h"
#include "nn/model.h"
#include "io/stream.h"
#include "io/records.h"
#include "io/safetensors.h"
#include "cli/cli.h"
#include "text/vocab.h"

static void usage(void)
{
    printf("Usage: %s [OPTION]... -o CHECKPOINT [-i BATCHES]\n"
           "Trains a Transformer translation model on a batch stream (from nmt-batch; stdin by default)\n"
           "and writes safetensors checkpoints holding the model, its vocabulary and the training state.\n"
           "\n"
           "Input and output:\n"
           "  -i, --input FILE        training batch stream ('-' for stdin: one pass, in stream order)\n"
           "      --valid FILE        validation batch stream\n"
           "  -o, --output FILE       checkpoint to write (required); also FILE.best, FILE.step-N\n"
           "      --vocab FILE        vocabulary of the batches (required unless --resume)\n"
           "      --resume            continue from the checkpoint at -o, exactly where it stopped\n"
           "      --backend NAME      compute backend (default: $NMT_BACKEND, else auto)\n"
           "      --threads N         worker threads of the backend (default: all cores)\n"
           "Length of training (the first limit reached ends it):\n"
           "      --epochs E          passes over the training file (default 1 unless a limit below)\n"
           "      --max-steps N       total optimizer steps, counting those before a --resume\n"
           "      --max-time DUR      wall time of this run: seconds or with s, m, h suffix\n"
           "Model (a preset, then overrides):\n"
           "      --preset NAME       tiny, small (default), base or big\n"
           "      --layers N          encoder and decoder layers\n"
           "      --enc-layers N, --dec-layers N\n"
           "      --d-model D         model width\n"
           "      --heads H           attention heads\n"
           "      --ff F              feed-forward inner width\n"
           "      --pre-norm          layer norm before each sublayer (default: after, as the paper)\n"
           "      --max-len N         longest sentence accepted, in tokens (default 1024)\n"
           "Optimisation:\n"
           "      --lr SCALE          learning rate scale of the schedule (default 1)\n"
           "      --warmup N          warm-up steps (default 4000); lr = SCALE d^-0.5 min(t^-0.5, t N^-1.5)\n"
           "      --clip-norm X       clip the gradient norm to X (default 0: off)\n"
           "      --update-freq K     accumulate K batches per step (default 1)\n"
           "      --seed N            seed of initialisation, dropout and batch order (default 1)\n"
           "      --label-smoothing E (default 0.1)\n"
           "      --dropout P         residual and embedding dropout (default 0.1)\n"
           "      --attention-dropout P   dropout on attention weights (default 0)\n"
           "      --activation-dropout P  dropout on the FFN activation (default 0)\n"
           "      --no-shuffle        keep the file's batch order in every epoch\n"
           "      --max-bad N         stop after N non-finite steps in a row (default 5)\n"
           "Validation, checkpoints, logs:\n"
           "      --valid-every N     validate every N steps (default: end of each epoch)\n"
           "      --patience N        stop after N validations without improvement (default: never)\n"
           "      --save-every N      write the checkpoint every N steps (default: at the end)\n"
           "      --keep N            also keep the last N periodic checkpoints as FILE.step-STEP\n"
           "      --log FILE          metrics, one row per --log-every steps: .csv or .jsonl\n"
           "      --log-every N       (default 1)\n"
           "  -q, --quiet             no progress display\n"
           "  -h, --help              show this help and exit\n"
           "      --version           show the version and the plugins found, and exit\n"
           "\n"
           "SIGINT or SIGTERM: the step finishes, the checkpoint is written, and the message says how\n"
           "to resume. Exit status: 0 success, 1 bad input or failure, 2 usage error.\n",
           nmt_progname());
}

enum {
    OPT_VALID = 256, OPT_VOCAB, OPT_RESUME, OPT_BACKEND, OPT_THREADS, OPT_EPOCHS, OPT_MAX_STEPS, OPT_MAX_TIME,
    OPT_PRESET, OPT_LAYERS, OPT_ENC_LAYERS, OPT_DEC_LAYERS, OPT_D_MODEL, OPT_HEADS, OPT_FF, OPT_PRE_NORM, OPT_MAX_LEN,
    OPT_LR, OPT_WARMUP, OPT_CLIP, OPT_UPDATE_FREQ, OPT_SEED, OPT_LS, OPT_DROPOUT, OPT_ATT_DROPOUT, OPT_ACT_DROPOUT,
    OPT_NO_SHUFFLE, OPT_MAX_BAD, OPT_VALID_EVERY, OPT_PATIENCE, OPT_SAVE_EVERY, OPT_KEEP, OPT_LOG, OPT_LOG_EVERY,
    OPT_VERSION
};

struct opts {
    const char *input, *valid, *output, *vocab, *backend, *log, *preset;
    int resume, threads, quiet, shuffle;
    uint64_t epochs, max_steps, update_freq, seed, max_bad, valid_every, patience, save_every, keep, log_every;
    double max_time, lr, clip;
    uint64_t warmup;
    /* model overrides; -1 = from the preset */
    int64_t layers, enc_layers, dec_layers, d_model, heads, ff, max_len;
    int pre_norm;
    double ls, dropout, att_dropout, act_dropout;
};

/* ---- batch sources ---- */

/* Training batches: all of a file in memory (shuffled per epoch), or a one-pass stream. */
struct batches {
    const char *name;
    int fd;
    struct rec_reader *r;
    int streaming;
    struct nmt_buf data;       /* payloads back to back */
    size_t *off, *len;         /* (n) */
    size_t n, cap;
    uint32_t *perm;            /* (n) order of the current epoch */
    uint64_t perm_epoch;
};

static int check_vocab_key(const struct rec_header *h, const char *name, const char *fp)
{
    const char *hv = rec_header_get(h, "vocab");
    if (!hv) {
        nmt_warn("%s: stream has no vocab fingerprint; cannot check it against the vocabulary", name);
        return 0;
    }
    if (strcmp(hv, fp))
        return nmt_seterr("%s: vocab fingerprint %s differs from the model's (%s)", name, hv, fp);
    return 0;
}

static int batches_open(struct batches *b, const char *path, int streaming, const char *fp)
{
    memset(b, 0, sizeof *b);
    b->name = nmt_path_name(path, 0);
    b->fd = nmt_open_in(path);
    if (b->fd < 0)
        return -1;
    int st;
    b->r = rec_reader_open(b->fd, b->name, "batch", &st);
    if (!b->r)
        return -1;
    if (check_vocab_key(rec_reader_header(b->r), b->name, fp) < 0)
        return -1;
    b->streaming = streaming;
    if (streaming)
        return 0;
    for (;;) {
        const unsigned char *p;
        size_t len;
        int rc = rec_read(b->r, &p, &len);
        if (rc == REC_END)
            break;
        if (rc < 0)
            return -1;
        if (b->n == b->cap) {
            size_t c = b->cap ? 2 * b->cap : 1024;
            size_t *o = realloc(b->off, c * sizeof *o), *l = o ? realloc(b->len, c * sizeof *l) : NULL;
            if (o)
                b->off = o;
            if (l)
                b->len = l;
            if (!o || !l)
                return nmt_seterr("out of memory reading %s", b->name);
            b->cap = c;
        }
        b->off[b->n] = b->data.len;
        b->len[b->n] = len;
        if (nmt_buf_append(&b->data, p, len) < 0)
            return nmt_seterr("out of memory reading %s", b->name);
        b->n++;
    }
    if (b->n == 0)
        return nmt_seterr("%s: no batches", b->name);
    b->perm = malloc(b->n * sizeof *b->perm);
    if (!b->perm)
        return nmt_seterr("out of memory");
    b->perm_epoch = UINT64_MAX;
    return 0;
}

static void batches_close(struct batches *b)
{
    rec_reader_free(b->r);
    if (b->fd > 0)
        close(b->fd);
    nmt_buf_free(&b->data);
    free(b->off);
    free(b->len);
    free(b->perm);
}

static uint64_t mix3(uint64_t a, uint64_t b, uint64_t c)
{
    return nmt_rng_mix64(nmt_rng_mix64(nmt_rng_mix64(a ^ 0x7472616E) + b) + c);
}

/* Batch POS of EPOCH (0-based) into BR. Returns REC_OK, REC_END (past the epoch's end) or < 0. */
static int batches_get(struct batches *b, uint64_t epoch, uint64_t pos, int shuffle, uint64_t seed,
                       struct batch_record *br)
{
    if (b->streaming) {
        const unsigned char *p;
        size_t len;
        int rc = rec_read(b->r, &p, &len);
        if (rc != REC_OK)
            return rc;
        return batch_record_decode(br, p, len) < 0 ? nmt_seterr("%s: batch %llu: %s", b->name,
                                                                (unsigned long long)pos, nmt_errmsg()), -1 : REC_OK;
    }
    if (pos >= b->n)
        return REC_END;
    if (b->perm_epoch != epoch) {
        for (size_t i = 0; i < b->n; i++)
            b->perm[i] = (uint32_t)i;
        if (shuffle) {
            uint64_t s = mix3(seed, epoch, 0x5348);
            for (size_t i = b->n - 1; i > 0; i--) {
                s = nmt_rng_mix64(s + 0x9E3779B97F4A7C15ULL);
                size_t j = (size_t)(s % (i + 1));
                uint32_t t = b->perm[i];
                b->perm[i] = b->perm[j];
                b->perm[j] = t;
            }
        }
        b->perm_epoch = epoch;
    }
    size_t k = b->perm[pos];
    if (batch_record_decode(br, b->data.data + b->off[k], b->len[k]) < 0)
        return nmt_seterr("%s: batch %zu: %s", b->name, k, nmt_errmsg()), -1;
    return REC_OK;
}

/* ---- the training state ---- */

struct state {
    uint64_t step, epoch, pos;  /* completed steps; position of the next batch */
    uint64_t tokens;            /* target tokens trained on */
    double best_valid;          /* best validation nll per token (INFINITY: none) */
    uint64_t bad_valid;         /* validations since the best */
    uint64_t skipped;           /* non-finite steps skipped in total */
};

static volatile sig_atomic_t got_signal;

static void on_signal(int sig)
{
    got_signal = sig;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct ctx {
    struct opts *o;
    struct model *m;
    struct nmt_buf vocab_text;
    char fp[17];
    struct state s;
    FILE *log;
    int log_csv;
};

static int save(struct ctx *c, const char *path)
{
    int fin = model_params_finite(c->m);
    if (fin < 0)
        return -1;
    if (!fin) /* never replace a checkpoint by a broken model */
        return nmt_seterr("the model's parameters are not finite at step %llu; '%s' was not written",
                          (unsigned long long)c->s.step, path);
    struct st_writer *w = st_writer_new();
    if (!w)
        return -1;
    char v[64];
    int rc = model_save(c->m, w, 1);
    const struct { const char *k; uint64_t v; } u[] = {
        {"train.step", c->s.step},     {"train.epoch", c->s.epoch},       {"train.pos", c->s.pos},
        {"train.tokens", c->s.tokens}, {"train.bad_valid", c->s.bad_valid}, {"train.skipped", c->s.skipped},
        {"train.seed", c->o->seed},    {"train.warmup", c->o->warmup},    {"train.update_freq", c->o->update_freq}};
    for (size_t i = 0; rc == 0 && i < sizeof u / sizeof u[0]; i++) {
        snprintf(v, sizeof v, "%llu", (unsigned long long)u[i].v);
        rc = st_writer_meta(w, u[i].k, v);
    }
    if (rc == 0) {
        snprintf(v, sizeof v, "%.17g", c->s.best_valid);
        rc = st_writer_meta(w, "train.best_valid", v);
    }
    if (rc == 0) {
        snprintf(v, sizeof v, "%.17g", c->o->lr);
        rc = st_writer_meta(w, "train.lr", v);
    }
    if (rc == 0)
        rc = st_writer_meta(w, "vocab.fingerprint", c->fp);
    if (rc == 0)
        rc = st_writer_meta(w, "producer", "nmt-train " NMT_VERSION);
    uint64_t shape[1] = {c->vocab_text.len};
    if (rc == 0)
        rc = st_writer_add(w, "vocab.file", ST_U8, 1, shape, c->vocab_text.data);
    if (rc == 0)
        rc = st_writer_write(w, path);
    st_writer_free(w);
    return rc;
}

static uint64_t meta_u64(const struct st_file *f, const char *k, int *bad)
{
    const char *s = st_meta(f, k);
    uint64_t v = 0;
    if (!s || nmt_parse_u64(s, UINT64_MAX, &v) < 0)
        *bad = 1;
    return v;
}

static int log_row(struct ctx *c, double loss, double lr, uint64_t tokens, double tps, double gnorm, double gfs,
                   double vloss, double vppl)
{
    if (!c->log)
        return 0;
    char f[10][40];
    snprintf(f[0], 40, "%llu", (unsigned long long)c->s.step);
    snprintf(f[1], 40, "%llu", (unsigned long long)c->s.epoch + 1);
    snprintf(f[2], 40, "%.17g", loss);
    snprintf(f[3], 40, "%.9g", lr);
    snprintf(f[4], 40, "%llu", (unsigned long long)tokens);
    snprintf(f[5], 40, "%.1f", tps);
    snprintf(f[6], 40, "%.9g", gnorm);
    snprintf(f[7], 40, "%.1f", gfs);
    snprintf(f[8], 40, "%.17g", vloss);
    snprintf(f[9], 40, "%.9g", vppl);
    static const char *const names[10] = {"step", "epoch", "loss", "lr", "tokens", "tokens_per_s", "grad_norm",
                                          "gflop_s", "valid_loss", "valid_ppl"};
    int nf = isnan(vloss) ? 8 : 10;
    if (isnan(loss)) { /* validation-only row: leave the training columns empty */
        f[2][0] = f[3][0] = f[4][0] = f[5][0] = f[6][0] = f[7][0] = 0;
    }
    if (c->log_csv) {
        for (int i = 0; i < 10; i++) {
            if (i)
                fputc(',', c->log);
            if (i < nf && f[i][0])
                csv_fwrite(c->log, f[i], strlen(f[i]));
        }
        fputc('\n', c->log);
    } else {
        fputc('{', c->log);
        int first = 1;
        for (int i = 0; i < nf; i++) {
            if (!f[i][0])
                continue;
            fprintf(c->log, "%s\"%s\":%s", first ? "" : ",", names[i], isfinite(atof(f[i])) ? f[i] : "null");
            first = 0;
        }
        fputs("}\n", c->log);
    }
    fflush(c->log);
    return ferror(c->log) ? nmt_seterr("cannot write the log '%s': %s", c->o->log, strerror(errno)) : 0;
}

static int validate(struct ctx *c, struct batches *vb, struct batch_record *br, double *vloss, double *vnll)
{
    double loss = 0, nll = 0;
    int64_t tok = 0;
    for (uint64_t i = 0;; i++) {
        int rc = batches_get(vb, 0, i, 0, 0, br);
        if (rc == REC_END)
            break;
        if (rc < 0)
            return -1;
        struct model_loss L;
        if (model_step(c->m, br, 0, 0, 0, &L, NULL) < 0)
            return nmt_seterr("%s: batch %llu: %s", vb->name, (unsigned long long)i, nmt_errmsg());
        loss += L.loss, nll += L.nll, tok += L.tokens;
    }
    *vloss = tok ? loss / (double)tok : NAN;
    *vnll = tok ? nll / (double)tok : NAN;
    return 0;
}

static int parse_time(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0))
        return -1;
    if (!strcmp(end, "h"))
        v *= 3600;
    else if (!strcmp(end, "m"))
        v *= 60;
    else if (*end && strcmp(end, "s"))
        return -1;
    *out = v;
    return 0;
}

static int dir_writable(const char *path)
{
    char *d = nmt_strdup(path);
    if (!d)
        return -1;
    char *slash = strrchr(d, '/');
    const char *dir = slash ? (slash == d ? "/" : (*slash = 0, d)) : ".";
    int rc = access(dir, W_OK | X_OK);
    if (rc < 0)
        nmt_seterr("cannot write checkpoints in '%s': %s", dir, strerror(errno));
    free(d);
    return rc;
}

static void progress(struct ctx *c, double loss, double lr, double tps, double elapsed, double frac)
{
    char eta[32] = "";
    if (frac > 0.001 && frac <= 1) {
        double rest = elapsed / frac - elapsed;
        snprintf(eta, sizeof eta, " ETA %dm%02ds", (int)(rest / 60), (int)fmod(rest, 60));
    }
    fprintf(stderr, "\rstep %llu ep %llu loss %.4f lr %.2e %.0f tok/s%s\033[K", (unsigned long long)c->s.step,
            (unsigned long long)c->s.epoch + 1, loss, lr, tps, eta);
}

static int parse_u64_opt(const char *opt, const char *arg, uint64_t min, uint64_t max, uint64_t *out)
{
    if (nmt_parse_u64(arg, max, out) < 0 || *out < min)
        return nmt_usage_error("invalid %s '%s' (expected an integer from %llu to %llu)", opt, arg,
                               (unsigned long long)min, (unsigned long long)max), -1;
    return 0;
}

static int parse_prob(const char *opt, const char *arg, double *out)
{
    if (nmt_parse_double(arg, out) < 0 || !(*out >= 0 && *out < 1))
        return nmt_usage_error("invalid %s '%s' (expected a number in [0, 1))", opt, arg), -1;
    return 0;
}

static int run(struct opts *o);

int main(int argc, char **argv)
{
    nmt_set_progname(argv[0]);
    struct opts o = {0};
    o.input = "-";
    o.preset = "small";
    o.shuffle = 1;
    o.update_freq = 1;
    o.seed = 1;
    o.max_bad = 5;
    o.log_every = 1;
    o.lr = 1;
    o.warmup = 4000;
    o.layers = o.enc_layers = o.dec_layers = o.d_model = o.heads = o.ff = o.max_len = -1;
    o.pre_norm = -1;
    o.ls = o.dropout = o.att_dropout = o.act_dropout = -1;
    static const struct option lo[] = {
        {"input", required_argument, NULL, 'i'},          {"output", required_argument, NULL, 'o'},
        {"valid", required_argument, NULL, OPT_VALID},    {"vocab", required_argument, NULL, OPT_VOCAB},
        {"resume", no_argument, NULL, OPT_RESUME},        {"backend", required_argument, NULL, OPT_BACKEND},
        {"threads", required_argument, NULL, OPT_THREADS}, {"epochs", required_argument, NULL, OPT_EPOCHS},
        {"max-steps", required_argument, NULL, OPT_MAX_STEPS}, {"max-time", required_argument, NULL, OPT_MAX_TIME},
        {"preset", required_argument, NULL, OPT_PRESET},  {"layers", required_argument, NULL, OPT_LAYERS},
        {"enc-layers", required_argument, NULL, OPT_ENC_LAYERS}, {"dec-layers", required_argument, NULL, OPT_DEC_LAYERS},
        {"d-model", required_argument, NULL, OPT_D_MODEL}, {"heads", required_argument, NULL, OPT_HEADS},
        {"ff", required_argument, NULL, OPT_FF},          {"pre-norm", no_argument, NULL, OPT_PRE_NORM},
        {"max-len", required_argument, NULL, OPT_MAX_LEN}, {"lr", required_argument, NULL, OPT_LR},
        {"warmup", required_argument, NULL, OPT_WARMUP},  {"clip-norm", required_argument, NULL, OPT_CLIP},
        {"update-freq", required_argument, NULL, OPT_UPDATE_FREQ}, {"seed", required_argument, NULL, OPT_SEED},
        {"label-smoothing", required_argument, NULL, OPT_LS}, {"dropout", required_argument, NULL, OPT_DROPOUT},
        {"attention-dropout", required_argument, NULL, OPT_ATT_DROPOUT},
        {"activation-dropout", required_argument, NULL, OPT_ACT_DROPOUT},
        {"no-shuffle", no_argument, NULL, OPT_NO_SHUFFLE}, {"max-bad", required_argument, NULL, OPT_MAX_BAD},
        {"valid-every", required_argument, NULL, OPT_VALID_EVERY}, {"patience", required_argument, NULL, OPT_PATIENCE},
        {"save-every", required_argument, NULL, OPT_SAVE_EVERY}, {"keep", required_argument, NULL, OPT_KEEP},
        {"log", required_argument, NULL, OPT_LOG},        {"log-every", required_argument, NULL, OPT_LOG_EVERY},
        {"quiet", no_argument, NULL, 'q'},                {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, OPT_VERSION},      {NULL, 0, NULL, 0}};
    int ch;
    uint64_t u;
    const uint64_t BIG = UINT64_C(1) << 62;
    while ((ch = getopt_long(argc, argv, "i:o:qh", lo, NULL)) != -1) {
        switch (ch) {
        case 'i': o.input = optarg; break;
        case 'o': o.output = optarg; break;
        case 'q': o.quiet = 1; break;
        case 'h': usage(); return nmt_close_stdout() < 0 ? NMT_EXIT_DATA : 0;
        case OPT_VERSION: {
            nmt_print_version();
            struct backend_info *list;
            int n = backend_list(&list);
            for (int i = 0; i < n; i++) {
                if (list[i].error)
                    printf("plugin %s (%s): unusable: %s\n", list[i].name, list[i].path, list[i].error);
                else
                    printf("plugin %s (%s): score %d, ABI %u.%u\n", list[i].name, list[i].path, list[i].score,
                           list[i].abi_major, list[i].abi_minor);
            }
            backend_list_free(list, n);
            return nmt_close_stdout() < 0 ? NMT_EXIT_DATA : 0;
        }
        case OPT_VALID: o.valid = optarg; break;
        case OPT_VOCAB: o.vocab = optarg; break;
        case OPT_RESUME: o.resume = 1; break;
        case OPT_BACKEND: o.backend = optarg; break;
        case OPT_THREADS:
            if (parse_u64_opt("--threads", optarg, 1, 1024, &u) < 0)
                return NMT_EXIT_USAGE;
            o.threads = (int)u;
            break;
        case OPT_EPOCHS: if (parse_u64_opt("--epochs", optarg, 1, BIG, &o.epochs) < 0) return NMT_EXIT_USAGE; break;
        case OPT_MAX_STEPS: if (parse_u64_opt("--max-steps", optarg, 1, BIG, &o.max_steps) < 0) return NMT_EXIT_USAGE; break;
        case OPT_MAX_TIME:
            if (parse_time(optarg, &o.max_time) < 0 || o.max_time <= 0)
                return nmt_usage_error("invalid --max-time '%s' (expected seconds, or a number with s, m or h)", optarg);
            break;
        case OPT_PRESET: o.preset = optarg; break;
        case OPT_LAYERS: if (parse_u64_opt("--layers", optarg, 1, 64, &u) < 0) return NMT_EXIT_USAGE; o.layers = (int64_t)u; break;
        case OPT_ENC_LAYERS: if (parse_u64_opt("--enc-layers", optarg, 1, 64, &u) < 0) return NMT_EXIT_USAGE; o.enc_layers = (int64_t)u; break;
        case OPT_DEC_LAYERS: if (parse_u64_opt("--dec-layers", optarg, 1, 64, &u) < 0) return NMT_EXIT_USAGE; o.dec_layers = (int64_t)u; break;
        case OPT_D_MODEL: if (parse_u64_opt("--d-model", optarg, 2, 16384, &u) < 0) return NMT_EXIT_USAGE; o.d_model = (int64_t)u; break;
        case OPT_HEADS: if (parse_u64_opt("--heads", optarg, 1, 1024, &u) < 0) return NMT_EXIT_USAGE; o.heads = (int64_t)u; break;
        case OPT_FF: if (parse_u64_opt("--ff", optarg, 1, 65536, &u) < 0) return NMT_EXIT_USAGE; o.ff = (int64_t)u; break;
        case OPT_PRE_NORM: o.pre_norm = 1; break;
        case OPT_MAX_LEN: if (parse_u64_opt("--max-len", optarg, 2, 65536, &u) < 0) return NMT_EXIT_USAGE; o.max_len = (int64_t)u; break;
        case OPT_LR:
            if (nmt_parse_double(optarg, &o.lr) < 0 || !(o.lr > 0))
                return nmt_usage_error("invalid --lr '%s' (expected a positive number)", optarg);
            break;
        case OPT_WARMUP: if (parse_u64_opt("--warmup", optarg, 0, BIG, &o.warmup) < 0) return NMT_EXIT_USAGE; break;
        case OPT_CLIP:
            if (nmt_parse_double(optarg, &o.clip) < 0 || !(o.clip >= 0))
                return nmt_usage_error("invalid --clip-norm '%s' (expected a non-negative number)", optarg);
            break;
        case OPT_UPDATE_FREQ: if (parse_u64_opt("--update-freq", optarg, 1, 1 << 20, &o.update_freq) < 0) return NMT_EXIT_USAGE; break;
        case OPT_SEED: if (parse_u64_opt("--seed", optarg, 0, UINT64_MAX, &o.seed) < 0) return NMT_EXIT_USAGE; break;
        case OPT_LS: if (parse_prob("--label-smoothing", optarg, &o.ls) < 0) return NMT_EXIT_USAGE; break;
        case OPT_DROPOUT: if (parse_prob("--dropout", optarg, &o.dropout) < 0) return NMT_EXIT_USAGE; break;
        case OPT_ATT_DROPOUT: if (parse_prob("--attention-dropout", optarg, &o.att_dropout) < 0) return NMT_EXIT_USAGE; break;
        case OPT_ACT_DROPOUT: if (parse_prob("--activation-dropout", optarg, &o.act_dropout) < 0) return NMT_EXIT_USAGE; break;
        case OPT_NO_SHUFFLE: o.shuffle = 0; break;
        case OPT_MAX_BAD: if (parse_u64_opt("--max-bad", optarg, 1, BIG, &o.max_bad) < 0) return NMT_EXIT_USAGE; break;
        case OPT_VALID_EVERY: if (parse_u64_opt("--valid-every", optarg, 1, BIG, &o.valid_every) < 0) return NMT_EXIT_USAGE; break;
        case OPT_PATIENCE: if (parse_u64_opt("--patience", optarg, 1, BIG, &o.patience) < 0) return NMT_EXIT_USAGE; break;
        case OPT_SAVE_EVERY: if (parse_u64_opt("--save-every", optarg, 1, BIG, &o.save_every) < 0) return NMT_EXIT_USAGE; break;
        case OPT_KEEP: if (parse_u64_opt("--keep", optarg, 0, 1000000, &o.keep) < 0) return NMT_EXIT_USAGE; break;
        case OPT_LOG: o.log = optarg; break;
        case OPT_LOG_EVERY: if (parse_u64_opt("--log-every", optarg, 1, BIG, &o.log_every) < 0) return NMT_EXIT_USAGE; break;
        default:
            fprintf(stderr, "Try '%s --help' for more information.\n", nmt_progname());
            return NMT_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        if (optind + 1 < argc)
            return nmt_usage_error("too many arguments");
        o.input = argv[optind];
    }
    if (!o.output || !*o.output || !strcmp(o.output, "-"))
        return nmt_usage_error("a checkpoint file is required (-o FILE)");
    if (!o.resume && !o.vocab)
        return nmt_usage_error("the vocabulary of the batches is required (--vocab FILE)");
    struct model_config tmp;
    if (model_preset(&tmp, o.preset) < 0)
        return nmt_usage_error("%s", nmt_errmsg());
    if (o.keep && !o.save_every)
        return nmt_usage_error("--keep needs --save-every");
    if (o.patience && !o.valid)
        return nmt_usage_error("--patience needs --valid");
    int rc = run(&o);
    if (nmt_close_stdout() < 0) {
        nmt_error("%s", nmt_errmsg());
        return NMT_EXIT_DATA;
    }
    return rc;
}

/* Builds the configuration from the preset and the overrides. */
static void build_config(const struct opts *o, struct model_config *c, int vocab)
{
    model_preset(c, o->preset);
    c->vocab = vocab;
    if (o->layers > 0)
        c->enc_layers = c->dec_layers = (int)o->layers;
    if (o->enc_layers > 0)
        c->enc_layers = (int)o->enc_layers;
    if (o->dec_layers > 0)
        c->dec_layers = (int)o->dec_layers;
    if (o->d_model > 0)
        c->d_model = (int)o->d_model;
    if (o->heads > 0)
        c->heads = (int)o->heads;
    if (o->ff > 0)
        c->ff = (int)o->ff;
    if (o->max_len > 0)
        c->max_len = (int)o->max_len;
    if (o->pre_norm > 0)
        c->pre_norm = 1;
    if (o->ls >= 0)
        c->label_smoothing = (float)o->ls;
    if (o->dropout >= 0)
        c->dropout = (float)o->dropout;
    if (o->att_dropout >= 0)
        c->attn_dropout = (float)o->att_dropout;
    if (o->act_dropout >= 0)
        c->act_dropout = (float)o->act_dropout;
}

static int run(struct opts *o)
{
    struct ctx c;
    memset(&c, 0, sizeof c);
    c.o = o;
    c.s.best_valid = INFINITY;
    struct backend *be = NULL;
    struct st_file *ck = NULL;
    struct vocab *voc = NULL;
    struct batches tb, vb;
    memset(&tb, 0, sizeof tb);
    memset(&vb, 0, sizeof vb);
    tb.fd = vb.fd = -1;
    struct batch_record br = {0};
    int status = NMT_EXIT_DATA;
    char *path2 = NULL;

    if (dir_writable(o->output) < 0)
        goto fail;
    /* vocabulary and model configuration */
    struct model_config cfg;
    if (o->resume) {
        ck = st_read(o->output);
        if (!ck) {
            nmt_seterr("cannot resume: %s", nmt_errmsg());
            goto fail;
        }
        if (model_config_load(&cfg, ck) < 0) {
            nmt_seterr("cannot resume from '%s': %s", o->output, nmt_errmsg());
            goto fail;
        }
        const struct st_tensor *vt = st_find(ck, "vocab.file");
        if (!vt || vt->dtype != ST_U8) {
            nmt_seterr("cannot resume from '%s': no vocabulary inside", o->output);
            goto fail;
        }
        voc = vocab_parse(vt->data, (size_t)vt->nbytes, o->output);
        if (!voc)
            goto fail;
        /* explicit shape options must agree with the checkpoint */
        struct model_config want;
        build_config(o, &want, cfg.vocab);
        int explicit_shape = o->layers > 0 || o->enc_layers > 0 || o->dec_layers > 0 || o->d_model > 0 ||
                             o->heads > 0 || o->ff > 0 || o->pre_norm > 0;
        if (explicit_shape && (want.enc_layers != cfg.enc_layers || want.dec_layers != cfg.dec_layers ||
                               want.d_model != cfg.d_model || want.heads != cfg.heads || want.ff != cfg.ff ||
                               want.pre_norm != cfg.pre_norm)) {
            nmt_seterr("'%s' holds another model shape (d %d, heads %d, ff %d, layers %d+%d) than the options ask "
                       "for (d %d, heads %d, ff %d, layers %d+%d)",
                       o->output, cfg.d_model, cfg.heads, cfg.ff, cfg.enc_layers, cfg.dec_layers, want.d_model,
                       want.heads, want.ff, want.enc_layers, want.dec_layers);
            goto fail;
        }
        if (o->ls >= 0)
            cfg.label_smoothing = (float)o->ls;
        if (o->dropout >= 0)
            cfg.dropout = (float)o->dropout;
        if (o->att_dropout >= 0)
            cfg.attn_dropout = (float)o->att_dropout;
        if (o->act_dropout >= 0)
            cfg.act_dropout = (float)o->act_dropout;
    } else {
        voc = vocab_load(o->vocab);
        if (!voc)
            goto fail;
        build_config(o, &cfg, (int)voc->n);
        if (model_config_check(&cfg) < 0)
            goto fail;
    }
    vocab_fingerprint_hex(voc, c.fp);
    if (o->resume && o->vocab) {
        struct vocab *v2 = vocab_load(o->vocab);
        if (!v2)
            goto fail;
        char fp2[17];
        vocab_fingerprint_hex(v2, fp2);
        vocab_free(v2);
        if (strcmp(fp2, c.fp)) {
            nmt_seterr("vocabulary '%s' (%s) differs from the one in '%s' (%s)", o->vocab, fp2, o->output, c.fp);
            goto fail;
        }
    }
    if (vocab_format(voc, &c.vocab_text) < 0)
        goto fail;

    /* data */
    struct stat sb;
    int streaming = !strcmp(o->input, "-") || (stat(o->input, &sb) == 0 && !S_ISREG(sb.st_mode));
    if (batches_open(&tb, o->input, streaming, c.fp) < 0)
        goto fail;
    if (o->valid && batches_open(&vb, o->valid, 0, c.fp) < 0)
        goto fail;

    /* backend and model */
    struct nmt_backend_opts bo = {sizeof bo, o->threads, 0};
    be = backend_open(o->backend, &bo);
    if (!be)
        goto fail;
    c.m = model_new(be, &cfg, 1);
    if (!c.m || model_init(c.m, o->seed) < 0)
        goto fail;
    if (ck) {
        int bad = 0;
        if (model_load(c.m, ck, 1) < 0) {
            nmt_seterr("cannot resume from '%s': %s", o->output, nmt_errmsg());
            goto fail;
        }
        c.s.step = meta_u64(ck, "train.step", &bad);
        c.s.epoch = meta_u64(ck, "train.epoch", &bad);
        c.s.pos = meta_u64(ck, "train.pos", &bad);
        c.s.tokens = meta_u64(ck, "train.tokens", &bad);
        c.s.bad_valid = meta_u64(ck, "train.bad_valid", &bad);
        c.s.skipped = meta_u64(ck, "train.skipped", &bad);
        const char *bv = st_meta(ck, "train.best_valid");
        if (!bv || nmt_parse_double(bv, &c.s.best_valid) < 0)
            c.s.best_valid = INFINITY; /* "inf" is not finite: no best yet */
        if (bad) {
            nmt_seterr("cannot resume from '%s': training state missing or bad", o->output);
            goto fail;
        }
        st_free(ck);
        ck = NULL;
        if (tb.streaming) /* skip what the previous run consumed of this epoch */
            for (uint64_t i = 0; i < c.s.pos; i++) {
                int rc = batches_get(&tb, c.s.epoch, i, 0, 0, &br);
                if (rc < 0)
                    goto fail;
                if (rc == REC_END)
                    break;
            }
    }
    /* allocate activation memory once, for the largest batch */
    for (int pass = 0; pass < 2; pass++) {
        struct batches *bb = pass ? &vb : &tb;
        for (size_t i = 0; !bb->streaming && i < bb->n; i++)
            if (batch_record_decode(&br, bb->data.data + bb->off[i], bb->len[i]) < 0 || model_reserve(c.m, &br) < 0) {
                nmt_seterr("%s: batch %zu: %s", bb->name, i, nmt_errmsg());
                goto fail;
            }
    }
    if (o->max_steps && c.s.step >= o->max_steps) {
        nmt_error("'%s' is already at step %llu (--max-steps %llu): nothing to do", o->output,
                  (unsigned long long)c.s.step, (unsigned long long)o->max_steps);
        status = 0;
        goto out;
    }
    uint64_t epochs = o->epochs ? o->epochs : (o->max_steps || o->max_time > 0) ? UINT64_MAX : 1;
    if (tb.streaming)
        epochs = 1;

    if (o->log) {
        size_t ll = strlen(o->log);
        c.log_csv = ll > 4 && !strcmp(o->log + ll - 4, ".csv");
        if (!c.log_csv && !(ll > 6 && !strcmp(o->log + ll - 6, ".jsonl"))) {
            nmt_seterr("--log '%s': the name must end in .csv or .jsonl", o->log);
            goto fail;
        }
        int exists = o->resume && access(o->log, F_OK) == 0;
        c.log = fopen(o->log, o->resume ? "a" : "w");
        if (!c.log) {
            nmt_seterr("cannot open '%s': %s", o->log, strerror(errno));
            goto fail;
        }
        if (c.log_csv && !exists)
            fputs("step,epoch,loss,lr,tokens,tokens_per_s,grad_norm,gflop_s,valid_loss,valid_ppl\n", c.log);
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    int tty = !o->quiet && isatty(2);
    double t0 = now(), last_prog = 0, train_time = 0;
    uint64_t bad_run = 0, start_step = c.s.step, saved_step = UINT64_MAX;
    double log_loss = 0, log_time = 0, last_lr = 0, last_gn = 0, log_flops = 0;
    uint64_t log_tok = 0, log_n = 0;
    const char *stop = NULL;
    int data_end = 0;
    path2 = malloc(strlen(o->output) + 64);
    if (!path2) {
        nmt_seterr("out of memory");
        goto fail;
    }
    while (!stop) {
        double ts = now();
        if (model_zero_grad(c.m) < 0)
            goto fail;
        double loss = 0, flops = 0;
        uint64_t tok = 0;
        uint64_t micro = 0;
        while (micro < o->update_freq) {
            if (c.s.epoch >= epochs) {
                data_end = 1;
                break;
            }
            int rc = batches_get(&tb, c.s.epoch, c.s.pos, o->shuffle, o->seed, &br);
            if (rc < 0)
                goto fail;
            if (rc == REC_END) {
                c.s.epoch++;
                c.s.pos = 0;
                if (vb.n && !o->valid_every && c.s.epoch < epochs) /* end-of-epoch validation */
                    goto validate_now;
                continue;
            }
            c.s.pos++;
            struct model_loss L;
            uint64_t dseed = mix3(o->seed, c.s.step + 1, micro);
            if (model_step(c.m, &br, 1, 1, dseed, &L, NULL) < 0) {
                nmt_seterr("%s: batch %llu of epoch %llu: %s", tb.name, (unsigned long long)c.s.pos,
                           (unsigned long long)c.s.epoch + 1, nmt_errmsg());
                goto fail;
            }
            loss += L.loss;
            tok += (uint64_t)L.tokens;
            flops += model_step_flops(&cfg, &br);
            micro++;
            continue;
        validate_now:
            if (micro == 0)
                break;
        }
        if (micro > 0) {
            double lr = model_lr(o->lr, cfg.d_model, (int64_t)c.s.step + 1, (int64_t)o->warmup);
            double gn;
            int rc = model_update(c.m, (float)lr, (int64_t)c.s.step + 1, (int64_t)tok, o->clip, &gn);
            if (rc < 0)
                goto fail;
            double tl = tok ? loss / (double)tok : 0;
            if (rc == 1 || !isfinite(tl)) {
                c.s.skipped++;
                if (++bad_run >= o->max_bad) {
                    if (tty)
                        fputc('\n', stderr);
                    nmt_error("stopping: %llu steps in a row had a non-finite loss or gradient (last at step %llu); "
                              "the checkpoint '%s' was not overwritten",
                              (unsigned long long)bad_run, (unsigned long long)c.s.step + 1, o->output);
                    status = NMT_EXIT_DATA;
                    goto out;
                }
                nmt_warn("step %llu: non-finite loss or gradient, step skipped (%llu in a row)",
                         (unsigned long long)c.s.step + 1, (unsigned long long)bad_run);
            } else {
                bad_run = 0;
                c.s.step++;
                c.s.tokens += tok;
                double dt = now() - ts;
                train_time += dt;
                log_loss += tl, log_tok += tok, log_time += dt, log_n++, log_flops += flops;
                last_lr = lr, last_gn = gn;
                if (c.s.step % o->log_every == 0) {
                    if (log_row(&c, log_loss / (double)log_n, lr, log_tok, log_tok / log_time, gn,
                                log_flops / log_time * 1e-9, NAN, NAN) < 0)
                        goto fail;
                }
                if (tty && (now() - last_prog > 0.5 || c.s.step == 1)) {
                    double frac = o->max_steps ? (double)(c.s.step - start_step) / (double)(o->max_steps - start_step)
                                  : o->max_time > 0 ? (now() - t0) / o->max_time
                                  : (!tb.streaming && epochs != UINT64_MAX)
                                      ? ((double)c.s.epoch * tb.n + c.s.pos) / ((double)epochs * tb.n)
                                      : 0;
                    progress(&c, log_loss / (double)log_n, lr, log_tok / log_time, now() - t0, frac);
                    last_prog = now();
                }
                if (c.s.step % o->log_every == 0)
                    log_loss = 0, log_tok = 0, log_time = 0, log_n = 0, log_flops = 0;
            }
        }
        int epoch_end = c.s.pos == 0 && c.s.epoch > 0;
        if (o->max_steps && c.s.step >= o->max_steps)
            stop = "max-steps";
        else if (o->max_time > 0 && now() - t0 >= o->max_time)
            stop = "max-time";
        else if (data_end || c.s.epoch >= epochs)
            stop = "end of data";
        else if (got_signal)
            stop = "signal";
        /* validation */
        int do_valid = vb.n && ((o->valid_every && c.s.step % o->valid_every == 0 && micro > 0) ||
                                (!o->valid_every && epoch_end) || (stop && !o->valid_every && !epoch_end) ||
                                (stop && o->valid_every && c.s.step % o->valid_every));
        if (do_valid) {
            double vl = NAN, vn = NAN;
            if (validate(&c, &vb, &br, &vl, &vn) < 0)
                goto fail;
            if (tty)
                fputc('\n', stderr);
            if (!o->quiet)
                fprintf(stderr, "%s: step %llu: valid loss %.4f nll %.4f ppl %.2f%s\n", nmt_progname(),
                        (unsigned long long)c.s.step, vl, vn, exp(vn), vn < c.s.best_valid ? " (best)" : "");
            if (log_row(&c, NAN, last_lr, 0, 0, last_gn, 0, vl, exp(vn)) < 0)
                goto fail;
            if (vn < c.s.best_valid) {
                c.s.best_valid = vn;
                c.s.bad_valid = 0;
                snprintf(path2, strlen(o->output) + 64, "%s.best", o->output);
                if (save(&c, path2) < 0)
                    goto fail;
            } else if (o->patience && ++c.s.bad_valid >= o->patience && !stop) {
                stop = "patience";
            }
        }
        if (o->save_every && c.s.step % o->save_every == 0 && micro > 0) {
            if (save(&c, o->output) < 0)
                goto fail;
            saved_step = c.s.step;
            if (o->keep) {
                snprintf(path2, strlen(o->output) + 64, "%s.step-%llu", o->output, (unsigned long long)c.s.step);
                unlink(path2);
                if (link(o->output, path2) < 0 && save(&c, path2) < 0)
                    goto fail;
                if (c.s.step > o->keep * o->save_every) {
                    snprintf(path2, strlen(o->output) + 64, "%s.step-%llu", o->output,
                             (unsigned long long)(c.s.step - o->keep * o->save_every));
                    unlink(path2);
                }
            }
        }
    }
    if (tty)
        fputc('\n', stderr);
    if (saved_step != c.s.step && save(&c, o->output) < 0)
        goto fail;
    if (!strcmp(stop, "signal")) {
        nmt_error("interrupted by signal %d at step %llu; checkpoint written to '%s'; continue with the same "
                  "options and --resume",
                  (int)got_signal, (unsigned long long)c.s.step, o->output);
        status = NMT_EXIT_DATA;
        goto out;
    }
    if (!o->quiet)
        fprintf(stderr, "%s: %s: %llu steps, epoch %llu, %llu target tokens, %.1f s training (%.0f tokens/s)%s\n",
                nmt_progname(), stop, (unsigned long long)c.s.step, (unsigned long long)c.s.epoch + (c.s.pos > 0),
                (unsigned long long)c.s.tokens, train_time,
                train_time > 0 ? (double)(c.s.tokens) / train_time : 0,
                c.s.skipped ? " (some steps skipped: non-finite)" : "");
    status = 0;
    goto out;
fail:
    nmt_error("%s", nmt_errmsg());
    status = NMT_EXIT_DATA;
out:
    if (c.log && fclose(c.log) != 0 && status == 0) {
        nmt_error("cannot write the log '%s': %s", o->log, strerror(errno));
        status = NMT_EXIT_DATA;
    }
    free(path2);
    batch_record_free(&br);
    batches_close(&tb);
    if (o->valid)
        batches_close(&vb);
    model_free(c.m);
    backend_close(be);
    st_free(ck);
    vocab_free(voc);
    nmt_buf_free(&c.vocab_text);
    return status;
}
