/* trainer.h: the training loop's steps, for nmt-train and any other driver: an optimizer step over
 * --update-freq micro-batches (gradients accumulated, dropout keyed by seed, step and micro-batch),
 * validation, and checkpoints (the periodic one kept under FILE.step-N). The driver decides when to
 * stop, validate and save, and what to print; the library prints nothing.
 *
 * Data-parallel: with N ranks (run/ranks.h) a step takes N x update_freq micro-batches of the one
 * batch sequence every rank reads; micro-batch k goes to rank k mod N, in rounds of N. By default
 * each micro-batch's gradient is computed apart and the rounds are summed in micro-batch order
 * (comm_sum), so N ranks with --update-freq F train bit for bit the model of one process with
 * --update-freq N x F (and one process with F > 1 sums its micro-batches the same way). With
 * reduce_fast, each rank accumulates its micro-batches and one all-reduce of the library's own
 * order ends the step. Token counts are summed exactly; losses in micro-batch order.
 *
 * Overlap (opts.overlap, with several ranks, the ordered sum and a module that starts collectives):
 * the ordered sum is cut into the model's gradient buckets (model_grad_buckets: a layer each), and
 * a bucket's all-to-all starts as soon as the backward pass has finished it, polled (MPI_Test) as
 * each later bucket finishes, so the communication of the last layers runs while the first ones
 * are computed. The sums are those of the unbucketed reduction, bit for bit.
 *
 * GPU ranks (opts.gpu): the same rounds, with the gradient buffer reduced on the device
 * (run/gpu_comm.h) instead of through host copies.
 *
 * Moving average of the weights (opts.ema = decay d): kept in float32 in host memory, starting as
 * the weights the trainer is given; after each update that is not skipped, every element becomes
 * d * avg + (1 - d) * w, the two products and their sum each rounded to float32, with 1 - d
 * computed in float32 from d rounded to float32. Checkpoints hold it, and beside each one PATH,
 * PATH.ema holds it as the weights of a model to decode. */
#ifndef NMT_TRAINER_H
#define NMT_TRAINER_H

#include <stdint.h>

#include "data/batch_file.h"
#include "nn/checkpoint.h"
#include "nn/model.h"
#include "run/gpu_comm.h"
#include "run/ranks.h"
#include "train/schedule.h"

/* The optimizer's constants: Adam with beta 0.9/0.98 and eps 1e-9 (the paper's). */
extern const struct adam_opts trainer_adam;

struct trainer_opts {
    uint64_t epochs;           /* passes over the training batches (UINT64_MAX: no limit) */
    uint64_t update_freq;      /* micro-batches per optimizer step and rank */
    uint64_t seed, warmup;
    double lr, clip;           /* learning-rate scale; gradient-norm clip (0: off) */
    enum lr_schedule schedule; /* of the learning rate (nn/model.h) */
    uint64_t last_step;        /* where the linear schedule reaches 0 */
    double ema;                /* decay of the moving average of the weights (0: none; see below) */
    int shuffle;               /* a seeded batch order each epoch */
    int valid_at_epoch_end;    /* end a step early at an epoch's end, so that validation can run */
    struct comm *comm;         /* the ranks (NULL: one process) */
    int reduce_fast;           /* one all-reduce per step in the library's order (not reproducible) */
    int overlap;               /* start each bucket's reduction during the backward pass (see above) */
    struct gpu_comm *gpu;      /* not NULL: gradients reduced on the device through it (NCCL): the
                                * ordered sum as gpu_sum, or with reduce_fast NCCL's all-reduce;
                                * not overlapped */
};

/* What one call of trainer_step did. */
struct trainer_step {
    uint64_t micro;            /* micro-batches trained on (0: none, see data_end and epoch_end) */
    int skipped;               /* the update was skipped: non-finite loss or gradient */
    int data_end;              /* every epoch has been served */
    double loss;               /* mean loss per target token */
    uint64_t tokens;           /* target tokens */
    double lr, grad_norm, flops;
    /* Measurement hooks of the reduction (this rank's view): */
    double reduce_s;           /* seconds in the gradient reduction (copies, communication, sums), in
                                * all; with overlap, including the bucket copies and polls made
                                * inside the backward pass */
    double reduce_wait_s;      /* seconds of reduce_s spent after the backward passes, waiting for
                                * the communication to end and adding the contributions */
    uint64_t buckets;          /* gradient buckets this rank sent (all-to-alls started) */
    uint64_t buckets_early;    /* of them, started while its backward pass was still running */
    uint64_t buckets_early_done; /* of those, completed before that backward pass ended */
};

struct trainer {
    struct model *m;
    const struct model_config *cfg;
    struct batch_file *train;
    struct trainer_opts o;
    struct train_state s;
    struct batch_record br;
    struct comm_sum sum;       /* the ordered gradient sum (when used) */
    struct gpu_sum gsum;       /* the same on the device (with opts.gpu)  */
    float *grads;              /* host copy of the gradients (when reduced) */
    int overlap;               /* the ordered sum is bucketed and overlapped (opts.overlap, when possible) */
    struct trainer_step *cur;  /* the step in progress (for the bucket hook's counts) */
    float *ema;                /* (P) host: the moving average of the weights (opts.ema), else NULL */
    float *ema_tmp;            /* (P) host: room for the weights */
};

/* Makes T train M (configuration CFG) on TRAIN from state S, with the moving average of the weights
 * (opts.ema) starting as M's weights; 0, or -1 with the error set (out of memory). */
int trainer_init(struct trainer *t, struct model *m, const struct model_config *cfg, struct batch_file *train,
                  const struct trainer_opts *o, const struct train_state *s);
/* Frees T's scratch (not the model or the batches). */
void trainer_free(struct trainer *t);
/* Skips the batches a previous run consumed of the current epoch (a streamed input only); 0 or -1. */
int trainer_skip_consumed(struct trainer *t);
/* One optimizer step: zeroes the gradients, trains on up to update_freq micro-batches (stopping
 * early at an epoch's end when valid_at_epoch_end and nothing was trained yet), updates.
 * Returns 0 with OUT filled (the state advanced unless OUT->skipped), or -1 with the error set. */
int trainer_step(struct trainer *t, struct trainer_step *out);
/* Mean loss and nll per target token of M over VALID (in file order; with N ranks, batch i on rank
 * i mod N, summed in file order); 0, or -1 with the error set. */
int trainer_validate(struct trainer *t, struct batch_file *valid, double *loss, double *nll);
/* Exchanges M's weights and the moving average (opts.ema; T->ema then holds the weights), so that
 * validation sees the average; a second call restores both, bit for bit. 0, or -1 with the error set. */
int trainer_ema_swap(struct trainer *t);
/* Writes the checkpoint of T's model, state and moving average to PATH with record R and, with
 * opts.ema, the average as the weights of PATH.ema (checkpoint_save_weights); 0, or -1 with the
 * error set. */
int trainer_save(struct trainer *t, const struct train_record *r, const char *path);
/* Writes the checkpoint to OUTPUT (trainer_save) and, with KEEP > 0, keeps it as OUTPUT.step-N too
 * (a hard link; OUTPUT.ema as OUTPUT.step-N.ema), removing the one KEEP saves older (SAVE_EVERY steps
 * apart); 0, or -1 with the error set. */
int trainer_save_periodic(struct trainer *t, const struct train_record *r, const char *output, uint64_t keep,
                          uint64_t save_every);

#endif
