/* res_jobs.c - /v1/fine_tuning/jobs: create, list, retrieve, cancel. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/handlers.h"
#include "api/job_request.h"
#include "api/jsonw.h"
#include "api/paging.h"
#include "control/jobs.h"
#include "control/lifecycle.h"
#include "api/shapes.h"
#include "core/ids.h"
#include "core/text.h"

#define JOB_ATTEMPTS_SHOWN 32

/* Writes the job object with its attempts, as every job endpoint shows it. */
static void write_job(struct api_server *srv, struct jsonw *w, const struct store_job *j)
{
    struct store_attempt atts[JOB_ATTEMPTS_SHOWN];
    int n = 0;
    if (j->fence > 0 && store_attempt_list(srv->ctl->store, j->id, atts, JOB_ATTEMPTS_SHOWN, &n))
        n = 0;
    shape_job_write(w, j, atts, n, clock_now_ms());
}

static void respond_job(struct api_server *srv, struct http_response *res,
                        const struct store_job *j)
{
    struct jsonw w = {0};
    write_job(srv, &w, j);
    if (w.failed)
        api_error(res, ERR_NOMEM, NULL, NULL);
    else
        http_respond(res, 200, "application/json", w.p, w.len);
    jsonw_free(&w);
}

/* The job named by the path, of the caller; answers 404 when absent. */
static bool load_job(struct api_server *srv, struct http_request *req, struct http_response *res,
                     struct store_job *j)
{
    const char *id = req->params[0];
    enum alallo_err e = ids_valid(id) ? store_job_get(srv->ctl->store, req->account.id, id, j)
                                      : ERR_NOT_FOUND;
    if (e == ERR_NOT_FOUND) {
        char msg[HTTP_VALUE_MAX + 32];
        text_printf(msg, sizeof msg, "No such job: %s.", id);
        api_error(res, ERR_NOT_FOUND, msg, "id");
        return false;
    }
    if (e) {
        api_store_error(res, e);
        return false;
    }
    return true;
}

void jobs_create(struct api_server *srv, struct http_request *req, struct http_response *res)
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
    bool ok = job_request_draft(srv, req, body, r, res);
    json_decref(body);
    if (!ok) {
        free(r);
        return;
    }
    char why[200] = "";
    enum alallo_err e = control_job_create(srv->ctl, r, why, sizeof why);
    if (e == ERR_INVALID || e == ERR_NOT_FOUND) {
        /* ERR_NOT_FOUND: a data set was deleted while the job was made. */
        /* ERR_INVALID: the planner refused the model's settings, or no
         * capacity finishes it by its deadline (goal finish_by). */
        const char *param = e == ERR_INVALID && r->est.finish_by_s > 0 && !r->est.finish_by_met
                                ? "finish_by"
                            : e == ERR_INVALID ? "model"
                            : r->job.validation_file[0] && strstr(why, r->job.validation_file)
                                ? "validation_file"
                                : "training_file";
        api_error(res, e, why[0] ? why : NULL, param);
        free(r);
        return;
    }
    if (e) {
        free(r);
        api_store_error(res, e);
        return;
    }
    respond_job(srv, res, &r->job);
    free(r);
}

void jobs_list(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    const char *after;
    int limit = paging_limit(req, res, 20);
    if (limit < 0 || !paging_after_id(req, res, "jobs", &after))
        return;
    struct store_job *jobs = calloc((size_t)limit, sizeof *jobs);
    if (!jobs) {
        api_error(res, ERR_NOMEM, NULL, NULL);
        return;
    }
    int n;
    bool more;
    enum alallo_err e = store_job_list(srv->ctl->store, req->account.id, after, limit, jobs, &n,
                                       &more);
    if (e == ERR_NOT_FOUND) {
        api_error(res, ERR_INVALID, "after must be the id of one of your jobs.", "after");
    } else if (e) {
        api_store_error(res, e);
    } else {
        /* Written as text: a page of job objects is the hottest answer. */
        struct jsonw w = {0};
        jsonw_open(&w, '{');
        jsonw_key(&w, "object");
        jsonw_str(&w, "list");
        jsonw_key(&w, "data");
        jsonw_open(&w, '[');
        for (int i = 0; i < n; i++)
            write_job(srv, &w, &jobs[i]);
        jsonw_close(&w, ']');
        jsonw_key(&w, "has_more");
        jsonw_bool(&w, more);
        jsonw_key(&w, "first_id");
        jsonw_str(&w, n ? jobs[0].id : NULL);
        jsonw_key(&w, "last_id");
        jsonw_str(&w, n ? jobs[n - 1].id : NULL);
        jsonw_close(&w, '}');
        if (w.failed)
            api_error(res, ERR_NOMEM, NULL, NULL);
        else
            http_respond(res, 200, "application/json", w.p, w.len);
        jsonw_free(&w);
    }
    free(jobs);
}

void jobs_get(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    struct store_job *j = malloc(sizeof *j);
    if (!j) {
        api_error(res, ERR_NOMEM, NULL, NULL);
        return;
    }
    if (load_job(srv, req, res, j))
        respond_job(srv, res, j);
    free(j);
}

void jobs_cancel(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    struct store_job *j = malloc(sizeof *j);
    if (!j) {
        api_error(res, ERR_NOMEM, NULL, NULL);
        return;
    }
    if (!load_job(srv, req, res, j)) {
        free(j);
        return;
    }
    enum alallo_err e = lifecycle_cancel(srv->ctl, req->account.id, j->id, j);
    if (e == ERR_CONFLICT) {
        char msg[128];
        text_printf(msg, sizeof msg, "The job has already ended (%s); there is nothing to cancel.",
                    job_status_name(j->status));
        api_error(res, ERR_CONFLICT, msg, "id");
    } else if (e) {
        api_store_error(res, e);
    } else {
        respond_job(srv, res, j);
    }
    free(j);
}
