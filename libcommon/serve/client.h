/* client.h: the client of nmt-serve's POST /translate (nmt-serve --client): sends sentences in one
 * request, waits and sends again while the server answers 503 (its queue full), and turns the answer
 * into nmt-decode's output lines. HTTP is libcurl's; the JSON is serve/request.h's. */
#ifndef NMT_SERVE_CLIENT_H
#define NMT_SERVE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

struct serve_client_opts {
    const char *url;           /* the server: http://HOST:PORT, /translate added unless it ends so */
    int beam, nbest, scores;   /* sent with each request; 0: the server's defaults */
    double retry_for;          /* seconds a request answered 503 is sent again for, at most */
    long timeout;              /* seconds a request may take at most (connecting: 10 at most) */
};

struct serve_client;

/* Prepares requests to O->url (copied). Returns the client, or NULL with the error set. */
struct serve_client *serve_client_open(const struct serve_client_opts *o);
/* Translates the N sentences TEXT (LEN bytes each, valid UTF-8), the first one line FIRST (1-based)
 * of the input, in one request, and appends nmt-decode's lines for them to OUT (serve_answer_read).
 * 0, or -1 with the error set: the server unreachable, busy past retry_for, or answering an error,
 * with its message and the input line it names ("line 34: ...") or the lines of the request. */
int serve_client_translate(struct serve_client *c, char *const *text, const size_t *len, size_t n, uint64_t first,
                           struct nmt_buf *out);
/* Returns how many times C's requests were answered 503 and sent again. */
uint64_t serve_client_retries(const struct serve_client *c);
/* Frees C; serve_client_close(NULL) is a no-op. */
void serve_client_close(struct serve_client *c);

#endif
