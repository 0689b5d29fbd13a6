/* nmt-train: trains the Transformer on a batch stream with a backend plugin (nmt-train(1)).
 * Options and files here; the model, its checkpoints and the kernels are in libcommon/nn/model.c. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "run/backend_loader.h"
#include "nn/model.h"
#include "run/ranks.h"
#include "train/trainer.h"
#include "train/valid_bleu.h"
#include "io/stream.h"
#include "io/file.h"
#include "io/records.h"
#include "io/safetensors.h"
#include "cli/cli.h"
#include "cli/config.h"
#include "cli/opt.h"
#include "text/vocab.h"

struct freeze_parts {
    const char *text; /* as given; NULL: nothing frozen */
    int emb, enc;
};

struct opts {
    const char *input, *valid, *output, *vocab, *backend, *log, *preset, *comm;
    const char *init_from;  /* --init-from: the checkpoint whose weights a new run starts from */
    struct freeze_parts freeze; /* --freeze: the parts whose weights stay as they are */
    int resume, threads, quiet, no_shuffle, preset_set, reduce_fast, overlap;
    int ranks;              /* --ranks: a local job of this many processes (0 or 1: one) */
    int save_init;          /* --save-init: write the initialised model and stop */
    int gpu_comm;           /* --gpu-comm: the index in GPU_COMMS, -1 when not given (auto) */
    uint64_t epochs, max_steps, update_freq, seed, max_bad, valid_every, patience, save_every, keep, log_every;
    double max_time, lr, clip, progress_every, peak_lr;
    double ema;             /* --ema: decay of the moving average of the weights (0: none) */
    int lr_set, force, valid_bleu, valid_beam, dump_config;
    int bf16;               /* --precision bf16 */
    enum lr_schedule schedule;
    uint64_t warmup;
    /* model overrides; 0 (NaN for the rates) = from the preset */
    uint64_t layers, enc_layers, dec_layers, d_model, heads, ff, max_len;
    int pre_norm;
    double ls, dropout, att_dropout, act_dropout;
    /* the options of Marian models: -1 (NaN for ln_eps, 0 for the flag) = the default */
    int positions, start_zero, activation, tie, output_bias;
    double ln_eps;
};

/* Parses --freeze's comma-separated list of parts into the struct freeze_parts at FIELD; 0, or -1
 * after a usage error. */
static int parse_freeze(const char *opt, const char *arg, void *field)
{
    struct freeze_parts *f = field;
    *f = (struct freeze_parts){.text = arg};
    for (const char *p = arg;; p++) {
        size_t n = strcspn(p, ",");
        if (n == 10 && !strncmp(p, "embeddings", n))
            f->emb = 1;
        else if (n == 7 && !strncmp(p, "encoder", n))
            f->enc = 1;
        else
            return nmt_usage_error("invalid %s '%s' (expected embeddings, encoder or embeddings,encoder)", opt,
                                   arg), -1;
        p += n;
        if (!*p)
            return 0;
    }
}

static const char *show_freeze(const void *field) { return ((const struct freeze_parts *)field)->text; }

static int parse_schedule(const char *opt, const char *arg, void *field)
{
    if (lr_schedule_parse(arg, field) < 0)
        return nmt_usage_error("invalid %s '%s' (expected inverse-sqrt, constant or linear)", opt, arg), -1;
    return 0;
}

static const char *show_schedule(const void *field) { return lr_schedule_name(*(const enum lr_schedule *)field); }

#define OFF(field) offsetof(struct opts, field)
#define BIG (UINT64_C(1) << 62)
static const char *const PRECISIONS[] = {"float32", "bf16", NULL};
static const char *const REDUCTIONS[] = {"ordered", "fast", NULL};
static const char *const OFF_ON[] = {"off", "on", NULL};
/* in the order of the enums of nn/model_config.h */
static const char *const POSITIONS[] = {"paper", "marian", NULL};
static const char *const START_EMBEDDINGS[] = {"bos", "zero", NULL};
static const char *const ACTIVATIONS[] = {"relu", "swish", NULL};
static const char *const TIES[] = {"all", "target", "none", NULL};
static const char *const GPU_COMMS[] = {"auto", "nccl", "mpi", NULL};
/* The options; a configuration file (--config) holds every one but --config, --dump-config,
 * --help and --version, and --dump-config writes every one but --resume, --force and --layers. */
static const struct opt_spec OPTIONS[] = {
{.type = OT_TEXT, .help = "Input and output:"},
{OPTION(OT_STR, "input", 'i', "FILE", OFF(input),
        "training batch stream ('-' for stdin: one pass, in stream order)"),
 .def.s = "-"},
{OPTION(OT_STR, "valid", 0, "FILE", OFF(valid),
        "validation batch stream")},
{OPTION(OT_STR, "output", 'o', "FILE", OFF(output),
        "checkpoint to write (required); also FILE.best, FILE.step-N")},
{OPTION(OT_STR, "vocab", 'v', "FILE", OFF(vocab),
        "vocabulary of the batches (required unless --resume or --init-from)")},
{OPTION(OT_FLAG, "resume", 0, NULL, OFF(resume),
        "continue from the checkpoint at -o, exactly where it stopped"),
 .flags = OF_NO_DUMP},
{OPTION(OT_STR, "init-from", 0, "CKPT", OFF(init_from),
        "start from the weights of checkpoint CKPT (fine-tuning): its shape\n"
        "and vocabulary, a fresh optimizer, schedule and step count")},
{OPTION(OT_FLAG, "force", 0, NULL, OFF(force),
        "start afresh even if the checkpoint at -o exists (it is replaced)"),
 .flags = OF_NO_DUMP},
{OPTION(OT_STR, "backend", 0, "NAME", OFF(backend),
        "compute backend (default: $NMT_BACKEND, else auto)")},
{OPTION(OT_INT, "threads", 0, "N", OFF(threads),
        "worker threads of the backend (default: all cores)"),
 .flags = OF_ZERO_UNSET, .imin = 1, .imax = 1024},
{OPTION(OT_CHOICE, "precision", 0, "P", OFF(bf16),
        "float32 (default) or bf16: matrix products on bfloat16 operands\n"
        "with float32 sums (tensor cores on cuda; emulated exactly on cpu),\n"
        "float32 weights, Adam, activations, softmax, layer norm and loss"),
 .choices = PRECISIONS},
{.type = OT_TEXT, .help = "Length of training (the first limit reached ends it):"},
{OPTION(OT_U64, "epochs", 0, "E", OFF(epochs),
        "passes over the training file (default 1 unless a limit below)"),
 .flags = OF_ZERO_UNSET, .imin = 1, .imax = BIG},
{OPTION(OT_U64, "max-steps", 0, "N", OFF(max_steps),
        "total optimizer steps, counting those before a --resume"),
 .flags = OF_ZERO_UNSET, .imin = 1, .imax = BIG},
{OPTION(OT_FLAG, "save-init", 0, NULL, OFF(save_init),
        "write the model as initialised (step 0) to -o and stop: another\n"
        "engine can start from the same weights (nmt-export)"),
 .flags = OF_NO_DUMP},
{OPTION(OT_DURATION, "max-time", 0, "DUR", OFF(max_time),
        "wall time of this run: seconds or with s, m, h suffix"),
 .flags = OF_ZERO_UNSET | OF_MIN_OPEN, .dmin = 0, .dmax = INFINITY},
{.type = OT_TEXT, .help = "Model (a preset, then overrides):"},
{OPTION(OT_STR, "preset", 0, "NAME", OFF(preset),
        "tiny, small (default), base or big")},
{OPTION(OT_U64, "layers", 0, "N", OFF(layers),
        "encoder and decoder layers"),
 .flags = OF_ZERO_UNSET | OF_NO_DUMP, .imin = 1, .imax = 64},
{OPTION(OT_U64, "enc-layers", 0, "N", OFF(enc_layers),
        "encoder layers"),
 .flags = OF_ZERO_UNSET, .imin = 1, .imax = 64},
{OPTION(OT_U64, "dec-layers", 0, "N", OFF(dec_layers),
        "decoder layers"),
 .flags = OF_ZERO_UNSET, .imin = 1, .imax = 64},
{OPTION(OT_U64, "d-model", 0, "D", OFF(d_model),
        "model width"),
 .flags = OF_ZERO_UNSET, .imin = 2, .imax = 16384},
{OPTION(OT_U64, "heads", 0, "H", OFF(heads),
        "attention heads"),
 .flags = OF_ZERO_UNSET, .imin = 1, .imax = 1024},
{OPTION(OT_U64, "ff", 0, "F", OFF(ff),
        "feed-forward inner width"),
 .flags = OF_ZERO_UNSET, .imin = 1, .imax = 65536},
{OPTION(OT_FLAG, "pre-norm", 0, NULL, OFF(pre_norm),
        "layer norm before each sublayer (default: after, as the paper)")},
{OPTION(OT_U64, "max-len", 0, "N", OFF(max_len),
        "longest sentence accepted, in tokens (default 1024)"),
 .flags = OF_ZERO_UNSET, .imin = 2, .imax = 65536},
{OPTION(OT_CHOICE, "positions", 0, "paper|marian", OFF(positions),
        "position encoding: the paper's interleaved sines and cosines\n"
        "(default), or Marian's (sines in the first half, cosines after)"),
 .choices = POSITIONS, .def.i = -1},
{OPTION(OT_CHOICE, "start-embedding", 0, "bos|zero", OFF(start_zero),
        "the decoder's first input: the embedding of <s> (default) or a\n"
        "zero vector, plus the position encoding (Marian)"),
 .choices = START_EMBEDDINGS, .def.i = -1},
{OPTION(OT_CHOICE, "activation", 0, "relu|swish", OFF(activation),
        "FFN activation (default relu; swish: x * sigmoid(x))"),
 .choices = ACTIVATIONS, .def.i = -1},
{OPTION(OT_CHOICE, "tied-embeddings", 0, "all|target|none", OFF(tie),
        "all (default): one matrix for the source and target embeddings\n"
        "and the output projection; target: a separate source embedding;\n"
        "none: three matrices"),
 .choices = TIES, .def.i = -1},
{OPTION(OT_FLAG, "output-bias", 0, NULL, OFF(output_bias),
        "add a bias to the output logits")},
{OPTION(OT_DOUBLE, "ln-eps", 0, "X", OFF(ln_eps),
        "layer norm epsilon (default 1e-5; Marian's is 1e-6)"),
 .flags = OF_MIN_OPEN | OF_MAX_OPEN, .dmin = 0, .dmax = 1, .def.d = NAN},
{.type = OT_TEXT, .help = "Optimisation:"},
{OPTION(OT_DOUBLE, "lr", 0, "SCALE", OFF(lr),
        "learning rate scale of the schedule (default 1; the paper's 1 to 2)"),
 .flags = OF_MIN_OPEN, .dmin = 0, .dmax = INFINITY, .def.d = NAN},
{OPTION(OT_DOUBLE, "peak-lr", 0, "RATE", OFF(peak_lr),
        "instead of --lr: the rate the schedule peaks at (end of warm-up)"),
 .flags = OF_ZERO_UNSET | OF_MIN_OPEN | OF_MAX_OPEN, .dmin = 0, .dmax = 1},
{OPTION(OT_U64, "warmup", 0, "N", OFF(warmup),
        "warm-up steps (default 4000); lr = SCALE d^-0.5 min(t^-0.5, t N^-1.5)"),
 .flags = 0, .imin = 0, .imax = BIG, .def.u = 4000},
{OPTION(OT_CUSTOM, "schedule", 0, "S", OFF(schedule),
        "after the warm-up: inverse-sqrt (default: as above), constant (the\n"
        "peak), or linear (down to 0 at --max-steps, which it needs)"),
 .parse = parse_schedule, .show = show_schedule},
{OPTION(OT_DOUBLE, "clip-norm", 0, "X", OFF(clip),
        "clip the gradient norm to X (default 0: off)"),
 .dmin = 0, .dmax = INFINITY},
{OPTION(OT_CUSTOM, "freeze", 0, "PARTS", OFF(freeze),
        "keep the weights of PARTS as they are: embeddings (every embedding\n"
        "matrix and the output projection and bias), encoder, or both:\n"
        "embeddings,encoder"),
 .parse = parse_freeze, .show = show_freeze},
{OPTION(OT_DOUBLE, "ema", 0, "DECAY", OFF(ema),
        "also keep a moving average of the weights (e.g. 0.9999): validated,\n"
        "and written beside each checkpoint FILE as FILE.ema, a model to decode"),
 .flags = OF_ZERO_UNSET | OF_MAX_OPEN, .dmin = 0, .dmax = 1},
{OPTION(OT_U64, "update-freq", 0, "K", OFF(update_freq),
        "accumulate K batches per step (default 1)"),
 .flags = 0, .imin = 1, .imax = 1 << 20, .def.u = 1},
{OPTION(OT_U64, "seed", 0, "N", OFF(seed),
        "seed of initialisation, dropout and batch order (default 1)"),
 .flags = 0, .imin = 0, .imax = UINT64_MAX, .def.u = 1},
{OPTION(OT_DOUBLE, "label-smoothing", 0, "E", OFF(ls),
        "(default 0.1)"),
 .flags = OF_MAX_OPEN, .dmin = 0, .dmax = 1, .def.d = NAN},
{OPTION(OT_DOUBLE, "dropout", 0, "P", OFF(dropout),
        "residual and embedding dropout (default 0.1)"),
 .flags = OF_MAX_OPEN, .dmin = 0, .dmax = 1, .def.d = NAN},
{OPTION(OT_DOUBLE, "attention-dropout", 0, "P", OFF(att_dropout),
        "dropout on attention weights (default 0)"),
 .flags = OF_MAX_OPEN, .dmin = 0, .dmax = 1, .def.d = NAN},
{OPTION(OT_DOUBLE, "activation-dropout", 0, "P", OFF(act_dropout),
        "dropout on the FFN activation (default 0)"),
 .flags = OF_MAX_OPEN, .dmin = 0, .dmax = 1, .def.d = NAN},
{OPTION(OT_FLAG, "no-shuffle", 0, NULL, OFF(no_shuffle),
        "keep the file's batch order in every epoch")},
{OPTION(OT_U64, "max-bad", 0, "N", OFF(max_bad),
        "stop after N non-finite steps in a row (default 5)"),
 .flags = 0, .imin = 1, .imax = BIG, .def.u = 5},
{.type = OT_TEXT, .help = "Several ranks (mpirun -np N nmt-train ...; see nmt-scale(7)):"},
{OPTION(OT_INT, "ranks", 0, "N", OFF(ranks),
        "train as N processes on this machine, without MPI: each takes\n"
        "its own micro-batches on --threads (default: the cores / N), as\n"
        "mpirun -np N would"),
 .flags = OF_ZERO_UNSET, .imin = 1, .imax = 256},
{OPTION(OT_STR, "comm", 0, "NAME", OFF(comm),
        "auto (default: MPI when started by mpirun with N > 1), mpi, none")},
{OPTION(OT_CHOICE, "reduce", 0, "MODE", OFF(reduce_fast),
        "ordered (default: the model of one process with --update-freq\n"
        "N x K, bit for bit) or fast (the MPI library's all-reduce)"),
 .choices = REDUCTIONS},
{OPTION(OT_CHOICE, "overlap", 0, "on|off", OFF(overlap),
        "reduce each layer's gradient while the backward pass goes on\n"
        "(default on; ordered reduction; the same bits either way)"),
 .choices = OFF_ON, .def.i = 1},
{OPTION(OT_CHOICE, "gpu-comm", 0, "NAME", OFF(gpu_comm),
        "auto (default: NCCL for --backend cuda with N > 1), nccl (also\n"
        "for one rank), mpi (gradients through host memory)"),
 .choices = GPU_COMMS, .def.i = -1},
{.type = OT_TEXT, .help = "Validation, checkpoints, logs:"},
{OPTION(OT_U64, "valid-every", 0, "N", OFF(valid_every),
        "validate every N steps (default: end of each epoch)"),
 .flags = OF_ZERO_UNSET, .imin = 1, .imax = BIG},
{OPTION(OT_FLAG, "valid-bleu", 0, NULL, OFF(valid_bleu),
        "also translate the validation sources and score them with BLEU\n"
        "(sacreBLEU's default 13a on detokenized text); BLEU then decides\n"
        "FILE.best and --patience")},
{OPTION(OT_INT, "valid-beam", 0, "K", OFF(valid_beam),
        "beam of those translations (default 1: greedy)"),
 .flags = 0, .imin = 1, .imax = 64, .def.i = 1},
{OPTION(OT_U64, "patience", 0, "N", OFF(patience),
        "stop after N validations without improvement (default: never)"),
 .flags = OF_ZERO_UNSET, .imin = 1, .imax = BIG},
{OPTION(OT_U64, "save-every", 0, "N", OFF(save_every),
        "write the checkpoint every N steps (default: at the end)"),
 .flags = OF_ZERO_UNSET, .imin = 1, .imax = BIG},
{OPTION(OT_U64, "keep", 0, "N", OFF(keep),
        "also keep the last N periodic checkpoints as FILE.step-STEP"),
 .flags = OF_ZERO_UNSET, .imin = 0, .imax = 1000000},
{OPTION(OT_STR, "log", 0, "FILE", OFF(log),
        "metrics, one row per --log-every steps: .csv or .jsonl; - (stdout)\n"
        "or a device such as /dev/stderr: CSV")},
{OPTION(OT_U64, "log-every", 0, "N", OFF(log_every),
        "(default 1)"),
 .flags = 0, .imin = 1, .imax = BIG, .def.u = 1},
{OPTION(OT_DOUBLE, "progress-every", 0, "S", OFF(progress_every),
        "when stderr is not a terminal, a progress line every S seconds\n"
        "(default 30; on a terminal one line is updated in place)"),
 .dmin = 0, .dmax = 1e9, .def.d = 30},
{OPTION(OT_FLAG, "quiet", 'q', NULL, OFF(quiet),
        "no progress display")},
{.type = OT_TEXT, .help = "Configuration:"},
{OPTION(OT_CONFIG, "config", 0, "FILE", 0,
        "read options from FILE, one 'key: value' (or 'key = value') a line,\n"
        "key a long option's name; the command line's options win")},
{OPTION(OT_FLAG, "dump-config", 0, NULL, OFF(dump_config),
        "print the full effective configuration in that form and exit\n"
        "(checkpoints store it too, under the metadata key train.config)"),
 .flags = OF_NO_CONFIG},
{OPTION(OT_HELP, "help", 'h', NULL, 0,
        "show this help and exit")},
{OPTION(OT_VERSION, "version", 0, NULL, 0,
        "show the version and the plugins found, and exit")},
{.type = OT_END}};

static const char USAGE_HEAD[] =
    "Usage: nmt-train [OPTION]... -o CHECKPOINT [-i BATCHES]\n"
    "Trains a Transformer translation model on a batch stream (from nmt-batch; stdin by default)\n"
    "and writes safetensors checkpoints holding the model, its vocabulary and the training state.\n"
    "\n";
static const char USAGE_TAIL[] =
    "\n"
    "SIGINT or SIGTERM: the step finishes, the checkpoint is written, and the message says how\n"
    "to resume. Exit status: 0 success, 1 bad input or failure, 2 usage error.\n";

/* ---- the run ---- */

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

/* Everything one run holds. */
struct ctx {
    struct opts *o;
    struct model_config cfg;
    struct vocab *voc;
    struct st_file *ck;        /* the checkpoint resumed or initialised from, until loaded */
    const char *ck_path;       /* its name: -o on a resume, else --init-from */
    struct backend *be;
    struct model *m;
    struct batch_file tb, vb;
    struct trainer t;
    struct train_record rec;   /* what checkpoints record beside the state */
    struct nmt_buf vocab_text;
    char fp[17];
    FILE *log;
    int log_csv, tty;
    /* the loop's bookkeeping */
    double t0, last_prog, train_time, reduce_time, reduce_wait_time;
    uint64_t buckets, buckets_early, buckets_early_done;
    uint64_t bad_run, start_step, saved_step, epochs;
    double log_loss, log_time, last_lr, last_gn, log_flops;
    uint64_t log_tok, log_n;
    char *path2;               /* room for OUTPUT.best */
    char *config;              /* the effective configuration (--dump-config's text) */
    int lock;                  /* the output's lock, held for the run */
    struct comm *comm;         /* the ranks (NULL: one process) */
    struct gpu_comm *gpu;      /* the GPUs' NCCL job (NULL: gradients through the host) */
    int root;                  /* this process writes the checkpoints, the log and the messages */
};

static int log_row(struct ctx *c, double loss, double lr, uint64_t tokens, double tps, double gnorm, double gfs,
                   double vloss, double vnll, double vbleu)
{
    if (!c->log)
        return 0;
    enum { NF = 12 };
    char f[NF][40];
    snprintf(f[0], 40, "%llu", (unsigned long long)c->t.s.step);
    snprintf(f[1], 40, "%llu", (unsigned long long)c->t.s.epoch + 1);
    snprintf(f[2], 40, "%.17g", loss);
    snprintf(f[3], 40, "%.9g", lr);
    snprintf(f[4], 40, "%llu", (unsigned long long)tokens);
    snprintf(f[5], 40, "%.1f", tps);
    snprintf(f[6], 40, "%.9g", gnorm);
    snprintf(f[7], 40, "%.1f", gfs);
    snprintf(f[8], 40, "%.17g", vloss);
    snprintf(f[9], 40, "%.9g", exp(vnll));
    snprintf(f[10], 40, "%.17g", vnll);
    snprintf(f[11], 40, "%.2f", vbleu);
    static const char *const names[NF] = {"step", "epoch", "loss", "lr", "tokens", "tokens_per_s", "grad_norm",
                                          "gflop_s", "valid_loss", "valid_ppl", "valid_nll", "valid_bleu"};
    int nf = isnan(vloss) ? 8 : isnan(vbleu) ? NF - 1 : NF;
    if (isnan(loss)) { /* validation-only row: leave the training columns empty */
        f[2][0] = f[3][0] = f[4][0] = f[5][0] = f[6][0] = f[7][0] = 0;
    }
    if (c->log_csv) {
        for (int i = 0; i < NF; i++) {
            if (i)
                fputc(',', c->log);
            if (i < nf && f[i][0]) /* numbers: nothing to quote */
                fputs(f[i], c->log);
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

/* Shows where training stands: on a terminal one line rewritten in place; elsewhere (PLAIN) a line
 * of its own, so that logs and `2>&1 | tee` show training moving. */
static void progress(const struct ctx *c, double loss, double lr, double tps, double elapsed, double frac, int plain)
{
    char eta[32] = "", total[32] = "";
    if (frac > 0.001 && frac <= 1) {
        double rest = elapsed / frac - elapsed;
        snprintf(eta, sizeof eta, " ETA %dm%02ds", (int)(rest / 60), (int)fmod(rest, 60));
    }
    if (c->o->max_steps)
        snprintf(total, sizeof total, "/%llu", (unsigned long long)c->o->max_steps);
    fprintf(stderr, plain ? "%s: step %llu%s ep %llu loss %.4f lr %.2e %.0f tok/s elapsed %dm%02ds%s\n"
                          : "\r%sstep %llu%s ep %llu loss %.4f lr %.2e %.0f tok/s elapsed %dm%02ds%s\033[K",
            plain ? nmt_progname() : "", (unsigned long long)c->t.s.step, total, (unsigned long long)c->t.s.epoch + 1,
            loss, lr, tps, (int)(elapsed / 60), (int)fmod(elapsed, 60), eta);
}

static int run(struct opts *o);

/* Prints the version and the plugins found (--version). */
static int print_version(void)
{
    nmt_print_version();
    struct backend_info *list;
    int n = backend_list(&list);
    for (int i = 0; i < n; i++) {
        if (list[i].error)
            printf("plugin %s (%s): unusable: %s\n", list[i].name, list[i].path, list[i].error);
        else
            printf("plugin %s (%s): score %d, ABI %u.%u%s%s\n", list[i].name, list[i].path, list[i].score,
                   list[i].abi_major, list[i].abi_minor, list[i].score > 0 ? "" : ", unusable here: ",
                   list[i].score > 0 ? "" : list[i].reason ? list[i].reason : "it scores 0");
    }
    backend_list_free(list, n);
    return nmt_close_stdout() < 0 ? NMT_EXIT_DATA : 0;
}

enum { GO_ON = -1 };

/* Returns 1 when --log LOG names something nmt-train writes to: a name ending in .csv or .jsonl,
 * -, /dev/stdout, /dev/stderr, or an existing file that is not a regular one (a pipe, a device). */
static int log_name_ok(const char *log)
{
    size_t ll = strlen(log);
    struct stat sb;
    return !strcmp(log, "-") || !strcmp(log, "/dev/stdout") || !strcmp(log, "/dev/stderr") ||
           (ll > 6 && !strcmp(log + ll - 6, ".jsonl")) || (ll > 4 && !strcmp(log + ll - 4, ".csv")) ||
           (stat(log, &sb) == 0 && !S_ISREG(sb.st_mode));
}

/* Parses and checks the options into O: GO_ON, or the exit status (help, version, usage error). */
static int parse_args(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){0};
    opt_defaults(OPTIONS, o);
    switch (opt_parse(OPTIONS, argc, argv, o)) {
    case OPT_GOT_HELP: return opt_help_exit(USAGE_HEAD, OPTIONS, USAGE_TAIL);
    case OPT_GOT_VERSION: return print_version();
    case OPT_USAGE: return NMT_EXIT_USAGE;
    }
    o->lr_set = !isnan(o->lr);
    if (!o->lr_set)
        o->lr = 1;
    o->preset_set = o->preset != NULL;
    if (!o->preset)
        o->preset = "small";
    if (optind < argc) {
        if (optind + 1 < argc)
            return nmt_usage_error("too many arguments");
        o->input = argv[optind];
    }
    if (!o->output || !*o->output || !strcmp(o->output, "-"))
        return nmt_usage_error("a checkpoint file is required (-o FILE)");
    if (!o->resume && !o->vocab && !o->init_from)
        return nmt_usage_error("the vocabulary of the batches is required (--vocab FILE)");
    if (o->init_from && !*o->init_from)
        return nmt_usage_error("--init-from needs a checkpoint file");
    if (o->save_init && o->resume)
        return nmt_usage_error("--save-init writes a new model: not with --resume");
    struct model_config tmp;
    if (model_preset(&tmp, o->preset) < 0)
        return nmt_usage_error("%s", nmt_errmsg());
    if (o->keep && !o->save_every)
        return nmt_usage_error("--keep needs --save-every");
    if (o->patience && !o->valid)
        return nmt_usage_error("--patience needs --valid");
    if (o->log && !log_name_ok(o->log))
        return nmt_usage_error("--log '%s': the name must end in .csv or .jsonl (or be - for stdout)", o->log);
    if (o->valid_bleu && !o->valid)
        return nmt_usage_error("--valid-bleu needs --valid");
    if (o->resume && o->force)
        return nmt_usage_error("--resume continues the checkpoint and --force replaces it: give one");
    if (o->schedule == LR_SCHEDULE_LINEAR && o->max_steps <= (o->warmup > 1 ? o->warmup : 1))
        return nmt_usage_error("--schedule linear decays to 0 at --max-steps: it needs --max-steps above --warmup");
    if (o->lr_set && o->peak_lr > 0)
        return nmt_usage_error("--lr (a scale of the schedule) and --peak-lr (its peak rate) exclude each other");
    return GO_ON;
}

/* declared here, defined with the configuration's other helpers below */
static void apply_overrides(const struct opts *o, struct model_config *c);

/* Writes to F the effective configuration of O in the form --config reads: every option a line,
 * the model's shape SHAPE (NULL: resolved from the preset and the overrides), unset options as comments. */
static void write_config(FILE *f, const struct opts *o, const struct model_config *shape)
{
    struct model_config m;
    model_preset(&m, o->preset);
    apply_overrides(o, &m);
    if (shape) /* the model's own (from a checkpoint): written out, so that the text reads back as it */
        m = *shape;
    struct opts d = *o;
    d.enc_layers = (uint64_t)m.enc_layers, d.dec_layers = (uint64_t)m.dec_layers, d.d_model = (uint64_t)m.d_model;
    d.heads = (uint64_t)m.heads, d.ff = (uint64_t)m.ff, d.max_len = (uint64_t)m.max_len, d.pre_norm = m.pre_norm;
    d.ls = m.label_smoothing, d.dropout = m.dropout, d.att_dropout = m.attn_dropout, d.act_dropout = m.act_dropout;
    d.positions = m.positions, d.start_zero = m.start_zero, d.activation = m.activation, d.tie = m.tie;
    d.output_bias = m.output_bias, d.ln_eps = m.ln_eps;
    if (!o->lr_set) /* the default scale: a comment, so that a --peak-lr may join the file */
        d.lr = NAN;
    opt_dump(f, OPTIONS, &d);
}

/* The text of write_config (malloc'd), or NULL with the error set. */
static char *config_text(const struct opts *o, const struct model_config *shape)
{
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    if (!f)
        return nmt_seterr("out of memory"), NULL;
    write_config(f, o, shape);
    if (fclose(f) != 0) {
        free(text);
        return nmt_seterr("out of memory"), NULL;
    }
    return text;
}

/* --dump-config: prints the configuration; the exit status. */
static int dump_config(const struct opts *o)
{
    write_config(stdout, o, NULL);
    return nmt_close_stdout() < 0 ? (nmt_error("%s", nmt_errmsg()), NMT_EXIT_DATA) : 0;
}

int main(int argc, char **argv)
{
    nmt_start(argv);
    int nargc;
    char **nargv;
    if (config_args(argc, argv, OPTIONS, &nargc, &nargv) < 0)
        return nmt_usage_error("%s", nmt_errmsg());
    struct opts o;
    int rc = parse_args(nargc, nargv, &o);
    if (rc == GO_ON && o.dump_config)
        rc = dump_config(&o);
    if (rc != GO_ON) {
        config_args_free(nargc, nargv);
        return rc;
    }
    rc = run(&o);
    config_args_free(nargc, nargv);
    if (nmt_close_stdout() < 0) {
        nmt_error("%s", nmt_errmsg());
        return NMT_EXIT_DATA;
    }
    return rc;
}

/* Applies the options that override a configuration's fields to C. */
static void apply_overrides(const struct opts *o, struct model_config *c)
{
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
    if (o->pre_norm)
        c->pre_norm = 1;
    if (o->ls >= 0)
        c->label_smoothing = (float)o->ls;
    if (o->dropout >= 0)
        c->dropout = (float)o->dropout;
    if (o->att_dropout >= 0)
        c->attn_dropout = (float)o->att_dropout;
    if (o->act_dropout >= 0)
        c->act_dropout = (float)o->act_dropout;
    if (o->positions >= 0)
        c->positions = o->positions;
    if (o->start_zero >= 0)
        c->start_zero = o->start_zero;
    if (o->activation >= 0)
        c->activation = o->activation;
    if (o->tie >= 0)
        c->tie = o->tie;
    if (o->output_bias)
        c->output_bias = 1;
    if (o->ln_eps > 0)
        c->ln_eps = (float)o->ln_eps;
}

/* Builds the configuration from the preset and the overrides. */
static void build_config(const struct opts *o, struct model_config *c, int vocab)
{
    model_preset(c, o->preset);
    c->vocab = vocab;
    apply_overrides(o, c);
}

/* 1 when A and B describe models of one shape. */
static int same_shape(const struct model_config *a, const struct model_config *b)
{
    return a->enc_layers == b->enc_layers && a->dec_layers == b->dec_layers && a->d_model == b->d_model &&
           a->heads == b->heads && a->ff == b->ff && a->pre_norm == b->pre_norm && a->max_len == b->max_len;
}

/* 1 when A and B have the same options of Marian models (positions, start, activation, ties,
 * output bias, layer norm epsilon). */
static int same_options(const struct model_config *a, const struct model_config *b)
{
    return a->positions == b->positions && a->start_zero == b->start_zero && a->activation == b->activation &&
           a->tie == b->tie && a->output_bias == b->output_bias && a->ln_eps == b->ln_eps;
}

/* Reads the configuration and the vocabulary of the checkpoint C->ck_path (WHAT: "resume" or
 * "start") into C, with the options' dropout and label smoothing; explicit shape options must agree
 * with the checkpoint's. 0, or -1 with the error set. */
static int config_from_checkpoint(struct ctx *c, const char *what)
{
    struct opts *o = c->o;
    const char *path = c->ck_path;
    /* a new run from the weights needs no optimizer state: not read */
    c->ck = o->resume ? st_read(path) : st_read_skip(path, "optim.");
    if (!c->ck)
        return nmt_seterr("cannot %s: %s", what, nmt_errmsg());
    if (checkpoint_check_finite(c->ck, path) < 0)
        return nmt_seterr("cannot %s: %s", what, nmt_errmsg());
    if (model_config_load(&c->cfg, c->ck) < 0)
        return nmt_seterr("cannot %s from '%s': %s", what, path, nmt_errmsg());
    if (!st_find(c->ck, CKPT_VOCAB_FILE))
        return nmt_seterr("cannot %s from '%s': no vocabulary inside", what, path);
    if (!(c->voc = checkpoint_vocab(c->ck, path)))
        return -1;
    /* the checkpoint's configuration wins: options may only repeat it */
    struct model_config want = c->cfg, *cfg = &c->cfg;
    apply_overrides(o, &want);
    if (!same_shape(&want, cfg))
        return nmt_seterr("'%s' holds another model shape (d %d, heads %d, ff %d, layers %d+%d, max-len %d%s) than "
                          "the options ask for (d %d, heads %d, ff %d, layers %d+%d, max-len %d%s)",
                          path, cfg->d_model, cfg->heads, cfg->ff, cfg->enc_layers, cfg->dec_layers, cfg->max_len,
                          cfg->pre_norm ? ", pre-norm" : "", want.d_model, want.heads, want.ff, want.enc_layers,
                          want.dec_layers, want.max_len, want.pre_norm ? ", pre-norm" : "");
    if (!same_options(&want, cfg))
        return nmt_seterr("'%s' holds a model of other options (positions %s, start embedding %s, activation %s, "
                          "tied embeddings %s, output bias %d, ln-eps %g) than the options ask for (%s, %s, %s, %s, "
                          "%d, %g)",
                          path, model_positions_name(cfg->positions), model_start_name(cfg->start_zero),
                          model_activation_name(cfg->activation), model_tie_name(cfg->tie), cfg->output_bias,
                          (double)cfg->ln_eps, model_positions_name(want.positions), model_start_name(want.start_zero),
                          model_activation_name(want.activation), model_tie_name(want.tie), want.output_bias,
                          (double)want.ln_eps);
    struct model_config preset;
    build_config(o, &preset, cfg->vocab);
    if (o->preset_set && !same_shape(&preset, cfg))
        return nmt_seterr("'%s' is not a model of --preset %s and the shape options given (d %d, heads %d, ff %d, "
                          "layers %d+%d); with --%s the checkpoint's configuration is used: drop --preset",
                          path, o->preset, cfg->d_model, cfg->heads, cfg->ff, cfg->enc_layers, cfg->dec_layers,
                          o->resume ? "resume" : "init-from");
    if (o->ls >= 0)
        cfg->label_smoothing = (float)o->ls;
    if (o->dropout >= 0)
        cfg->dropout = (float)o->dropout;
    if (o->att_dropout >= 0)
        cfg->attn_dropout = (float)o->att_dropout;
    if (o->act_dropout >= 0)
        cfg->act_dropout = (float)o->act_dropout;
    return 0;
}

/* Reads the vocabulary and builds the configuration: from the checkpoint at -o with --resume, or
 * at --init-from (whose shape explicit options must agree with), else from --vocab and the options.
 * 0, or -1 with the error set. */
static int setup_model_config(struct ctx *c)
{
    struct opts *o = c->o;
    if (o->resume || o->init_from) { /* a resume continues the run at -o: --init-from served its start */
        c->ck_path = o->resume ? o->output : o->init_from;
        return config_from_checkpoint(c, o->resume ? "resume" : "start");
    }
    if (!(c->voc = vocab_load(o->vocab)))
        return -1;
    build_config(o, &c->cfg, (int)c->voc->n);
    return model_config_check(&c->cfg);
}

/* The vocabulary's fingerprint and text, checked against --vocab on a resume. 0, or -1. */
static int setup_vocab(struct ctx *c)
{
    vocab_fingerprint_hex(c->voc, c->fp);
    if (c->ck_path && c->o->vocab) {
        struct vocab *v2 = vocab_load(c->o->vocab);
        if (!v2)
            return -1;
        char fp2[17];
        vocab_fingerprint_hex(v2, fp2);
        vocab_free(v2);
        if (strcmp(fp2, c->fp))
            return nmt_seterr("vocabulary '%s' (%s) differs from the one in '%s' (%s)", c->o->vocab, fp2, c->ck_path,
                              c->fp);
    }
    return vocab_format(c->voc, &c->vocab_text);
}

static int reserve_batch(void *m, const struct batch_record *br) { return model_reserve(m, br); }

/* The schedule's scale from --peak-lr, or a warning when --lr looks like an absolute rate (a
 * fairseq or Marian habit: --lr 5e-4 would train at a rate a thousand times too small). */
static void settle_lr(struct ctx *c)
{
    struct opts *o = c->o;
    double w = o->warmup > 1 ? (double)o->warmup : 1, d = c->cfg.d_model;
    if (o->peak_lr > 0) {
        o->lr = o->peak_lr * sqrt(d) * sqrt(w);
        return;
    }
    double peak = lr_paper(o->lr, c->cfg.d_model, (int64_t)w, (int64_t)o->warmup);
    if (o->lr_set && o->lr < 0.05 && c->root)
        nmt_warn("--lr %g is the scale of the schedule (the paper's is 1 to 2), not a rate: it peaks at %.3g "
                 "after %g steps; for a peak rate of %g use --peak-lr %g",
                 o->lr, peak, w, o->lr, o->lr);
}

/* Freezes the parts --freeze names (the embeddings: every embedding matrix, the output projection
 * and its bias; the encoder's layers and final layer norm). 0 or -1. */
static int freeze(struct ctx *c)
{
    const char *parts[6];
    int n = 0;
    if (c->o->freeze.emb)
        parts[n++] = "emb.", parts[n++] = "dec_emb.", parts[n++] = "out.";
    if (c->o->freeze.enc)
        parts[n++] = "enc.", parts[n++] = "enc_ln.";
    if (n && model_freeze(c->m, parts, n) < 0)
        return -1;
    return 0;
}

/* On a resume with --ema, reads the moving average of the weights from the checkpoint (one without
 * it starts the average from the weights it holds); frees the checkpoint. 0, or -1 with the error set. */
static int resume_ema(struct ctx *c)
{
    int rc = c->ck && c->o->resume && c->t.ema ? checkpoint_get_ema(c->ck, c->t.ema, model_num_params(c->m)) : 1;
    if (rc < 0)
        return nmt_seterr("cannot resume from '%s': %s", c->o->output, nmt_errmsg());
    if (rc == 0 && c->root)
        nmt_warn("'%s' holds no moving average of the weights: --ema starts it from the weights of step %llu",
                 c->o->output, (unsigned long long)c->t.s.step);
    st_free(c->ck);
    c->ck = NULL;
    return 0;
}

/* Opens the batches, the backend and the model (initialised, or loaded with its training state on a
 * resume), and sizes the model's memory for the largest batch. 0, or -1 with the error set. */
static int setup_training(struct ctx *c)
{
    struct opts *o = c->o;
    struct stat sb;
    int streaming = !strcmp(o->input, "-") || (stat(o->input, &sb) == 0 && !S_ISREG(sb.st_mode));
    if (streaming && comm_size(c->comm) > 1)
        return nmt_seterr("with %d ranks the training batches must be a file every rank can read, not %s", comm_size(c->comm),
                          strcmp(o->input, "-") ? o->input : "stdin (it reaches rank 0 only)");
    if (batch_file_open(&c->tb, o->input, streaming, c->fp) < 0)
        return c->ck_path ? nmt_seterr("%s (the model's vocabulary is that of '%s')", nmt_errmsg(), c->ck_path) : -1;
    if (!c->tb.has_vocab)
        nmt_warn("%s: stream has no vocab fingerprint; cannot check it against the vocabulary", c->tb.name);
    if (o->valid && batch_file_open(&c->vb, o->valid, 0, c->fp) < 0)
        return c->ck_path ? nmt_seterr("%s (the model's vocabulary is that of '%s')", nmt_errmsg(), c->ck_path) : -1;
    if (o->valid && !c->vb.has_vocab)
        nmt_warn("%s: stream has no vocab fingerprint; cannot check it against the vocabulary", c->vb.name);
    /* one GPU a rank: the rank's index on its machine (the cpu backend ignores it) */
    struct nmt_backend_opts bo = {.size = sizeof bo, .threads = o->threads, .device = comm_local_rank(c->comm)};
    if (!(c->be = backend_open(o->backend, &bo)))
        return -1;
    const char *gpu =
        gpu_comm_choose(o->gpu_comm >= 0 ? GPU_COMMS[o->gpu_comm] : NULL, c->be->ops.name, comm_size(c->comm));
    if (!gpu || (!strcmp(gpu, "nccl") && gpu_comm_open(c->comm, bo.device, &c->gpu) < 0))
        return -1;
    if (c->gpu && !o->quiet)
        fprintf(stderr, "%s: gradients reduced on the GPUs through %s\n", nmt_progname(), gpu_comm_description(c->gpu));
    c->m = model_new(c->be, &c->cfg, 1);
    if (!c->m || model_init(c->m, o->seed) < 0)
        return -1;
    if (o->bf16 && model_set_precision(c->m, NMT_DTYPE_BF16) < 0)
        return -1;
    struct train_state s = {.best_valid = INFINITY, .best_bleu = -INFINITY};
    if (c->ck && o->resume) {
        if (model_load(c->m, c->ck, 1) < 0 || checkpoint_train_state(c->ck, &s) < 0)
            return nmt_seterr("cannot resume from '%s': %s", o->output, nmt_errmsg());
    } else if (c->ck) { /* the weights only: the Adam moments stay as model_init left them, zero */
        if (model_load(c->m, c->ck, 0) < 0)
            return nmt_seterr("cannot start from '%s': %s", o->init_from, nmt_errmsg());
        st_free(c->ck);
        c->ck = NULL;
    }
    if (freeze(c) < 0)
        return -1;
    c->epochs = o->epochs ? o->epochs : (o->max_steps || o->max_time > 0) ? UINT64_MAX : 1;
    if (c->tb.streaming)
        c->epochs = 1;
    settle_lr(c);
    struct trainer_opts to = {.epochs = c->epochs, .update_freq = o->update_freq, .seed = o->seed,
                              .warmup = o->warmup, .lr = o->lr, .clip = o->clip, .schedule = o->schedule,
                              .last_step = o->max_steps, .ema = o->ema, .shuffle = !o->no_shuffle,
                              .valid_at_epoch_end = c->vb.n && !o->valid_every, .comm = c->comm,
                              .reduce_fast = o->reduce_fast, .overlap = o->overlap, .gpu = c->gpu};
    if (trainer_init(&c->t, c->m, &c->cfg, &c->tb, &to, &s) < 0 || resume_ema(c) < 0)
        return -1;
    uint64_t update_freq = o->update_freq * (uint64_t)comm_size(c->comm);
    c->rec = (struct train_record){o->seed, o->warmup,        update_freq,
                                   o->lr,   lr_schedule_name(o->schedule), o->ema, c->fp,
                                   &c->vocab_text, "nmt-train " NMT_VERSION,  c->config};
    if (trainer_skip_consumed(&c->t) < 0)
        return -1;
    if (batch_file_each(&c->tb, &c->t.br, reserve_batch, c->m) < 0 ||
        batch_file_each(&c->vb, &c->t.br, reserve_batch, c->m) < 0)
        return -1;
    return 0;
}

/* Opens --log (appended to on a resume), writing the CSV header to a new one. 0, or -1. */
static int open_log(struct ctx *c)
{
    const char *log = c->o->log;
    if (!log)
        return 0;
    size_t ll = strlen(log);
    struct stat sb;
    /* stdout and stderr are used as they are (not reopened, which would truncate a file behind them) */
    int std_fd = !strcmp(log, "-") || !strcmp(log, "/dev/stdout") ? STDOUT_FILENO : !strcmp(log, "/dev/stderr") ? STDERR_FILENO : -1;
    int stream = std_fd >= 0 || (stat(log, &sb) == 0 && !S_ISREG(sb.st_mode));
    int jsonl = ll > 6 && !strcmp(log + ll - 6, ".jsonl");
    c->log_csv = !jsonl; /* the name was checked with the options (log_name_ok) */
    int exists = c->o->resume && !stream && access(log, F_OK) == 0;
    if (std_fd >= 0)
        c->log = fdopen(dup(std_fd), "w");
    else
        c->log = fopen(log, c->o->resume && !stream ? "a" : "w");
    if (!c->log)
        return nmt_seterr("cannot open '%s': %s", log, strerror(errno));
    if (c->log_csv && !exists)
        fputs("step,epoch,loss,lr,tokens,tokens_per_s,grad_norm,gflop_s,valid_loss,valid_ppl,valid_nll,valid_bleu\n", c->log);
    return 0;
}

/* Books a step that updated the model: log rows every --log-every steps, progress on a terminal. */
static int after_step(struct ctx *c, const struct trainer_step *st, double dt)
{
    const struct opts *o = c->o;
    const struct train_state *s = &c->t.s;
    c->train_time += dt;
    c->log_loss += st->loss, c->log_tok += st->tokens, c->log_time += dt, c->log_n++, c->log_flops += st->flops;
    c->reduce_time += st->reduce_s;
    c->reduce_wait_time += st->reduce_wait_s;
    c->buckets += st->buckets, c->buckets_early += st->buckets_early, c->buckets_early_done += st->buckets_early_done;
    c->last_lr = st->lr, c->last_gn = st->grad_norm;
    if (s->step % o->log_every == 0 &&
        log_row(c, c->log_loss / (double)c->log_n, st->lr, c->log_tok, c->log_tok / c->log_time, st->grad_norm,
                c->log_flops / c->log_time * 1e-9, NAN, NAN, NAN) < 0)
        return -1;
    int plain = !c->tty && !o->quiet && now() - c->last_prog >= o->progress_every;
    if ((c->tty && (now() - c->last_prog > 0.5 || s->step == 1)) || plain) {
        double frac = o->max_steps ? (double)(s->step - c->start_step) / (double)(o->max_steps - c->start_step)
                      : o->max_time > 0 ? (now() - c->t0) / o->max_time
                      : (!c->tb.streaming && c->epochs != UINT64_MAX)
                          ? ((double)s->epoch * c->tb.n + s->pos) / ((double)c->epochs * c->tb.n)
                          : 0;
        progress(c, c->log_loss / (double)c->log_n, st->lr, c->log_tok / c->log_time, now() - c->t0, frac, plain);
        c->last_prog = now();
    }
    if (s->step % o->log_every == 0)
        c->log_loss = 0, c->log_tok = 0, c->log_time = 0, c->log_n = 0, c->log_flops = 0;
    return 0;
}

/* Counts a skipped step; 1 when --max-bad of them came in a row (the run must stop), else 0. */
static int after_skip(struct ctx *c)
{
    uint64_t step = c->t.s.step + 1;
    if (++c->bad_run >= c->o->max_bad) {
        if (c->tty)
            fputc('\n', stderr);
        nmt_error("stopping: %llu steps in a row had a non-finite loss or gradient (last at step %llu); "
                  "the checkpoint '%s' was not overwritten",
                  (unsigned long long)c->bad_run, (unsigned long long)step, c->o->output);
        return 1;
    }
    nmt_warn("step %llu: non-finite loss or gradient, step skipped (%llu in a row)", (unsigned long long)step,
             (unsigned long long)c->bad_run);
    return 0;
}

/* The BLEU of the validation translations (--valid-bleu), computed by rank 0 and given to all. 0 or -1. */
static int validation_bleu(struct ctx *c, double *bleu)
{
    if (c->root && valid_bleu(c->be, c->m, c->voc, &c->vb, &c->t.br, c->o->valid_beam, bleu) < 0)
        return -1;
    return comm_bcast(c->comm, bleu, sizeof *bleu, 0);
}

/* Validates, logs, keeps OUTPUT.best and counts --patience; *STOP becomes "patience" when it runs out.
 * The best is the lowest nll per token, or with --valid-bleu the highest BLEU. */
static int validate(struct ctx *c, const char **stop)
{
    struct train_state *s = &c->t.s;
    double vl = NAN, vn = NAN, vb = NAN;
    /* with --ema, the moving average is validated: swapped in, then back */
    if (trainer_ema_swap(&c->t) < 0)
        return -1;
    int rc = trainer_validate(&c->t, &c->vb, &vl, &vn);
    if (rc == 0 && c->o->valid_bleu)
        rc = validation_bleu(c, &vb);
    if (trainer_ema_swap(&c->t) < 0 || rc < 0)
        return -1;
    int best = c->o->valid_bleu ? vb > s->best_bleu : vn < s->best_valid;
    char bleu[32] = "";
    if (c->o->valid_bleu)
        snprintf(bleu, sizeof bleu, " bleu %.2f", vb);
    if (c->tty)
        fputc('\n', stderr);
    if (!c->o->quiet)
        fprintf(stderr, "%s: step %llu: valid loss %.4f nll %.4f ppl %.2f%s%s\n", nmt_progname(),
                (unsigned long long)s->step, vl, vn, exp(vn), bleu, best ? " (best)" : "");
    if (log_row(c, NAN, c->last_lr, 0, 0, c->last_gn, 0, vl, vn, vb) < 0)
        return -1;
    if (vn < s->best_valid)
        s->best_valid = vn;
    if (vb > s->best_bleu)
        s->best_bleu = vb;
    if (best) {
        s->bad_valid = 0;
        snprintf(c->path2, strlen(c->o->output) + 64, "%s.best", c->o->output);
        return c->root ? trainer_save(&c->t, &c->rec, c->path2) : 0;
    }
    if (c->o->patience && ++s->bad_valid >= c->o->patience && !*stop)
        *stop = "patience";
    return 0;
}

/* The reason to stop after this step, or NULL to go on: the same on every rank (a signal or the
 * time limit on one rank stops all). 0, or -1 with the error set. */
static int stop_reason(const struct ctx *c, int data_end, const char **stop)
{
    int64_t local[2] = {c->o->max_time > 0 && now() - c->t0 >= c->o->max_time, got_signal != 0};
    if (comm_sum_i64(c->comm, local, 2) < 0)
        return -1;
    *stop = c->o->max_steps && c->t.s.step >= c->o->max_steps ? "max-steps"
            : local[0]                                           ? "max-time"
            : data_end || c->t.s.epoch >= c->epochs             ? "end of data"
            : local[1]                                           ? "signal"
                                                                 : NULL;
    return 0;
}

/* Steps until a limit, the data's end, --patience or a signal; *STOP says which. 0, 1 (stopped by
 * --max-bad) or -1 with the error set. */
static int train_loop(struct ctx *c, const char **stop)
{
    const struct opts *o = c->o;
    const struct train_state *s = &c->t.s;
    while (!*stop) {
        double ts = now();
        struct trainer_step st;
        if (trainer_step(&c->t, &st) < 0)
            return -1;
        if (st.micro > 0 && st.skipped && after_skip(c))
            return 1;
        if (st.micro > 0 && !st.skipped) {
            c->bad_run = 0;
            if (after_step(c, &st, now() - ts) < 0)
                return -1;
        }
        int epoch_end = s->pos == 0 && s->epoch > 0;
        if (stop_reason(c, st.data_end, stop) < 0)
            return -1;
        int do_valid = c->vb.n && ((o->valid_every && s->step % o->valid_every == 0 && st.micro > 0) ||
                                   (!o->valid_every && epoch_end) || (*stop && !o->valid_every && !epoch_end) ||
                                   (*stop && o->valid_every && s->step % o->valid_every));
        if (do_valid && validate(c, stop) < 0)
            return -1;
        if (o->save_every && s->step % o->save_every == 0 && st.micro > 0) {
            if (c->root && trainer_save_periodic(&c->t, &c->rec, o->output, o->keep, o->save_every) < 0)
                return -1;
            c->saved_step = s->step;
        }
    }
    return 0;
}

/* Writes the final checkpoint and says why training stopped. The exit status. */
static int finish(struct ctx *c, const char *stop)
{
    const struct train_state *s = &c->t.s;
    if (c->tty)
        fputc('\n', stderr);
    /* the ranks' peak resident memory, added (a collective: before anything that may fail on one rank) */
    struct rusage ru;
    int64_t peak_kb = getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : 0;
    if (comm_sum_i64(c->comm, &peak_kb, 1) < 0)
        return nmt_error("%s", nmt_errmsg()), NMT_EXIT_DATA;
    if (c->root && c->saved_step != s->step && trainer_save(&c->t, &c->rec, c->o->output) < 0)
        return nmt_error("%s", nmt_errmsg()), NMT_EXIT_DATA;
    if (!strcmp(stop, "signal")) {
        char sig[32] = "a signal"; /* on several ranks, another rank may have been the one signalled */
        if (got_signal)
            snprintf(sig, sizeof sig, "signal %d", (int)got_signal);
        if (c->root)
            nmt_error("interrupted by %s at step %llu; checkpoint written to '%s'; continue with the same "
                      "options and --resume",
                      sig, (unsigned long long)s->step, c->o->output);
        return NMT_EXIT_DATA;
    }
    char red[512] = "";
    if (c->reduce_time > 0)
        snprintf(red, sizeof red, ", %.1f s of it reducing gradients (%.0f%%, %.1f s after the backward passes)",
                 c->reduce_time, c->train_time > 0 ? 100 * c->reduce_time / c->train_time : 0, c->reduce_wait_time);
    if (comm_size(c->comm) > 1 && c->buckets)
        snprintf(red + strlen(red), sizeof red - strlen(red),
                 "; %llu gradient buckets sent, %llu of them during the backward pass (%llu done before its end)",
                 (unsigned long long)c->buckets, (unsigned long long)c->buckets_early,
                 (unsigned long long)c->buckets_early_done);
    if (comm_size(c->comm) > 1)
        snprintf(red + strlen(red), sizeof red - strlen(red), "; peak resident memory of the %d ranks together %.0f MiB",
                 comm_size(c->comm), (double)peak_kb / 1024);
    if (!c->o->quiet)
        fprintf(stderr, "%s: %s: %llu steps, epoch %llu, %llu target tokens, %.1f s training (%.0f tokens/s)%s%s\n",
                nmt_progname(), stop, (unsigned long long)s->step, (unsigned long long)s->epoch + (s->pos > 0),
                (unsigned long long)s->tokens, c->train_time,
                c->train_time > 0 ? (double)(s->tokens) / c->train_time : 0, red,
                s->skipped ? " (some steps skipped: non-finite)" : "");
    return NMT_EXIT_OK;
}

/* Sets up everything before the first step; 0, 1 (nothing to do) or -1 with the error set. */
static int setup(struct ctx *c)
{
    struct opts *o = c->o;
    if (comm_open(o->comm, &c->comm) < 0)
        return -1;
    if (o->ranks > 1 && c->comm)
        return nmt_seterr("--ranks %d starts its own ranks, but this process is one of %d started by mpirun", o->ranks,
                          comm_size(c->comm));
    if (o->ranks > 1 && comm_open_local(o->ranks, &c->comm) < 0)
        return -1;
    c->root = comm_rank(c->comm) == 0;
    if (!o->threads)
        o->threads = comm_local_threads(c->comm);
    if (!c->root) { /* rank 0 speaks and writes for all */
        o->quiet = 1;
        o->log = NULL;
    }
    if (c->root && (dir_writable(o->output) < 0 || (c->lock = out_lock(o->output)) < 0))
        return -1;
    struct stat sb;
    if (c->root && !o->resume && !o->force && stat(o->output, &sb) == 0)
        return nmt_seterr("'%s' exists: continue its training with --resume, or start afresh and replace it with "
                          "--force", o->output);
    if (comm_size(c->comm) > 1 && !o->quiet)
        fprintf(stderr, "%s: %d ranks (%s), %s reduction%s\n", nmt_progname(), comm_size(c->comm),
                comm_description(c->comm), o->reduce_fast ? "fast" : "ordered",
                !o->reduce_fast && o->overlap && comm_can_start(c->comm) ? " overlapped with the backward pass" : "");
    int stale = c->root ? out_remove_stale(o->output) : 0;
    if (stale)
        nmt_warn("removed %d temporary file%s left beside '%s' by an interrupted save", stale, stale > 1 ? "s" : "",
                 o->output);
    if (setup_model_config(c) < 0 || !(c->config = config_text(o, &c->cfg)) || setup_vocab(c) < 0 ||
        setup_training(c) < 0)
        return -1;
    if (o->max_steps && c->t.s.step >= o->max_steps) {
        nmt_error("'%s' is already at step %llu (--max-steps %llu): nothing to do", o->output,
                  (unsigned long long)c->t.s.step, (unsigned long long)o->max_steps);
        return 1;
    }
    if (o->save_init) { /* the weights as initialised, before any update */
        if (c->root && trainer_save(&c->t, &c->rec, o->output) < 0)
            return -1;
        return 1;
    }
    if (open_log(c) < 0)
        return -1;
    if (!(c->path2 = malloc(strlen(o->output) + 64)))
        return nmt_seterr("out of memory");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    c->tty = !o->quiet && isatty(2);
    c->t0 = c->last_prog = now(); /* off a terminal, the first progress line comes after --progress-every */
    c->start_step = c->t.s.step;
    c->saved_step = UINT64_MAX;
    return 0;
}

static int run(struct opts *o)
{
    struct ctx c;
    memset(&c, 0, sizeof c);
    c.o = o;
    c.tb.fd = c.vb.fd = c.lock = -1;
    const char *stop = NULL;
    int rc = setup(&c);
    int status = rc == 1 ? NMT_EXIT_OK : NMT_EXIT_DATA;
    if (rc == 0) {
        rc = train_loop(&c, &stop);
        status = rc == 0 ? finish(&c, stop) : NMT_EXIT_DATA;
    }
    if (rc < 0 && comm_size(c.comm) > 1) { /* the other ranks wait in a collective: end them all */
        nmt_error("rank %d: %s", comm_rank(c.comm), nmt_errmsg());
        out_unlock(o->output, c.lock);
        comm_abort(c.comm, NMT_EXIT_DATA);
    }
    if (rc < 0)
        nmt_error("%s", nmt_errmsg());
    if (c.log && fclose(c.log) != 0 && status == 0) {
        nmt_error("cannot write the log '%s': %s", o->log, strerror(errno));
        status = NMT_EXIT_DATA;
    }
    free(c.path2);
    free(c.config);
    trainer_free(&c.t);
    batch_file_close(&c.tb);
    batch_file_close(&c.vb);
    model_free(c.m);
    gpu_comm_close(c.gpu);
    backend_close(c.be);
    st_free(c.ck);
    vocab_free(c.voc);
    nmt_buf_free(&c.vocab_text);
    out_unlock(o->output, c.lock);
    if (comm_close(c.comm) < 0 && status == NMT_EXIT_OK) {
        nmt_error("%s", nmt_errmsg());
        status = NMT_EXIT_DATA;
    }
    return status;
}
