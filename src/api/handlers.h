/* handlers.h - the request handlers, one file per resource:
 *   res_files.c       /v1/files
 *   res_models.c      /v1/models
 *   res_jobs.c        /v1/fine_tuning/jobs (create, list, retrieve, cancel)
 *   res_job_views.c   events, checkpoints, training log of a job
 *   res_estimates.c   /v1/fine_tuning/estimates
 *   res_completions.c /v1/completions
 *   res_chat.c        /v1/chat/completions
 *   res_workers.c     /v1/workers, drain
 *   res_billing.c     /v1/billing/ledger
 *   res_integrations.c /v1/organization/integrations/wandb (the W&B API key)
 *   res_webhooks.c    /v1/webhooks, their deliveries
 *   res_health.c      /healthz, /metrics
 *   res_internal.c    /internal (the worker protocol)
 *   res_static.c      the dashboard
 * Each answers through `res`; the router has already checked the caller.
 */
#ifndef ALALLO_API_HANDLERS_H
#define ALALLO_API_HANDLERS_H

#include <jansson.h>

#include "api/http.h"
#include "api/server.h"

typedef void (*api_handler)(struct api_server *srv, struct http_request *req,
                            struct http_response *res);

void files_create(struct api_server *, struct http_request *, struct http_response *);
void files_list(struct api_server *, struct http_request *, struct http_response *);
void files_get(struct api_server *, struct http_request *, struct http_response *);
void files_delete(struct api_server *, struct http_request *, struct http_response *);
void files_content(struct api_server *, struct http_request *, struct http_response *);
void models_list(struct api_server *, struct http_request *, struct http_response *);
void models_get(struct api_server *, struct http_request *, struct http_response *);
void models_export(struct api_server *, struct http_request *, struct http_response *);
void jobs_create(struct api_server *, struct http_request *, struct http_response *);
void jobs_list(struct api_server *, struct http_request *, struct http_response *);
void jobs_get(struct api_server *, struct http_request *, struct http_response *);
void jobs_cancel(struct api_server *, struct http_request *, struct http_response *);
void jobs_events(struct api_server *, struct http_request *, struct http_response *);
void jobs_checkpoints(struct api_server *, struct http_request *, struct http_response *);
/* A checkpoint made into a model folder (`alallo train --materialize`), as
 * a tar archive: the partial model of a cancelled or running job. */
void jobs_checkpoint_content(struct api_server *, struct http_request *, struct http_response *);
void jobs_log(struct api_server *, struct http_request *, struct http_response *);
void estimates_create(struct api_server *, struct http_request *, struct http_response *);
void estimates_calibration(struct api_server *, struct http_request *, struct http_response *);
void completions_create(struct api_server *, struct http_request *, struct http_response *);
void chat_completions_create(struct api_server *, struct http_request *, struct http_response *);
/* POST /v1/fine_tuning/alpha/graders/validate and /run (res_graders.c). */
void graders_validate(struct api_server *, struct http_request *, struct http_response *);
void graders_run(struct api_server *, struct http_request *, struct http_response *);

/* Shared by /v1/completions and /v1/chat/completions (res_completions.c):
 * the sampling fields of a request into g (false with res set). One
 * generation is completion_call.h's. */
struct control_generation;
bool completion_sampling_parse(struct api_server *srv, json_t *body,
                               struct control_generation *g, struct http_response *res);
/* Whether logprobs can be served here (only the inference engine serves
 * them); false with a 400 naming "logprobs" set in res. */
bool completion_logprobs_served(struct api_server *srv, struct http_response *res);
void workers_list(struct api_server *, struct http_request *, struct http_response *);
void workers_drain(struct api_server *, struct http_request *, struct http_response *);
/* The spot capacity of a worker was taken back (the provider's notice, as
 * the operator or its tooling relays it): like a drain, for spot workers
 * only; the running job checkpoints and moves. */
void workers_reclaim(struct api_server *, struct http_request *, struct http_response *);
void integrations_wandb_set(struct api_server *, struct http_request *, struct http_response *);
void integrations_wandb_get(struct api_server *, struct http_request *, struct http_response *);
void integrations_wandb_delete(struct api_server *, struct http_request *,
                               struct http_response *);
void billing_ledger(struct api_server *, struct http_request *, struct http_response *);
void webhooks_create(struct api_server *, struct http_request *, struct http_response *);
void webhooks_list(struct api_server *, struct http_request *, struct http_response *);
void webhooks_delete(struct api_server *, struct http_request *, struct http_response *);
void webhooks_deliveries(struct api_server *, struct http_request *, struct http_response *);
void health_get(struct api_server *, struct http_request *, struct http_response *);
void metrics_get(struct api_server *, struct http_request *, struct http_response *);
void internal_register(struct api_server *, struct http_request *, struct http_response *);
void internal_heartbeat(struct api_server *, struct http_request *, struct http_response *);
void internal_claim(struct api_server *, struct http_request *, struct http_response *);
void internal_attempt_start(struct api_server *srv, struct http_request *req,
                            struct http_response *res);
void internal_attempt_heartbeat(struct api_server *srv, struct http_request *req,
                                struct http_response *res);
void internal_serving_heartbeat(struct api_server *srv, struct http_request *req,
                                struct http_response *res);
void internal_events(struct api_server *, struct http_request *, struct http_response *);
void internal_finish(struct api_server *, struct http_request *, struct http_response *);
void static_get(struct api_server *, struct http_request *, struct http_response *);

/* The index (0..METRIC_CODES-1) under which status `code` is counted. */
int metrics_code_index(int code);

#endif
