/* fuzz_marian: libFuzzer target for the options of Marian models (nn/marian.h, the special:model.yml
 * of an archive). Any input must give a configuration or an error, never a crash, hang or unbounded
 * allocation; a configuration it gives has Marian's arithmetic. */
#include <stdint.h>
#include <stdlib.h>

#include "nn/marian.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct model_config c;
    int vocab, bias;
    if (marian_read_options((const char *)data, size, &c, &vocab, &bias) < 0)
        return 0;
    c.vocab = vocab + 2;
    if (c.positions != MODEL_POS_MARIAN || !c.start_zero || vocab < 0 || (bias != 0 && bias != 1))
        abort();
    model_config_check(&c);
    return 0;
}
