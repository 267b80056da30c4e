/* job_request.h - the body of POST /v1/fine_tuning/jobs and of
 * POST /v1/fine_tuning/estimates (the same body): validation at the edge and
 * defaults, into a draft that the control layer estimates and creates
 * (control/jobs.h).
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
#include "control/jobs.h"

/* Reads and checks `body` for the caller req->account. On a bad value
 * answers res (400/404 with the field as param) and returns false. */
bool job_request_parse(struct api_server *srv, const struct http_request *req, json_t *body,
                       struct job_draft *out /* OUT */, struct http_response *res);

#endif
