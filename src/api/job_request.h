/* job_request.h - the body of POST /v1/fine_tuning/jobs and of
 * POST /v1/fine_tuning/estimates (the same body): validation at the edge,
 * defaults, and the estimate.
 *
 * Accepted fields: model, training_file, validation_file, hyperparameters
 * {n_epochs, batch_size, learning_rate_multiplier} (numbers or "auto") or
 * the same inside method {type: "supervised", supervised: {hyperparameters}},
 * suffix, seed, metadata, and alallo's name, precision, goal, adapter,
 * max_steps. Unknown fields are ignored, as OpenAI SDKs may send more.
 */
#ifndef ALALLO_API_JOB_REQUEST_H
#define ALALLO_API_JOB_REQUEST_H

#include <jansson.h>
#include <stdbool.h>

#include "api/catalog.h"
#include "api/estimate_provisional.h"
#include "api/http.h"
#include "api/server.h"

#define JOB_SEQ_LEN 256 /* training context length the service uses */

struct job_request {
    struct store_job job; /* a draft: no id, status or estimate yet */
    struct catalog_model model;
    struct store_file file;
    struct estimate est;
};

/* Reads and checks `body` for the caller req->account. On a bad value
 * answers res (400/404 with the field as param) and returns false. */
bool job_request_parse(struct api_server *srv, const struct http_request *req, json_t *body,
                       struct job_request *out /* OUT */, struct http_response *res);

/* Computes out->est from the model, the data and the fleet now. */
void job_request_estimate(struct api_server *srv, struct job_request *r);

/* The estimate object of SPEC §4: time, price, plan, message. */
json_t *job_request_estimate_json(const struct estimate *e);

#endif
