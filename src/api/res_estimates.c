/* res_estimates.c - POST /v1/fine_tuning/estimates: the time and price a
 * job would take, before it is created (same body as job creation); GET
 * /v1/estimates/calibration: how well the caller's past estimates held. */
#include <stdlib.h>

#include "api/handlers.h"
#include "api/job_request.h"
#include "api/paging.h"
#include "control/calibration.h"
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
    if (job_request_draft(srv, req, body, r, res)) {
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

static json_t *summary_json(const struct calib_summary *c)
{
    double n = c->n ? (double)c->n : 1.0;
    return json_pack("{s:I,s:I,s:I,s:f,s:f,s:f,s:o}", "inside", (json_int_t)c->inside, "below",
                     (json_int_t)c->below, "above", (json_int_t)c->above, "inside_share",
                     (double)c->inside / n, "below_share", (double)c->below / n, "above_share",
                     (double)c->above / n, "median_width",
                     c->n_ratio ? json_real(c->median_ratio) : json_null());
}

void estimates_calibration(struct api_server *srv, struct http_request *req,
                           struct http_response *res)
{
    int window = paging_limit(req, res, CALIBRATION_DEFAULT_JOBS);
    if (window < 0)
        return;
    struct control_calibration c;
    enum alallo_err e = control_calibration(srv->ctl, req->account.id, window, &c);
    if (e) {
        api_error(res, e, NULL, NULL);
        return;
    }
    api_json(res, 200,
             json_pack("{s:s,s:i,s:I,s:o,s:o}", "object", "estimates.calibration", "window",
                       c.window, "jobs", (json_int_t)c.time.n, "time", summary_json(&c.time),
                       "price", summary_json(&c.price)));
}
