/* request.h: the JSON of nmt-serve's POST /translate (nmt-serve(1)): a request body checked against
 * the server's limits and turned into sentences and search options, and the answer written back.
 *
 * A request is an object {"text": ["sentence", ...], "beam": K, "nbest": N, "scores": false,
 * "alignment": false}; only "text" is required. The answer is {"translations": [...]}: strings, or,
 * with "scores" or N > 1, objects {"text": best, "score": s} with "nbest": [{"text", "score"}, ...]
 * when N > 1. Errors are {"error": "what was wrong"}. JSON is read and written by Jansson, on the
 * server's side (parse a request, write its answer) and on the client's (nmt-serve --client: write a
 * request, read its answer). */
#ifndef NMT_SERVE_REQUEST_H
#define NMT_SERVE_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "nn/search.h"
#include "text/tokenizer.h"

/* What a request may ask, with the option that sets each limit (named in the errors). */
struct serve_limits {
    size_t max_sentences;      /* --max-request-sentences */
    size_t max_line_bytes;     /* --max-line-bytes: bytes of one sentence */
    int max_beam;              /* --max-beam */
    int beam, nbest;           /* the server's defaults (--beam, --nbest) */
};

struct serve_request {
    size_t n;                  /* sentences */
    char **text;               /* (n) each NUL-terminated, valid UTF-8, owned */
    size_t *len;               /* (n) bytes of each */
    int beam, nbest;           /* 1 <= nbest <= beam <= max_beam */
    int scores;                /* objects with scores in the answer */
};

/* HTTP statuses of serve_request_parse's failures. */
enum { SERVE_BAD_REQUEST = 400, SERVE_TOO_LARGE = 413 };

/* Parses the LEN bytes of BODY into R (freed with serve_request_free, also after a failure),
 * within LIM. 0, or SERVE_BAD_REQUEST (invalid UTF-8, malformed JSON, a missing field, a wrong
 * type or value, an unknown field) or SERVE_TOO_LARGE (more sentences or a longer one than LIM
 * allows), with the error set saying which field or limit. */
int serve_request_parse(const char *body, size_t len, const struct serve_limits *lim, struct serve_request *r);
/* Frees what R holds and empties it; a zeroed R is fine. */
void serve_request_free(struct serve_request *r);

/* Writes the answer to R into OUT (replacing its contents): RES[i] is sentence i's result (nhyp 0:
 * an empty translation), turned into text by TOK. 0, or -1 with the error set. */
int serve_answer(const struct serve_request *r, const struct search_result *res, struct tokenizer *tok,
                 struct nmt_buf *out);
/* Writes {"error": MSG} into OUT (replacing its contents). 0, or -1 (out of memory). */
int serve_error_json(const char *msg, struct nmt_buf *out);

/* The client's side. Writes the request {"text": [...], "beam": BEAM, "nbest": NBEST, "scores": SCORES}
 * for the N sentences TEXT (LEN bytes each, valid UTF-8) into OUT (replacing its contents); BEAM
 * and NBEST 0 are left out (the server's defaults), SCORES 0 too. 0, or -1 with the error set. */
int serve_request_write(char *const *text, const size_t *len, size_t n, int beam, int nbest, int scores,
                        struct nmt_buf *out);
/* Reads the answer BODY (LEN bytes) to a request of N sentences, the first one line FIRST (1-based)
 * of the input, and appends nmt-decode's output lines for them to OUT, as the answer's entries ask:
 * a string gives the text; an object "score TAB text"; an object with "nbest" a line "FIRST+i TAB
 * rank TAB score TAB text" a hypothesis. 0, or -1 with the error set (not JSON, another shape, or
 * not N translations). */
int serve_answer_read(const char *body, size_t len, size_t n, uint64_t first, struct nmt_buf *out);
/* Copies the message of the error answer BODY (LEN bytes, {"error": MSG}) into MSG (SIZE > 0 bytes,
 * cut if longer). 0, or -1 when BODY is not such an answer (MSG is then left empty). */
int serve_error_read(const char *body, size_t len, char *msg, size_t size);

#endif
