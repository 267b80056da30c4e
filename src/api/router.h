/* router.h - which handler answers a request, and who may call it.
 *
 * The route table lives in router.c: one line per method and path pattern.
 * A pattern's "{}" segment captures one non-empty path segment into
 * req->params. /v1 routes need an API key, /internal routes the worker
 * token, a few (drain) the operator's account `default`.
 */
#ifndef ALALLO_API_ROUTER_H
#define ALALLO_API_ROUTER_H

#include <stdbool.h>
#include <stdint.h>

#include "api/http.h"
#include "api/server.h"

/* True when `path` matches `pattern`; captures go to params[] (each at most
 * HTTP_VALUE_MAX-1 bytes, else no match). */
bool router_match(const char *pattern, const char *path,
                  char params[HTTP_PARAMS_MAX][HTTP_VALUE_MAX] /* OUT */, int *n /* OUT */);

/* The largest body accepted for `method` `path` (uploads get the configured
 * upload cap, everything else the body cap). */
int64_t router_body_cap(const struct api_server *srv, const char *method, const char *path);

/* Whether req (method, path and Authorization filled; body not yet read)
 * may send its body: only to a route that takes one, from a caller its key
 * or token admits. Called when the headers arrive, so that an unchecked
 * peer never holds a connection busy with a body. On false, res holds the
 * answer (the one api_dispatch would give: 401, 403, 404, 405; a 400 for a
 * body sent to a route that takes none), not yet counted in metrics.
 * On true, req->account is filled and api_dispatch checks it again. */
bool api_admit_body(struct api_server *srv, struct http_request *req, struct http_response *res);

/* Routes, authenticates and answers one request; counts it in metrics. */
void api_dispatch(struct api_server *srv, struct http_request *req, struct http_response *res);

#endif
