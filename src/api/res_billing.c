/* res_billing.c - GET /v1/billing/ledger: the account's charges and
 * refunds, newest first, paged with `after` (a row id) and `limit`. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "api/handlers.h"
#include "api/paging.h"
#include "api/shapes.h"

void billing_ledger(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    int limit = paging_limit(req, res, 20);
    if (limit < 0)
        return;
    int64_t before = 0;
    const char *after = http_query(req, "after");
    if (after) {
        char *end;
        if (strncmp(after, "ledger-", 7) != 0 ||
            (before = strtoll(after + 7, &end, 10)) <= 0 || *end) {
            api_error(res, ERR_INVALID, "after must be the id of a ledger entry.", "after");
            return;
        }
    }
    struct store_ledger_row *rows = calloc((size_t)limit, sizeof *rows);
    if (!rows) {
        api_error(res, ERR_NOMEM, NULL, NULL);
        return;
    }
    int n;
    bool more;
    enum alallo_err e =
        store_ledger_list(srv->ctl->store, req->account.id, before, limit, rows, &n, &more);
    if (e) {
        api_store_error(res, e);
    } else {
        json_t *data = json_array();
        for (int i = 0; i < n && data; i++)
            json_array_append_new(data, shape_ledger_row(&rows[i]));
        api_json(res, 200, shape_list(data, more));
    }
    free(rows);
}
