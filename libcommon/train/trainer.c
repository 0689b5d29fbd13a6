/* trainer.c: optimizer steps, validation and checkpoints of training (see trainer.h). */
#include "train/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"

const struct adam_opts trainer_adam = {.beta1 = 0.9f, .beta2 = 0.98f, .eps = 1e-9f};

static double seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Whether steps reduce gradients through the host (several ranks, or several micro-batches summed
 * in order) rather than accumulating them in place. */
static int reduced(const struct trainer *t)
{
    return comm_size(t->o.comm) > 1 || (t->o.update_freq > 1 && !t->o.reduce_fast);
}

int trainer_init(struct trainer *t, struct model *m, const struct model_config *cfg, struct batch_file *train,
                 const struct trainer_opts *o, const struct train_state *s)
{
    memset(t, 0, sizeof *t);
    t->m = m;
    t->cfg = cfg;
    t->train = train;
    t->o = *o;
    t->s = *s;
    size_t np = model_num_params(m);
    if (o->ema > 0) {
        if (!(t->ema = nmt_malloc(np * sizeof(float) + 1)) || !(t->ema_tmp = nmt_malloc(np * sizeof(float) + 1)))
            return -1;
        if (model_get_params(m, t->ema) < 0)
            return -1;
    }
    if (!reduced(t))
        return 0;
    if (o->gpu)
        return o->reduce_fast ? 0 : gpu_sum_init(&t->gsum, o->gpu, model_backend(m), np);
    if (!(t->grads = nmt_malloc(np * sizeof(float) + 1)))
        return -1;
    if (t->o.reduce_fast)
        return 0;
    t->overlap = o->overlap && !o->gpu && comm_size(o->comm) > 1 && comm_can_start(o->comm);
    const size_t *ranges = NULL;
    int nb = t->overlap ? model_grad_buckets(m, &ranges) : 0;
    return comm_sum_init(&t->sum, t->o.comm, np, ranges, nb);
}

void trainer_free(struct trainer *t)
{
    batch_record_free(&t->br);
    comm_sum_free(&t->sum);
    gpu_sum_free(&t->gsum);
    free(t->grads);
    free(t->ema);
    free(t->ema_tmp);
    t->grads = t->ema = t->ema_tmp = NULL;
}

int trainer_skip_consumed(struct trainer *t)
{
    for (uint64_t i = 0; t->train->streaming && i < t->s.pos; i++) {
        int rc = batch_file_get(t->train, t->s.epoch, i, 0, 0, &t->br);
        if (rc < 0)
            return -1;
        if (rc == REC_END)
            break;
    }
    return 0;
}

/* Reads the next micro-batch of the sequence every rank follows into T->br: 1 when there is one (the
 * state advanced past it), 0 at an epoch's end (the state moved to the next epoch) or past the last
 * epoch (OUT->data_end), -1 on error. */
static int next_batch(struct trainer *t, struct trainer_step *out)
{
    struct train_state *s = &t->s;
    if (s->epoch >= t->o.epochs) {
        out->data_end = 1;
        return 0;
    }
    int rc = batch_file_get(t->train, s->epoch, s->pos, t->o.shuffle, t->o.seed, &t->br);
    if (rc < 0)
        return -1;
    if (rc == REC_END) {
        s->epoch++;
        s->pos = 0;
        return 0;
    }
    s->pos++;
    return 1;
}

/* Forward and backward on T->br, micro-batch K of the step (dropout keyed by it); L gets the loss. */
static int train_batch(struct trainer *t, uint64_t k, struct model_loss *L)
{
    uint64_t dseed = batch_file_key(t->o.seed, t->s.step + 1, k);
    if (model_step(t->m, &t->br, 1, 1, dseed, L, NULL) < 0)
        return nmt_seterr("%s: batch %llu of epoch %llu: %s", t->train->name, (unsigned long long)t->s.pos,
                          (unsigned long long)t->s.epoch + 1, nmt_errmsg());
    return 0;
}

/* Adds the losses and token counts of one round (rank r's micro-batch is the r-th of COUNT) to OUT
 * in rank order, which is micro-batch order. 0 or -1. */
static int add_round_losses(struct trainer *t, const struct model_loss *mine, int count, struct trainer_step *out)
{
    int n = comm_size(t->o.comm);
    struct model_loss *all = nmt_malloc((size_t)n * sizeof *all);
    if (!all || comm_allgather(t->o.comm, mine, all, sizeof *all) < 0) {
        free(all);
        return -1;
    }
    for (int r = 0; r < count; r++) {
        out->loss += all[r].loss;
        out->tokens += (uint64_t)all[r].tokens;
    }
    free(all);
    return 0;
}

/* model_step's bucket hook under overlap: copies bucket B's final gradient to its stage, starts
 * its all-to-all and lets the earlier ones progress. 0 or -1. */
static int on_grad_ready(void *arg, int b)
{
    struct trainer *t = arg;
    struct trainer_step *out = t->cur;
    const size_t *ranges;
    int nb = model_grad_buckets(t->m, &ranges), done = 0;
    double t0 = seconds();
    /* the last bucket is final when the backward pass ends: what completed before it, overlapped */
    if (b == nb - 1) {
        if (comm_sum_poll(&t->sum, t->o.comm, &done) < 0)
            return -1;
        out->buckets_early_done += (uint64_t)done;
    }
    if (model_get_grads_range(t->m, comm_sum_stage(&t->sum, b), ranges[2 * b], ranges[2 * b + 1]) < 0 ||
        comm_sum_post(&t->sum, t->o.comm, b) < 0 || (b < nb - 1 && comm_sum_poll(&t->sum, t->o.comm, NULL) < 0))
        return -1;
    out->buckets++;
    out->buckets_early += b < nb - 1;
    out->reduce_s += seconds() - t0;
    return 0;
}

/* Copies this rank's gradient (when MINE) to the ordered sum's stages and starts every bucket's
 * all-to-all of the round not started yet. 0 or -1. */
static int post_round(struct trainer *t, int mine, struct trainer_step *out)
{
    for (int b = 0; b < t->sum.nb; b++) {
        if (t->sum.b[b].posted)
            continue;
        if (mine && model_get_grads_range(t->m, comm_sum_stage(&t->sum, b), t->sum.b[b].off, t->sum.b[b].len) < 0)
            return -1;
        if (comm_sum_post(&t->sum, t->o.comm, b) < 0)
            return -1;
        out->buckets++;
    }
    return 0;
}

/* One round of up to N micro-batches (the step's K-th onwards): each rank trains its own; with the
 * ordered sum, the round's gradients are added to it. Sets *COUNT to the micro-batches the round
 * had; 0 or -1. */
static int round_step(struct trainer *t, uint64_t k, int *count, struct trainer_step *out)
{
    int n = comm_size(t->o.comm), me = comm_rank(t->o.comm), mine = 0;
    struct model_loss L = {0};
    *count = 0;
    while (*count < n && !out->data_end) {
        int rc = next_batch(t, out);
        if (rc < 0)
            return -1;
        if (rc == 0) {
            if (!out->data_end && k + (uint64_t)*count == 0 && t->o.valid_at_epoch_end && t->s.epoch < t->o.epochs)
                break; /* an epoch ended before this step trained anything: validate first */
            continue;
        }
        out->flops += model_step_flops(t->cfg, &t->br);
        if (*count == me) {
            int ordered = !t->o.reduce_fast && reduced(t);
            if (ordered && model_zero_grad(t->m) < 0)
                return -1;
            if (ordered && t->overlap)
                model_set_grad_ready(t->m, on_grad_ready, t);
            int trained = train_batch(t, k + (uint64_t)*count, &L);
            model_set_grad_ready(t->m, NULL, NULL);
            if (trained < 0)
                return -1;
            mine = 1;
        }
        ++*count;
    }
    if (*count == 0)
        return 0;
    int ordered = !t->o.reduce_fast && reduced(t);
    double t0 = seconds();
    /* every rank starts every bucket before the next collective (the losses' all-gather) */
    if (ordered && !t->o.gpu && post_round(t, mine, out) < 0)
        return -1;
    if (ordered && t->o.gpu && gpu_sum_add(&t->gsum, t->o.gpu, model_grad_data(t->m), *count) < 0)
        return -1;
    if (ordered) /* nothing is reduced otherwise: no time to count */
        out->reduce_s += seconds() - t0;
    if (add_round_losses(t, &L, *count, out) < 0)
        return -1;
    if (!ordered)
        return 0;
    t0 = seconds();
    if (!t->o.gpu && comm_sum_round(&t->sum, t->o.comm, *count) < 0)
        return -1;
    out->reduce_s += seconds() - t0;
    out->reduce_wait_s += seconds() - t0;
    return 0;
}

/* Brings the step's summed gradients into the model's gradient buffer. 0 or -1. */
static int finish_reduction(struct trainer *t, struct trainer_step *out)
{
    if (!reduced(t))
        return 0;
    double t0 = seconds();
    if (t->o.gpu) { /* on the device: no host copy */
        int rc = t->o.reduce_fast ? gpu_comm_allreduce_f32(t->o.gpu, model_grad_data(t->m), model_num_params(t->m))
                                  : gpu_sum_result(&t->gsum, t->o.gpu, model_grad_data(t->m));
        out->reduce_s += seconds() - t0;
        out->reduce_wait_s += seconds() - t0;
        return rc;
    }
    if (t->o.reduce_fast) {
        if (model_get_grads(t->m, t->grads) < 0 ||
            comm_allreduce_f32(t->o.comm, t->grads, model_num_params(t->m)) < 0)
            return -1;
    } else if (comm_sum_result(&t->sum, t->o.comm, t->grads) < 0) {
        return -1;
    }
    int rc = model_set_grads(t->m, t->grads);
    out->reduce_s += seconds() - t0;
    out->reduce_wait_s += seconds() - t0;
    return rc;
}

/* Moves the average of the weights towards M's weights after an update (see trainer.h). 0 or -1. */
static int ema_update(struct trainer *t)
{
    size_t n = model_num_params(t->m);
    if (model_get_params(t->m, t->ema_tmp) < 0)
        return -1;
    const float d = (float)t->o.ema, c = 1.0f - d;
    float *e = t->ema;
    const float *w = t->ema_tmp;
    for (size_t i = 0; i < n; i++) {
        float a = d * e[i]; /* statements apart: each product rounded, never fused into one operation */
        float b = c * w[i];
        e[i] = a + b;
    }
    return 0;
}

int trainer_ema_swap(struct trainer *t)
{
    if (!t->ema)
        return 0;
    if (model_get_params(t->m, t->ema_tmp) < 0 || model_set_params(t->m, t->ema) < 0)
        return -1;
    float *p = t->ema;
    t->ema = t->ema_tmp;
    t->ema_tmp = p;
    return 0;
}

int trainer_step(struct trainer *t, struct trainer_step *out)
{
    memset(out, 0, sizeof *out);
    t->cur = out;
    if (model_zero_grad(t->m) < 0)
        return -1;
    comm_sum_reset(&t->sum);
    gpu_sum_reset(&t->gsum);
    uint64_t micro_max = t->o.update_freq * (uint64_t)comm_size(t->o.comm);
    while (out->micro < micro_max && !out->data_end) {
        int count;
        if (round_step(t, out->micro, &count, out) < 0)
            return -1;
        if (count == 0)
            break;
        out->micro += (uint64_t)count;
    }
    if (out->micro == 0)
        return 0;
    if (finish_reduction(t, out) < 0)
        return -1;
    out->lr = lr_at(t->o.schedule, t->o.lr, t->cfg->d_model, (int64_t)t->s.step + 1, (int64_t)t->o.warmup,
                    (int64_t)t->o.last_step);
    int rc = model_update(t->m, &trainer_adam, (float)out->lr, (int64_t)t->s.step + 1, (int64_t)out->tokens,
                          t->o.clip, &out->grad_norm);
    if (rc < 0)
        return -1;
    out->loss = out->tokens ? out->loss / (double)out->tokens : 0;
    out->skipped = rc == 1 || !isfinite(out->loss);
    if (out->skipped) {
        t->s.skipped++;
    } else {
        t->s.step++;
        t->s.tokens += out->tokens;
        if (t->ema && ema_update(t) < 0)
            return -1;
    }
    return 0;
}

int trainer_validate(struct trainer *t, struct batch_file *valid, double *vloss, double *vnll)
{
    int n = comm_size(t->o.comm), me = comm_rank(t->o.comm);
    double loss = 0, nll = 0;
    int64_t tok = 0;
    struct model_loss *all = nmt_malloc((size_t)n * sizeof *all);
    if (!all)
        return -1;
    int rc = 0, end = 0;
    for (uint64_t i = 0; !end && rc == 0; i += (uint64_t)n) {
        struct model_loss L = {0};
        int count = 0;
        for (; count < n; count++) {
            int got = batch_file_get(valid, 0, i + (uint64_t)count, 0, 0, &t->br);
            if (got < 0) {
                rc = -1;
                break;
            }
            if (got == REC_END) {
                end = 1;
                break;
            }
            if (count == me && model_step(t->m, &t->br, 0, 0, 0, &L, NULL) < 0) {
                rc = nmt_seterr("%s: batch %llu: %s", valid->name, (unsigned long long)(i + (uint64_t)count),
                                nmt_errmsg());
                break;
            }
        }
        if (rc == 0 && comm_allgather(t->o.comm, &L, all, sizeof L) < 0)
            rc = -1;
        for (int r = 0; rc == 0 && r < count; r++)
            loss += all[r].loss, nll += all[r].nll, tok += all[r].tokens;
    }
    free(all);
    *vloss = tok ? loss / (double)tok : NAN;
    *vnll = tok ? nll / (double)tok : NAN;
    return rc;
}

int trainer_save(struct trainer *t, const struct train_record *r, const char *path)
{
    if (checkpoint_save(t->m, &t->s, r, t->ema, path) < 0)
        return -1;
    if (!t->ema)
        return 0;
    size_t n = strlen(path) + 8;
    char *ema_path = nmt_malloc(n);
    if (!ema_path)
        return -1;
    snprintf(ema_path, n, "%s.ema", path);
    int rc = trainer_ema_swap(t);
    if (rc == 0) {
        rc = checkpoint_save_weights(t->m, &t->s, r, 1, ema_path);
        if (trainer_ema_swap(t) < 0)
            rc = -1;
    }
    free(ema_path);
    return rc;
}

/* Makes OUTPUT+SUFFIX the hard link OUTPUT.step-N+SUFFIX of step STEP and removes that of step OLD
 * (0: none); PATH has room for the names. Where no link can be made, the checkpoint (no SUFFIX) is
 * written again there (trainer_save: with OUTPUT.step-N.ema too). 0, or -1 with the error set. */
static int keep_step(struct trainer *t, const struct train_record *r, const char *output, const char *suffix,
                     uint64_t step, uint64_t old, char *path, size_t n)
{
    char *src = path + n / 2;
    snprintf(src, n / 2, "%s%s", output, suffix);
    snprintf(path, n / 2, "%s.step-%llu%s", output, (unsigned long long)step, suffix);
    unlink(path);
    if (link(src, path) < 0 && !*suffix && trainer_save(t, r, path) < 0)
        return -1;
    if (old) {
        snprintf(path, n / 2, "%s.step-%llu%s", output, (unsigned long long)old, suffix);
        unlink(path);
    }
    return 0;
}

int trainer_save_periodic(struct trainer *t, const struct train_record *r, const char *output, uint64_t keep,
                          uint64_t save_every)
{
    if (trainer_save(t, r, output) < 0)
        return -1;
    if (!keep)
        return 0;
    size_t n = 2 * (strlen(output) + 64);
    char *path = nmt_malloc(n);
    if (!path)
        return -1;
    uint64_t old = t->s.step > keep * save_every ? t->s.step - keep * save_every : 0;
    /* FILE.ema first: where links fail, that of the checkpoint writes both */
    int rc = t->ema ? keep_step(t, r, output, ".ema", t->s.step, old, path, n) : 0;
    if (rc == 0)
        rc = keep_step(t, r, output, "", t->s.step, old, path, n);
    free(path);
    return rc;
}
