/* wapi.h - the worker's HTTP client for the worker protocol
 * (docs/worker-protocol.md): JSON POSTs with the worker token.
 *
 * One struct wapi per thread (it owns one curl handle, reused so that the
 * connection stays open). Every call is bounded by a connect timeout and a
 * total timeout; answers are capped at WAPI_MAX_ANSWER bytes.
 */
#ifndef ALALLO_WORKER_WAPI_H
#define ALALLO_WORKER_WAPI_H

#include <jansson.h>
#include <stddef.h>

#define WAPI_MAX_ANSWER (1024 * 1024)

struct wapi {
    void *curl;          /* CURL *, owned                                  */
    char base[256];      /* server URL without a trailing '/'               */
    char auth[200];      /* "Authorization: Bearer <token>"                 */
    long timeout_ms;     /* total time of one call                          */
};

/* Prepares a client for `base_url` with `token`. Returns 0, or -1 with a
 * reason in err (bad URL, curl could not start). */
int wapi_init(struct wapi *a /* OUT */, const char *base_url, const char *token,
              long timeout_ms, char *err, size_t errcap);

/* POSTs `body` (NULL sends {}) to base + path. When the server answered,
 * returns 0 with *status set and *answer the parsed JSON body (NULL when
 * empty or not JSON; the caller owns it). Returns -1 with a reason in err
 * when no answer came (refused, timed out, answer too large). */
int wapi_post(struct wapi *a, const char *path, json_t *body, long *status /* OUT */,
              json_t **answer /* OUT */, char *err, size_t errcap);

/* The "message" of an API error answer {"error":{"message":...}}, or
 * `fallback`. Never NULL. */
const char *wapi_error_message(const json_t *answer, const char *fallback);

/* Frees the handle. Accepts a client whose init failed. */
void wapi_free(struct wapi *a);

#endif
