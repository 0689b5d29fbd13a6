/* nmt-export: an nmt checkpoint as another engine's model (nn/ct2.h: a CTranslate2 model directory). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/opt.h"
#include "io/safetensors.h"
#include "nn/checkpoint.h"
#include "nn/ct2.h"
#include "text/vocab.h"

struct args {
    const char *model, *to, *out;
    int quantize; /* enum ct2_quant: the index in QUANTIZATIONS */
};

static const char *const QUANTIZATIONS[] = {[CT2_FLOAT32] = "float32", [CT2_INT8] = "int8", NULL};
#define OFF(field) offsetof(struct args, field)
static const struct opt_spec OPTIONS[] = {
    {OPTION(OT_STR, "model", 'm', "FILE", OFF(model), "checkpoint to export (int8 checkpoints are read as float32)")},
    {OPTION(OT_STR, "to", 0, "FORMAT", OFF(to), "target format: ctranslate2")},
    {OPTION(OT_STR, "output", 'o', "DIR", OFF(out),
            "directory to create (written beside it, then renamed; it must not\n"
            "exist, or be empty)")},
    {OPTION(OT_CHOICE, "quantize", 0, "TYPE", OFF(quantize),
            "weights of the embedding and linear layers: float32 (the default) or\n"
            "int8 (a float32 scale a row, as CTranslate2's converter rounds them)"),
     .choices = QUANTIZATIONS, .def.i = CT2_FLOAT32},
    OPT_HELP_VERSION_END};

static const char USAGE_HEAD[] =
    "Usage: nmt-export -m CHECKPOINT --to ctranslate2 -o DIR\n"
    "Write the model of CHECKPOINT in another engine's format. With --to ctranslate2, DIR becomes a\n"
    "CTranslate2 model directory (model.bin, config.json, shared_vocabulary.json) that translates as\n"
    "nmt-decode does, given the pieces nmt-tokenize prints with --text=pieces and the model's vocabulary\n"
    "(man nmt-export has the commands).\n"
    "\n";
static const char USAGE_TAIL[] =
    "\n"
    "A model option the target format cannot express is refused by name.\n"
    "Exit status: 0 success, 1 unreadable checkpoint, inexpressible model or write error, 2 usage error.\n";

/* Exports checkpoint MODEL to directory OUT with quantization Q; 0, or -1 with the error set. */
static int export_ct2(const char *model, const char *out, enum ct2_quant q)
{
    struct st_file *f = NULL;
    struct vocab *v = NULL;
    struct model_config c;
    if (checkpoint_open_model(model, &f, &c, &v) < 0)
        return -1;
    int rc = ct2_export(f, &c, v, out, q);
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
        return nmt_usage_error("missing --to FORMAT (ctranslate2)");
    if (strcmp(to, "ctranslate2") != 0)
        return nmt_usage_error("unknown --to '%s' (ctranslate2)", to);
    if (!out)
        return nmt_usage_error("missing -o DIR");
    if (export_ct2(model, out, q) < 0) {
        nmt_error("%s", nmt_errmsg());
        return NMT_EXIT_DATA;
    }
    return NMT_EXIT_OK;
}
