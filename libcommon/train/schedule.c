/* schedule.c: the learning-rate schedules of training. */
#include "train/schedule.h"

#include <math.h>
#include <string.h>

double lr_paper(double scale, int d_model, int64_t step, int64_t warmup)
{
    double s = step < 1 ? 1 : (double)step;
    double a = 1 / sqrt(s);
    if (warmup > 0) {
        double b = s * pow((double)warmup, -1.5);
        if (b < a)
            a = b;
    }
    return scale / sqrt((double)d_model) * a;
}

static const char *const schedule_names[] = {"inverse-sqrt", "constant", "linear"};

int lr_schedule_parse(const char *name, enum lr_schedule *out)
{
    for (int i = 0; i < (int)(sizeof schedule_names / sizeof schedule_names[0]); i++)
        if (!strcmp(name, schedule_names[i])) {
            *out = (enum lr_schedule)i;
            return 0;
        }
    return -1;
}

const char *lr_schedule_name(enum lr_schedule s)
{
    return schedule_names[s];
}

double lr_at(enum lr_schedule s, double scale, int d_model, int64_t step, int64_t warmup,
                         int64_t last)
{
    if (s == LR_SCHEDULE_INVERSE_SQRT)
        return lr_paper(scale, d_model, step, warmup);
    double t = step < 1 ? 1 : (double)step, w = warmup > 1 ? (double)warmup : 1;
    double f = t < w ? t / w : 1;
    if (s == LR_SCHEDULE_LINEAR) {
        double g = last > w ? ((double)last - t) / ((double)last - w) : 0;
        f = g < f ? g : f;
        f = f > 0 ? f : 0;
    }
    return scale / sqrt((double)d_model) / sqrt(w) * f;
}
