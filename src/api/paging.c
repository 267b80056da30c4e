/* paging.c - see paging.h. */
#include "api/paging.h"

#include <stdlib.h>

#include "api/handlers.h"
#include "core/ids.h"
#include "core/text.h"

int paging_limit(const struct http_request *req, struct http_response *res, int dflt)
{
    const char *s = http_query(req, "limit");
    if (!s)
        return dflt;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || end == s || v < 1 || v > STORE_LIST_MAX) {
        api_error(res, ERR_INVALID, "limit must be an integer from 1 to 100.", "limit");
        return -1;
    }
    return (int)v;
}

bool paging_after_id(const struct http_request *req, struct http_response *res, const char *rows,
                     const char **after)
{
    *after = http_query(req, "after");
    if (!*after || ids_valid(*after))
        return true;
    char msg[128];
    text_printf(msg, sizeof msg, "after must be the id of one of your %s.", rows);
    api_error(res, ERR_INVALID, msg, "after");
    return false;
}
