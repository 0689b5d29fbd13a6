/* common.h: builds broken plugin tables for the loader tests. Every function slot points at a
 * function that is never called (the loader refuses these plugins before opening them). */
#ifndef NMT_TEST_PLUGIN_COMMON_H
#define NMT_TEST_PLUGIN_COMMON_H

#include <string.h>

#include "backend.h"

static int never_called(void) { return -1; }

/* Fills every function slot of T (from score to the end) with never_called. */
static void fill_slots(struct nmt_backend *t)
{
    int (*fp)(void) = never_called;
    for (size_t off = offsetof(struct nmt_backend, score); off + sizeof fp <= sizeof *t; off += sizeof fp)
        memcpy((char *)t + off, &fp, sizeof fp);
    t->abi_major = NMT_BACKEND_ABI_MAJOR;
    t->abi_minor = NMT_BACKEND_ABI_MINOR;
    t->size = sizeof *t;
    t->description = "a broken plugin for the loader tests";
}

#endif
