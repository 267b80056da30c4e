/* paging.h - the ?limit= and ?after= parameters of the list endpoints, read
 * once for every resource. Each reader answers 400 on res itself when the
 * value is bad, so a handler only checks the result and returns.
 */
#ifndef ALALLO_API_PAGING_H
#define ALALLO_API_PAGING_H

#include <stdbool.h>

#include "api/http.h"

/* ?limit=: dflt when absent, else a whole number from 1 to STORE_LIST_MAX.
 * Returns the limit, or -1 after answering 400 ("limit must be an integer
 * from 1 to 100.", param "limit"). */
int paging_limit(const struct http_request *req, struct http_response *res, int dflt);

/* ?after= as an id of the caller's own rows: *after (OUT) is NULL when
 * absent, else the raw value, which must pass ids_valid. Returns false after
 * answering 400 ("after must be the id of one of your <rows>.", param
 * "after"); rows names them in the plural ("jobs", "files"). */
bool paging_after_id(const struct http_request *req, struct http_response *res, const char *rows,
                     const char **after /* OUT */);

#endif
