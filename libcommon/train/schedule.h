/* schedule.h: the learning-rate schedules of training (nmt-train --schedule, --lr, --warmup). */
#ifndef NMT_SCHEDULE_H
#define NMT_SCHEDULE_H

#include <stdint.h>

/* Learning rate of the paper's schedule at STEP >= 1: scale * D^-0.5 * min(step^-0.5, step * warmup^-1.5). */
double lr_paper(double scale, int d_model, int64_t step, int64_t warmup);

/* The learning-rate schedules: each warms up linearly over W = max(warmup, 1) steps to the peak
 * scale * D^-0.5 * W^-0.5, then decays as step^-0.5 (the paper's, lr_paper), stays there, or falls
 * linearly to 0 at a given last step. */
enum lr_schedule { LR_SCHEDULE_INVERSE_SQRT, LR_SCHEDULE_CONSTANT, LR_SCHEDULE_LINEAR };
/* Parses NAME ("inverse-sqrt", "constant" or "linear") into *OUT; 0, or -1 for another name. */
int lr_schedule_parse(const char *name, enum lr_schedule *out);
/* Returns the name of schedule S (as lr_schedule_parse reads it). */
const char *lr_schedule_name(enum lr_schedule s);
/* Learning rate of schedule S at STEP >= 1 (see above); LAST, the step at which the linear decay
 * reaches 0 (> max(warmup, 1)), is read by the linear schedule only. */
double lr_at(enum lr_schedule s, double scale, int d_model, int64_t step, int64_t warmup,
                         int64_t last);

#endif
