/* nmt-export: an nmt checkpoint as another engine's model (nn/ct2.h: a CTranslate2 model directory). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "io/safetensors.h"
#include "nn/checkpoint.h"
#include "nn/ct2.h"
#include "text/vocab.h"

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: nmt-export -m CHECKPOINT --to ctranslate2 -o DIR\n"
            "Write the model of CHECKPOINT in another engine's format. With --to ctranslate2, DIR becomes a\n"
            "CTranslate2 model directory (model.bin, config.json, shared_vocabulary.json) that translates as\n"
            "nmt-decode does, given the pieces nmt-tokenize prints with --text=pieces and the model's vocabulary\n"
            "(man nmt-export has the commands).\n"
            "\n"
            "  -m, --model FILE      checkpoint to export (int8 checkpoints are read as float32)\n"
            "      --to FORMAT       target format: ctranslate2\n"
            "  -o, --output DIR      directory to create (written beside it, then renamed; it must not\n"
            "                        exist, or be empty)\n"
            "      --quantize TYPE   weights of the embedding and linear layers: float32 (the default) or\n"
            "                        int8 (a float32 scale a row, as CTranslate2's converter rounds them)\n"
            "  -h, --help            show this help and exit\n"
            "      --version         show version information and exit\n"
            "\n"
            "A model option the target format cannot express is refused by name.\n"
            "Exit status: 0 success, 1 unreadable checkpoint, inexpressible model or write error, 2 usage error.\n");
}

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
    enum { OPT_TO = 256, OPT_QUANTIZE };
    static const struct option longopts[] = {{"model", required_argument, NULL, 'm'},
                                             {"to", required_argument, NULL, OPT_TO},
                                             {"output", required_argument, NULL, 'o'},
                                             {"quantize", required_argument, NULL, OPT_QUANTIZE},
                                             {"help", no_argument, NULL, 'h'},
                                             {"version", no_argument, NULL, 'V'},
                                             {NULL, 0, NULL, 0}};
    const char *model = NULL, *to = NULL, *out = NULL;
    enum ct2_quant q = CT2_FLOAT32;
    int c;
    while ((c = getopt_long(argc, argv, "m:o:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'o': out = optarg; break;
        case OPT_TO: to = optarg; break;
        case OPT_QUANTIZE:
            if (!strcmp(optarg, "float32"))
                q = CT2_FLOAT32;
            else if (!strcmp(optarg, "int8"))
                q = CT2_INT8;
            else
                return nmt_usage_error("invalid --quantize '%s' (float32 or int8)", optarg);
            break;
        case 'h': usage(stdout); return nmt_close_stdout() == 0 ? 0 : 1;
        case 'V': nmt_print_version(); return nmt_close_stdout() == 0 ? 0 : 1;
        default: return nmt_usage_hint();
        }
    }
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
