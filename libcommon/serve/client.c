/* client.c: nmt-serve's client (see client.h), through libcurl. */
#include "serve/client.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "serve/request.h"

#define CONNECT_TIMEOUT_S 10L

struct serve_client {
    struct serve_client_opts o;
    char *url;                 /* .../translate */
    CURL *h;
    struct curl_slist *headers;
    struct nmt_buf body, answer;
    char curl_err[CURL_ERROR_SIZE];
    uint64_t retries;
};

/* libcurl's write callback: appends the answer's bytes to the buffer USER. */
static size_t on_data(char *p, size_t size, size_t n, void *user)
{
    return nmt_buf_append(user, p, size * n) < 0 ? 0 : size * n;
}

/* Sets the options of C's handle that do not change between requests. 0 or -1 with the error set. */
static int setup(struct serve_client *c)
{
    long connect = c->o.timeout > 0 && c->o.timeout < CONNECT_TIMEOUT_S ? c->o.timeout : CONNECT_TIMEOUT_S;
    /* "Expect:" empty: the body goes at once, without waiting for a 100 Continue */
    if (!(c->headers = curl_slist_append(NULL, "Content-Type: application/json")) ||
        !(c->headers = curl_slist_append(c->headers, "Expect:")))
        return nmt_seterr("out of memory");
    if (curl_easy_setopt(c->h, CURLOPT_URL, c->url) || curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, c->headers) ||
        curl_easy_setopt(c->h, CURLOPT_NOSIGNAL, 1L) || curl_easy_setopt(c->h, CURLOPT_ERRORBUFFER, c->curl_err) ||
        curl_easy_setopt(c->h, CURLOPT_CONNECTTIMEOUT, connect) ||
        curl_easy_setopt(c->h, CURLOPT_TIMEOUT, c->o.timeout > 0 ? c->o.timeout : 0L) ||
        curl_easy_setopt(c->h, CURLOPT_WRITEFUNCTION, on_data) ||
        curl_easy_setopt(c->h, CURLOPT_WRITEDATA, &c->answer))
        return nmt_seterr("cannot set up the HTTP requests to '%s'", c->o.url);
    return 0;
}

struct serve_client *serve_client_open(const struct serve_client_opts *o)
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
        nmt_seterr("cannot initialise libcurl");
        return NULL;
    }
    struct serve_client *c = calloc(1, sizeof *c);
    size_t ul = strlen(o->url);
    while (ul > 0 && o->url[ul - 1] == '/')
        ul--;
    int has_path = ul >= 10 && !memcmp(o->url + ul - 10, "/translate", 10);
    const char *scheme = strstr(o->url, "://") ? "" : "http://";
    size_t size = strlen(scheme) + ul + 11;
    if (!c || !(c->url = malloc(size))) {
        free(c);
        curl_global_cleanup();
        nmt_seterr("out of memory");
        return NULL;
    }
    c->o = *o;
    snprintf(c->url, size, "%s%.*s%s", scheme, (int)ul, o->url, has_path ? "" : "/translate");
    c->o.url = c->url;
    if (!(c->h = curl_easy_init()) || setup(c) < 0) {
        if (c->h)
            nmt_seterr("cannot initialise libcurl");
        serve_client_close(c);
        return NULL;
    }
    return c;
}

uint64_t serve_client_retries(const struct serve_client *c)
{
    return c->retries;
}

void serve_client_close(struct serve_client *c)
{
    if (!c)
        return;
    if (c->h)
        curl_easy_cleanup(c->h);
    curl_slist_free_all(c->headers);
    nmt_buf_free(&c->body);
    nmt_buf_free(&c->answer);
    free(c->url);
    free(c);
    curl_global_cleanup();
}

/* Writes "line L" or "lines A-B" of the request of N sentences from FIRST into BUF: the line the
 * server's message MSG names ("'text'[i] ..."), else all of them. */
static void lines_named(const char *msg, size_t n, uint64_t first, char *buf, size_t size)
{
    unsigned long long i;
    int used = 0;
    if (sscanf(msg, "'text'[%llu]%n", &i, &used) == 1 && used > 0 && i < n)
        snprintf(buf, size, "line %llu", (unsigned long long)first + i);
    else if (n == 1)
        snprintf(buf, size, "line %llu", (unsigned long long)first);
    else
        snprintf(buf, size, "lines %llu-%llu", (unsigned long long)first, (unsigned long long)(first + n - 1));
}

/* Posts C's body once: 0 with *STATUS and *RETRY_AFTER (seconds, -1: none), or -1 with the error set. */
static int post(struct serve_client *c, long *status, long *retry_after)
{
    c->answer.len = 0;
    c->curl_err[0] = 0;
    curl_off_t ra = -1;
    CURLcode rc = curl_easy_setopt(c->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)c->body.len);
    if (!rc)
        rc = curl_easy_setopt(c->h, CURLOPT_POSTFIELDS, c->body.data);
    if (!rc)
        rc = curl_easy_perform(c->h);
    if (rc)
        return nmt_seterr("cannot reach '%s': %s", c->url, c->curl_err[0] ? c->curl_err : curl_easy_strerror(rc));
    curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, status);
    if (curl_easy_getinfo(c->h, CURLINFO_RETRY_AFTER, &ra) != CURLE_OK || ra < 0)
        ra = -1;
    *retry_after = ra > 3600 ? 3600 : (long)ra;
    return 0;
}

int serve_client_translate(struct serve_client *c, char *const *text, const size_t *len, size_t n, uint64_t first,
                           struct nmt_buf *out)
{
    char where[64], msg[512];
    lines_named("", n, first, where, sizeof where);
    if (serve_request_write(text, len, n, c->o.beam, c->o.nbest, c->o.scores, &c->body) < 0)
        return nmt_seterr("%s: %s", where, nmt_errmsg());
    long status = 0, retry = -1;
    double waited = 0;
    for (;;) {
        if (post(c, &status, &retry) < 0)
            return nmt_seterr("%s (%s not translated)", nmt_errmsg(), where);
        if (status != 503 || waited >= c->o.retry_for)
            break;
        double wait = retry > 0 ? (double)retry : 1.0;
        if (waited + wait > c->o.retry_for)
            wait = c->o.retry_for - waited;
        waited += wait;
        c->retries++;
        nanosleep(&(struct timespec){(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)}, NULL);
    }
    if (status == 200) {
        if (serve_answer_read(c->answer.len ? (const char *)c->answer.data : "", c->answer.len, n, first, out) < 0)
            return nmt_seterr("'%s', %s: %s", c->url, where, nmt_errmsg());
        return 0;
    }
    if (serve_error_read(c->answer.len ? (const char *)c->answer.data : "", c->answer.len, msg, sizeof msg) < 0)
        snprintf(msg, sizeof msg, "(no message)");
    lines_named(msg, n, first, where, sizeof where);
    if (status == 503)
        return nmt_seterr("%s: '%s' still answered 503 after %.0f s of retries: %s", where, c->url, waited, msg);
    return nmt_seterr("%s: '%s' answered %ld: %s", where, c->url, status, msg);
}
