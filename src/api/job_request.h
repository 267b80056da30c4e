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
#include "api/http.h"
#include "api/sched_link.h"
#include "api/server.h"

#define JOB_SEQ_LEN SCHED_LINK_SEQ_LEN /* training context length the service uses */

struct job_request {
    struct store_job job; /* a draft: no id, status or estimate yet */
    struct catalog_model model;
    struct store_file file;
    struct estimate est; /* the real estimator's (src/sched/estimator.h) */
    double now;          /* when it was estimated, seconds */
    double model_factor; /* the model's speed factor the estimate used */
};

/* Tokens in one epoch of a data set with `examples` examples and
 * `text_bytes` bytes of text, each example cut to seq_len: about 4 bytes
 * of English per token plus the template's tokens. */
int64_t job_request_tokens_per_epoch(long examples, int64_t text_bytes, int seq_len);

/* Reads and checks `body` for the caller req->account. On a bad value
 * answers res (400/404 with the field as param) and returns false. */
bool job_request_parse(struct api_server *srv, const struct http_request *req, json_t *body,
                       struct job_request *out /* OUT */, struct http_response *res);

/* Computes r->est from the model, the data, the queue and the fleet now.
 * ERR_INVALID (reason in why) for a shape the planner refuses. */
enum alallo_err job_request_estimate(struct api_server *srv, struct job_request *r, char *why,
                                     size_t whycap);

/* The estimate object of SPEC §4: time, price, plan, message. */
json_t *job_request_estimate_json(const struct estimate *e);

/* Fills the draft's estimate fields, plan and ledger from r->est. */
void job_request_apply_estimate(struct job_request *r);

#endif
