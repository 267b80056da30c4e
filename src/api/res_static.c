/* res_static.c - the dashboard: the files of web/ embedded in the binary
 * (web_assets.h), served at their paths, with "/" as "/index.html". */
#include <string.h>

#include "api/handlers.h"
#include "api/web_assets.h"

void static_get(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    (void)srv;
    const char *path = strcmp(req->path, "/") == 0 ? "/index.html" : req->path;
    for (const struct web_asset *a = web_assets; a->path; a++) {
        if (strcmp(a->path, path) == 0) {
            http_respond(res, 200, http_content_type_for(path), (const char *)a->data, a->size);
            return;
        }
    }
    http_respond(res, 404, "text/plain; charset=utf-8", "Not found\n", 10);
}
