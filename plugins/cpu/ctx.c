/* ctx.c: the services every kernel file of the cpu plugin uses on a context: its error text and
 * per-thread scratch. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu.h"

static _Thread_local char open_err[512];

int cpu_err(struct nmt_bctx *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx ? ctx->err : open_err, ctx ? sizeof ctx->err : sizeof open_err, fmt, ap);
    va_end(ap);
    return -1;
}

int cpu_scratch(struct nmt_bctx *ctx, size_t per)
{
    per = (per + 63) & ~(size_t)63;
    if (per <= ctx->scratch_per)
        return 0;
    void *s = aligned_alloc(64, per * (size_t)ctx->threads);
    if (!s)
        return cpu_err(ctx, "out of memory (%zu bytes of scratch)", per * (size_t)ctx->threads);
    free(ctx->scratch);
    ctx->scratch = s;
    ctx->scratch_per = per;
    return 0;
}

const char *cpu_err_text(const struct nmt_bctx *ctx) { return ctx ? ctx->err : open_err; }
