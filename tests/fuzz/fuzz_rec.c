/* fuzz_rec: libFuzzer target for the record stream reader and the typed record decoders.
 * Any input must give REC_END or a negative status, never a crash, hang or unbounded allocation. */
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "io/stream.h"
#include "io/records.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz", 0);
    if (fd < 0)
        return 0;
    if (size && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    lseek(fd, 0, SEEK_SET);
    int st;
    struct rec_reader *r = rec_reader_open(fd, "fuzz", NULL, &st);
    if (r) {
        const unsigned char *d;
        size_t len;
        struct ids_record ids = {0};
        struct tok_record tok = {0};
        struct batch_record batch = {0};
        struct hyp_record hyp = {0};
        while ((st = rec_read(r, &d, &len)) == REC_OK) {
            ids_record_decode(&ids, d, len);
            tok_record_decode(&tok, d, len);
            batch_record_decode(&batch, d, len);
            hyp_record_decode(&hyp, d, len);
        }
        if (st > 0)
            abort();
        ids_record_free(&ids);
        tok_record_free(&tok);
        batch_record_free(&batch);
        hyp_record_free(&hyp);
        rec_reader_free(r);
    }
    close(fd);
    return 0;
}
