/* trainer.c: optimizer steps, validation and checkpoints of training (see trainer.h). */
#include "nn/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"

void trainer_init(struct trainer *t, struct model *m, const struct model_config *cfg, struct batch_file *train,
                  const struct trainer_opts *o, const struct train_state *s)
{
    memset(t, 0, sizeof *t);
    t->m = m;
    t->cfg = cfg;
    t->train = train;
    t->o = *o;
    t->s = *s;
}

void trainer_free(struct trainer *t) { batch_record_free(&t->br); }

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

/* Trains on the next micro-batch (number MICRO of this step) into OUT; 1 when one was trained, 0 at
 * an epoch's end (the state moved to the next epoch) or past the last epoch (OUT->data_end), -1 on
 * error. */
static int micro_batch(struct trainer *t, uint64_t micro, struct trainer_step *out)
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
    struct model_loss L;
    uint64_t dseed = batch_file_key(t->o.seed, s->step + 1, micro);
    if (model_step(t->m, &t->br, 1, 1, dseed, &L, NULL) < 0)
        return nmt_seterr("%s: batch %llu of epoch %llu: %s", t->train->name, (unsigned long long)s->pos,
                          (unsigned long long)s->epoch + 1, nmt_errmsg());
    out->loss += L.loss;
    out->tokens += (uint64_t)L.tokens;
    out->flops += model_step_flops(t->cfg, &t->br);
    return 1;
}

int trainer_step(struct trainer *t, struct trainer_step *out)
{
    memset(out, 0, sizeof *out);
    if (model_zero_grad(t->m) < 0)
        return -1;
    while (out->micro < t->o.update_freq && !out->data_end) {
        int rc = micro_batch(t, out->micro, out);
        if (rc < 0)
            return -1;
        if (rc == 1)
            out->micro++;
        else if (!out->data_end && out->micro == 0 && t->o.valid_at_epoch_end && t->s.epoch < t->o.epochs)
            break; /* an epoch ended before this step trained anything: validate first */
    }
    if (out->micro == 0)
        return 0;
    out->lr = model_lr(t->o.lr, t->cfg->d_model, (int64_t)t->s.step + 1, (int64_t)t->o.warmup);
    int rc = model_update(t->m, (float)out->lr, (int64_t)t->s.step + 1, (int64_t)out->tokens, t->o.clip,
                          &out->grad_norm);
    if (rc < 0)
        return -1;
    out->loss = out->tokens ? out->loss / (double)out->tokens : 0;
    out->skipped = rc == 1 || !isfinite(out->loss);
    if (out->skipped) {
        t->s.skipped++;
    } else {
        t->s.step++;
        t->s.tokens += out->tokens;
    }
    return 0;
}

int trainer_validate(struct trainer *t, struct batch_file *valid, double *vloss, double *vnll)
{
    double loss = 0, nll = 0;
    int64_t tok = 0;
    for (uint64_t i = 0;; i++) {
        int rc = batch_file_get(valid, 0, i, 0, 0, &t->br);
        if (rc == REC_END)
            break;
        if (rc < 0)
            return -1;
        struct model_loss L;
        if (model_step(t->m, &t->br, 0, 0, 0, &L, NULL) < 0)
            return nmt_seterr("%s: batch %llu: %s", valid->name, (unsigned long long)i, nmt_errmsg());
        loss += L.loss, nll += L.nll, tok += L.tokens;
    }
    *vloss = tok ? loss / (double)tok : NAN;
    *vnll = tok ? nll / (double)tok : NAN;
    return 0;
}

int trainer_save(struct trainer *t, const struct train_record *r, const char *path)
{
    return checkpoint_save(t->m, &t->s, r, path);
}

int trainer_save_periodic(struct trainer *t, const struct train_record *r, const char *output, uint64_t keep,
                          uint64_t save_every)
{
    if (trainer_save(t, r, output) < 0)
        return -1;
    if (!keep)
        return 0;
    size_t n = strlen(output) + 64;
    char *path = nmt_malloc(n);
    if (!path)
        return -1;
    int rc = 0;
    snprintf(path, n, "%s.step-%llu", output, (unsigned long long)t->s.step);
    unlink(path);
    if (link(output, path) < 0 && trainer_save(t, r, path) < 0)
        rc = -1;
    if (rc == 0 && t->s.step > keep * save_every) {
        snprintf(path, n, "%s.step-%llu", output, (unsigned long long)(t->s.step - keep * save_every));
        unlink(path);
    }
    free(path);
    return rc;
}
