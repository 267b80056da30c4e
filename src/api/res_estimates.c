/* res_estimates.c - POST /v1/fine_tuning/estimates: the time and price a
 * job would take, before it is created (same body as job creation). */
#include <stdlib.h>

#include "api/handlers.h"
#include "api/job_request.h"
#include "control/jobs.h"

void estimates_create(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    json_t *body = api_body_object(req, res);
    if (!body)
        return;
    struct job_draft *r = calloc(1, sizeof *r);
    if (!r) {
        json_decref(body);
        api_error(res, ERR_NOMEM, NULL, NULL);
        return;
    }
    if (job_request_parse(srv, req, body, r, res)) {
        char why[200];
        enum alallo_err e = control_job_estimate(srv->ctl, r, why, sizeof why);
        if (e)
            api_error(res, e, e == ERR_INVALID ? why : NULL, e == ERR_INVALID ? "model" : NULL);
        else
            api_json(res, 200, control_estimate_json(&r->est));
    }
    json_decref(body);
    free(r);
}
