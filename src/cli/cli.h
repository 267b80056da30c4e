/* cli.h - the client commands (`alallo jobs|files|models|estimate|workers|
 * ledger|generate|export`) and what they share. See docs/cli.md.
 *
 * Every command returns the exit status: 0 done, 1 the server refused or
 * could not be reached (its message on stderr), 2 a usage error.
 */
#ifndef ALALLO_CLI_H
#define ALALLO_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "cli/cli_args.h"
#include "cli/cli_http.h"

enum { CLI_OK = 0, CLI_FAILED = 1, CLI_USAGE = 2 };

struct cli_ctx {
    struct cli_conn conn;
    FILE *out;           /* normally stdout */
    FILE *err;           /* normally stderr */
};

/* Makes one call and checks it. On success returns CLI_OK with *a filled
 * (the caller frees it). Otherwise prints "alallo: <reason>" (the server's
 * message when it gave one) and returns CLI_FAILED with *a freed. */
int cli_do(struct cli_ctx *cx, const char *method, const char *path, json_t *body,
           struct cli_answer *a /* OUT */);

/* Prints the answer's raw body (for --json), ending with a newline. */
void cli_print_raw(struct cli_ctx *cx, const struct cli_answer *a);

/* Prints "alallo CMD: <reason>" and the usage line; returns CLI_USAGE. */
int cli_usage_error(struct cli_ctx *cx, const char *cmd, const char *reason);

/* Builds the body of POST /v1/fine_tuning/jobs and /estimates from the
 * options of `jobs create` / `estimate` (cli_job_opts). Uploads --upload
 * first. Returns CLI_OK with *body set, or an exit status after printing. */
int cli_job_body(struct cli_ctx *cx, const char *cmd, const struct cli_opt *opts,
                 json_t **body /* OUT */);

/* Where a model is expected, a job id (ftjob-...) stands for its fine-tuned
 * model: the job is looked up and *model set to its fine_tuned_model (in
 * buf). Any other name is left as it is (*model = given). A job without a
 * model is an error that says why ("the job failed: it has no model").
 * Returns CLI_OK or an exit status after printing. */
int cli_model_arg(struct cli_ctx *cx, const char *cmd, const char *given, char *buf, size_t cap,
                  const char **model /* OUT */);

/* The options cli_job_body reads; copy the array before parsing. */
extern const struct cli_opt cli_job_opts[];
#define CLI_JOB_OPTS_COUNT 28

int cli_jobs(struct cli_ctx *cx, int argc, char **argv);
int cli_estimate(struct cli_ctx *cx, int argc, char **argv);
int cli_files(struct cli_ctx *cx, int argc, char **argv);
int cli_models(struct cli_ctx *cx, int argc, char **argv);
int cli_workers(struct cli_ctx *cx, int argc, char **argv);
int cli_ledger(struct cli_ctx *cx, int argc, char **argv);
int cli_generate(struct cli_ctx *cx, int argc, char **argv);
int cli_export(struct cli_ctx *cx, int argc, char **argv);

#endif
