/* job_request.h - the body of POST /v1/fine_tuning/jobs and of
 * POST /v1/fine_tuning/estimates (the same body), checked as JSON at the
 * edge into a struct job_request (control/job_draft.h); control_job_draft
 * then resolves it into the draft that control estimates and creates. No
 * store, no control: a pure function of the body (fuzz/fuzz_job_request.c).
 *
 * Accepted fields: model, training_file, validation_file, hyperparameters
 * {n_epochs, batch_size, learning_rate_multiplier} (numbers or "auto") or
 * the same inside method {type: "supervised", supervised: {hyperparameters}},
 * suffix, seed, metadata, integrations, and alallo's name, precision, goal,
 * adapter, max_steps and sample_prompts (core/sample_prompts.h). Unknown fields are ignored, as OpenAI SDKs may send more.
 */
#ifndef ALALLO_API_JOB_REQUEST_H
#define ALALLO_API_JOB_REQUEST_H

#include <jansson.h>
#include <stdbool.h>

#include "api/http.h"
#include "api/server.h"
#include "control/job_draft.h"

/* Reads and checks `body` (which must outlive *out: its strings are
 * borrowed). False at the first JSON check failed, with out->err set; the
 * request still goes to control_job_draft, which answers that error or one
 * of its own checks placed before it. */
bool job_request_parse(json_t *body, struct job_request *out /* OUT */);

/* The whole path of a request into a draft for the caller req->account:
 * job_request_parse, then control_job_draft. On a bad request answers res
 * (400/404 with the field as param) and returns false. */
bool job_request_draft(struct api_server *srv, const struct http_request *req, json_t *body,
                       struct job_draft *out /* OUT */, struct http_response *res);

#endif
