/* nmt-import: another engine's model as an nmt checkpoint (nn/marian.h: a Marian .npz archive and
 * its vocabulary). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/opt.h"
#include "nn/checkpoint.h"
#include "nn/marian.h"
#include "text/vocab.h"

struct args {
    const char *from, *vocab, *out;
};

#define OFF(field) offsetof(struct args, field)
static const struct opt_spec OPTIONS[] = {
    {OPTION(OT_STR, "from", 0, "FORMAT", OFF(from), "source format: marian")},
    {OPTION(OT_STR, "vocab", 'v', "FILE", OFF(vocab),
            "the model's vocabulary: Marian's .yml (or .yaml), a SentencePiece\n"
            "model (.spm), or plain text, a piece a line")},
    {OPTION(OT_STR, "output", 'o', "CKPT", OFF(out), "checkpoint to write (written beside it, then renamed)")},
    OPT_HELP_VERSION_END};

static const char USAGE_HEAD[] =
    "Usage: nmt-import --from marian MODEL.npz --vocab VOCAB -o CHECKPOINT\n"
    "Write another engine's model as an nmt checkpoint that nmt-decode translates with and nmt-train\n"
    "--init-from starts from. With --from marian, MODEL.npz is a Marian transformer (post- or pre-norm,\n"
    "tied or separate embeddings, ReLU or Swish) and VOCAB its vocabulary (one for both sides); with a\n"
    ".yml or text vocabulary each space-separated word of the input is one piece, as in Marian.\n"
    "\n";
static const char USAGE_TAIL[] =
    "\n"
    "A model option nmt cannot express is refused by name.\n"
    "Exit status: 0 success, 1 unreadable or inexpressible model or write error, 2 usage error.\n";

/* Imports the Marian archive NPZ with vocabulary VOCAB as checkpoint OUT; 0, or -1 with the error set. */
static int import_marian(const char *npz, const char *vocab, const char *out)
{
    struct model_config c;
    struct vocab *v = NULL;
    float *params = NULL;
    if (marian_import(npz, vocab, &c, &params, &v) < 0)
        return -1;
    int rc = checkpoint_save_host(&c, params, v, "nmt-import " NMT_VERSION, out);
    free(params);
    vocab_free(v);
    return rc;
}

int main(int argc, char **argv)
{
    nmt_start(argv);
    struct args a = {0};
    opt_defaults(OPTIONS, &a);
    int parsed = opt_parse_tool(OPTIONS, argc, argv, &a, USAGE_HEAD, USAGE_TAIL);
    if (parsed != OPT_PROCEED)
        return parsed;
    if (!a.from)
        return nmt_usage_error("missing --from FORMAT (marian)");
    if (strcmp(a.from, "marian") != 0)
        return nmt_usage_error("unknown --from '%s' (marian)", a.from);
    if (optind >= argc)
        return nmt_usage_error("missing the model file (MODEL.npz)");
    if (optind + 1 < argc)
        return nmt_usage_error("unexpected argument '%s'", argv[optind + 1]);
    if (!a.vocab)
        return nmt_usage_error("missing --vocab FILE");
    if (!a.out)
        return nmt_usage_error("missing -o CHECKPOINT");
    if (import_marian(argv[optind], a.vocab, a.out) < 0) {
        nmt_error("%s", nmt_errmsg());
        return NMT_EXIT_DATA;
    }
    return NMT_EXIT_OK;
}
