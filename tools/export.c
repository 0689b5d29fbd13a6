/* nmt-export: an nmt checkpoint as another engine's model (nn/ct2.h: a CTranslate2 model directory;
 * nn/marian.h: a Marian .npz archive and its vocabulary). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/opt.h"
#include "io/safetensors.h"
#include "nn/checkpoint.h"
#include "nn/ct2.h"
#include "nn/marian.h"
#include "text/vocab.h"

struct args {
    const char *model, *to, *out;
    int quantize; /* enum ct2_quant: the index in QUANTIZATIONS */
};

static const char *const QUANTIZATIONS[] = {[CT2_FLOAT32] = "float32", [CT2_INT8] = "int8", NULL};
#define OFF(field) offsetof(struct args, field)
static const struct opt_spec OPTIONS[] = {
    {OPTION(OT_STR, "model", 'm', "FILE", OFF(model), "checkpoint to export (int8 checkpoints are read as float32)")},
    {OPTION(OT_STR, "to", 0, "FORMAT", OFF(to), "target format: ctranslate2 or marian")},
    {OPTION(OT_STR, "output", 'o', "PATH", OFF(out),
            "ctranslate2: the directory to create (written beside it, then renamed;\n"
            "it must not exist, or be empty); marian: the .npz file (its vocabulary\n"
            "is written beside it, NAME.vocab.yml)")},
    {OPTION(OT_CHOICE, "quantize", 0, "TYPE", OFF(quantize),
            "weights of the embedding and linear layers: float32 (the default) or\n"
            "int8 (a float32 scale a row, as CTranslate2's converter rounds them)"),
     .choices = QUANTIZATIONS, .def.i = CT2_FLOAT32},
    OPT_HELP_VERSION_END};

static const char USAGE_HEAD[] =
    "Usage: nmt-export -m CHECKPOINT --to ctranslate2 -o DIR\n"
    "       nmt-export -m CHECKPOINT --to marian -o FILE.npz\n"
    "Write the model of CHECKPOINT in another engine's format. With --to ctranslate2, DIR becomes a\n"
    "CTranslate2 model directory (model.bin, config.json, shared_vocabulary.json) that translates as\n"
    "nmt-decode does, given the pieces nmt-tokenize prints with --text=pieces and the model's vocabulary\n"
    "(man nmt-export has the commands). With --to marian, PATH becomes a Marian .npz model and\n"
    "NAME.vocab.yml beside it its vocabulary (</s> 0, <unk> 1), for marian-decoder on the same pieces.\n"
    "\n";
static const char USAGE_TAIL[] =
    "\n"
    "A model option the target format cannot express is refused by name.\n"
    "Exit status: 0 success, 1 unreadable checkpoint, inexpressible model or write error, 2 usage error.\n";

/* Exports checkpoint MODEL to OUT: with MARIAN a Marian archive and its vocabulary beside it, else a
 * CTranslate2 directory with quantization Q; 0, or -1 with the error set. */
static int export_model(const char *model, const char *out, int marian, enum ct2_quant q)
{
    struct st_file *f = NULL;
    struct vocab *v = NULL;
    struct model_config c;
    if (checkpoint_open_model(model, &f, &c, &v) < 0)
        return -1;
    if (checkpoint_dequantize(f, model) < 0) { /* the writers read float32 */
        vocab_free(v);
        st_free(f);
        return -1;
    }
    int rc = -1;
    if (marian) {
        char *vpath = marian_vocab_path(out);
        rc = vpath ? marian_export(f, &c, v, out, vpath) : -1;
        free(vpath);
    } else {
        rc = ct2_export(f, &c, v, out, q);
    }
    vocab_free(v);
    st_free(f);
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
    const char *model = a.model, *to = a.to, *out = a.out;
    enum ct2_quant q = (enum ct2_quant)a.quantize;
    if (optind < argc)
        return nmt_usage_error("unexpected argument '%s'", argv[optind]);
    if (!model)
        return nmt_usage_error("missing -m CHECKPOINT");
    if (!to)
        return nmt_usage_error("missing --to FORMAT (ctranslate2, marian)");
    int marian = !strcmp(to, "marian");
    if (!marian && strcmp(to, "ctranslate2") != 0)
        return nmt_usage_error("unknown --to '%s' (ctranslate2, marian)", to);
    if (!out)
        return nmt_usage_error(marian ? "missing -o FILE.npz" : "missing -o DIR");
    if (marian && q != CT2_FLOAT32)
        return nmt_usage_error("--quantize is for --to ctranslate2");
    if (export_model(model, out, marian, q) < 0) {
        nmt_error("%s", nmt_errmsg());
        return NMT_EXIT_DATA;
    }
    return NMT_EXIT_OK;
}
