/* fuzz_serve_request: libFuzzer target for nmt-serve's request bodies (serve_request_parse, JSON to
 * a translation request). Any input must either give a request within the limits (valid UTF-8
 * sentences of their stated lengths, 1 <= nbest <= beam <= max_beam) or fail with 400 or 413 and
 * an error text that serve_error_json turns into a JSON answer. The same bytes, read as a server's
 * answer by the client (serve_answer_read for 2 sentences, serve_error_read), must give lines ending
 * in a newline or a failure that says why. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/utf8.h"
#include "base/util.h"
#include "serve/request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const struct serve_limits lim = {.max_sentences = 8, .max_line_bytes = 64, .max_beam = 4, .beam = 1, .nbest = 1};
    struct serve_request r;
    int rc = serve_request_parse((const char *)data, size, &lim, &r);
    struct nmt_buf out = {0};
    if (rc != 0) {
        if ((rc != SERVE_BAD_REQUEST && rc != SERVE_TOO_LARGE) || !*nmt_errmsg())
            abort(); /* a failure must say why, with a client error */
        if (serve_error_json(nmt_errmsg(), &out) < 0 || out.len < 12 || memcmp(out.data, "{\"error\":\"", 10))
            abort();
    } else {
        if (r.n > lim.max_sentences || r.beam < 1 || r.beam > lim.max_beam || r.nbest < 1 || r.nbest > r.beam)
            abort();
        size_t bad;
        for (size_t i = 0; i < r.n; i++)
            if (r.len[i] > lim.max_line_bytes || r.text[i][r.len[i]] != 0 || utf8_check(r.text[i], r.len[i], &bad) < 0)
                abort();
    }
    out.len = 0;
    nmt_seterr("%s", "");
    rc = serve_answer_read((const char *)data, size, 2, 1, &out);
    if (rc < 0 ? !*nmt_errmsg() : out.len < 2 || out.data[out.len - 1] != '\n')
        abort();
    char msg[64];
    if (serve_error_read((const char *)data, size, msg, sizeof msg) < 0 && msg[0])
        abort();
    nmt_buf_free(&out);
    serve_request_free(&r);
    return 0;
}
