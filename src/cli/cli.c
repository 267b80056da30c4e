/* cli.c - what the client commands share (cli.h): one call made and
 * checked, the raw answer printed, a usage error, a job id standing for its
 * model. */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

#include "cli/cli_format.h"

int cli_do(struct cli_ctx *cx, const char *method, const char *path, json_t *body,
           struct cli_answer *a)
{
    char err[400];
    if (cli_call(&cx->conn, method, path, body, a, err, sizeof err) != 0) {
        fprintf(cx->err, "alallo: %s\n", err);
        cli_answer_free(a);
        return CLI_FAILED;
    }
    if (a->status < 200 || a->status >= 300) {
        char m[600];
        fprintf(cx->err, "alallo: %s\n", cli_answer_error(a, m, sizeof m));
        if (a->status == 401 && !cx->conn.auth[0])
            fprintf(cx->err, "alallo: set ALALLO_API_KEY (serve writes it to DATA/api-key)\n");
        cli_answer_free(a);
        return CLI_FAILED;
    }
    return CLI_OK;
}

void cli_print_raw(struct cli_ctx *cx, const struct cli_answer *a)
{
    fputs(a->body ? a->body : "", cx->out);
    if (a->len == 0 || a->body[a->len - 1] != '\n')
        fputc('\n', cx->out);
}

int cli_usage_error(struct cli_ctx *cx, const char *cmd, const char *reason)
{
    fprintf(cx->err, "alallo %s: %s\n(alallo %s --help shows the usage)\n", cmd, reason, cmd);
    return CLI_USAGE;
}

int cli_model_arg(struct cli_ctx *cx, const char *cmd, const char *given, char *buf, size_t cap,
                  const char **model)
{
    *model = given;
    if (strncmp(given, "ftjob-", 6) != 0)
        return CLI_OK;
    char path[400] = "/v1/fine_tuning/jobs/";
    if (cli_url_escape(path, sizeof path, given) != 0)
        return cli_usage_error(cx, cmd, "job ID too long");
    struct cli_answer a;
    int rc = cli_do(cx, "GET", path, NULL, &a);
    if (rc != CLI_OK)
        return rc;
    const char *ft = json_string_value(json_object_get(a.json, "fine_tuned_model"));
    const char *status = json_string_value(json_object_get(a.json, "status"));
    if (ft && *ft && strlen(ft) < cap) {
        snprintf(buf, cap, "%s", ft);
        *model = buf;
    } else {
        char why[300] = "", safe[280];
        const char *msg = json_string_value(json_object_get(a.json, "message"));
        if (msg && *msg)
            snprintf(why, sizeof why, " (%s)", cli_safe_text(safe, sizeof safe, msg));
        if (status && strcmp(status, "failed") == 0)
            fprintf(cx->err, "alallo: %s: the job failed: it has no model%s\n", given, why);
        else if (status && strcmp(status, "cancelled") == 0)
            fprintf(cx->err, "alallo: %s: the job was cancelled: it has no model\n", given);
        else
            fprintf(cx->err, "alallo: %s: the job is %s: its model comes when it succeeds\n",
                    given, status ? status : "not done");
        rc = CLI_FAILED;
    }
    cli_answer_free(&a);
    return rc;
}
