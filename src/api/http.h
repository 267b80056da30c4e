/* http.h - one HTTP request and its response, as the API's handlers see
 * them: plain structs with no libmicrohttpd inside, so that handlers can be
 * called directly by unit tests. http_mhd.c fills them from the socket.
 *
 * Ownership: the request's body belongs to the caller; a response's body
 * (or stream context) belongs to the response until http_response_free().
 */
#ifndef ALALLO_API_HTTP_H
#define ALALLO_API_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "store/store.h"

#define HTTP_PATH_MAX 512
#define HTTP_QUERY_MAX 16   /* query parameters kept; more are ignored */
#define HTTP_VALUE_MAX 256  /* longest query value or header kept        */
#define HTTP_PARAMS_MAX 4   /* {captures} in one route                  */

struct http_kv {
    char key[64];
    char value[HTTP_VALUE_MAX];
};

struct http_request {
    char method[8];
    char path[HTTP_PATH_MAX]; /* without the query */
    struct http_kv query[HTTP_QUERY_MAX];
    int n_query;
    char authorization[HTTP_VALUE_MAX];
    char content_type[HTTP_VALUE_MAX];
    bool forwarded; /* sent on by a standby (X-Alallo-Forwarded; api/forward.h) */
    /* The connection's socket, only to notice the client leaving (a hang-up)
     * during a long answer; never read, written or closed by a handler.
     * 0: none (a request made by a test). */
    int client_fd;
    const char *body; /* not NUL-terminated */
    size_t body_len;
    /* Set by the router. */
    char params[HTTP_PARAMS_MAX][HTTP_VALUE_MAX];
    int n_params;
    struct store_account account; /* the caller, on /v1 routes */
    char worker[STORE_NAME_MAX];  /* unused for now: workers share one token */
};

/* A streamed body: called until it returns -1 (end) or a negative error;
 * it may block (each connection has its own thread). */
typedef ssize_t (*http_stream_fn)(void *ctx, char *buf, size_t max);

struct http_response {
    int status;
    char content_type[64];
    char *body; /* malloc'd */
    size_t len;
    http_stream_fn stream; /* when non-NULL, body is unused */
    void *stream_ctx;
    void (*stream_free)(void *ctx);
    /* A stream read slower than this many bytes a second is cut, its
     * connection closed (0: never; api/conn_guard.h says how it is measured). */
    int64_t floor_bps;
    char header_name[32]; /* one extra header, e.g. Content-Disposition */
    char header_value[256];
};

/* The value of query parameter `key`, or NULL. */
const char *http_query(const struct http_request *req, const char *key);

/* Adds a query parameter (used by the socket layer and by tests). Returns
 * false when the list is full or a part is too long. */
bool http_query_add(struct http_request *req, const char *key, const char *value);

/* Sets the response to `status` with a copy of `len` bytes of `body`. On
 * out of memory, the response becomes a bare 500. */
void http_respond(struct http_response *res, int status, const char *content_type,
                  const char *body, size_t len);

/* Frees what the response owns and empties it. */
void http_response_free(struct http_response *res);

/* The content type served for a file path, from its extension. */
const char *http_content_type_for(const char *path);

#endif
