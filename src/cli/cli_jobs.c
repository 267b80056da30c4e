/* cli_jobs.c - `alallo jobs ...` and `alallo estimate`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_format.h"

const struct cli_opt cli_job_opts[] = {
    {"--model", true, NULL},
    {"--file", true, NULL},
    {"--upload", true, NULL},
    {"--name", true, NULL},
    {"--precision", true, NULL},
    {"--goal", true, NULL},
    {"--finish-by", true, NULL},
    {"--epochs", true, NULL},
    {"--batch-size", true, NULL},
    {"--learning-rate-multiplier", true, NULL},
    {"--seed", true, NULL},
    {"--suffix", true, NULL},
    {"--adapter", true, NULL},
    {"--validation-file", true, NULL},
    {"--max-steps", true, NULL},
    {"--method", true, NULL},
    {"--beta", true, NULL},
    {"--max-seq-len", true, NULL},
    {"--packing", true, NULL},
    {"--lora-rank", true, NULL},
    {"--lora-alpha", true, NULL},
    {"--lora-dropout", true, NULL},
    {"--lora-target-modules", true, NULL},
    {"--lr-scheduler", true, NULL},
    {"--warmup-ratio", true, NULL},
    {"--weight-decay", true, NULL},
    {"--train-on-inputs", true, NULL},
    {NULL, false, NULL},
};
_Static_assert(sizeof cli_job_opts / sizeof cli_job_opts[0] == CLI_JOB_OPTS_COUNT,
               "CLI_JOB_OPTS_COUNT counts cli_job_opts");

/* The further hyper-parameters (docs/api.md): passed on for the server to
 * check (its 400 names the field); here only their type is read. Returns
 * the bad option's message, or NULL. */
static const char *more_hyper(const struct cli_opt *opts, json_t *hp)
{
    static const char *const nums[][2] = {
        {"--beta", "beta"},           {"--max-seq-len", "max_seq_len"},
        {"--lora-rank", "lora_rank"}, {"--lora-alpha", "lora_alpha"},
        {"--lora-dropout", "lora_dropout"},
        {"--warmup-ratio", "warmup_ratio"}, {"--weight-decay", "weight_decay"},
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        const char *v = cli_get(opts, nums[i][0]);
        double x;
        long n;
        if (!v)
            continue;
        if (cli_parse_long(v, 0, 1L << 30, &n) == 0)
            json_object_set_new(hp, nums[i][1], json_integer(n));
        else if (cli_parse_double(v, 0, 1e9, &x) == 0)
            json_object_set_new(hp, nums[i][1], json_real(x));
        else
            return "--beta, --max-seq-len, --lora-rank, --lora-alpha, --lora-dropout, "
                   "--warmup-ratio and --weight-decay take numbers";
    }
    static const char *const flags[][2] = {{"--packing", "packing"},
                                           {"--train-on-inputs", "train_on_inputs"}};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        const char *v = cli_get(opts, flags[i][0]);
        if (!v)
            continue;
        if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0)
            return "--packing and --train-on-inputs take on or off";
        json_object_set_new(hp, flags[i][1], json_boolean(strcmp(v, "on") == 0));
    }
    const char *sch = cli_get(opts, "--lr-scheduler");
    if (sch)
        json_object_set_new(hp, "lr_scheduler", json_string(sch));
    const char *tm = cli_get(opts, "--lora-target-modules");
    if (tm) {
        json_t *a = json_array();
        char buf[256];
        snprintf(buf, sizeof buf, "%s", tm);
        for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
            json_array_append_new(a, json_string(t));
        json_object_set_new(hp, "lora_target_modules", a);
    }
    return NULL;
}

static bool one_of(const char *v, const char *a, const char *b)
{
    return strcmp(v, a) == 0 || strcmp(v, b) == 0;
}

/* Sets body[key] from a whole-number option; returns -1 on a bad value. */
static int whole(json_t *obj, const char *key, const char *v, long min, long max)
{
    long n;
    if (!v)
        return 0;
    if (cli_parse_long(v, min, max, &n) != 0)
        return -1;
    json_object_set_new(obj, key, json_integer(n));
    return 0;
}

int cli_job_body(struct cli_ctx *cx, const char *cmd, const struct cli_opt *opts, json_t **body)
{
    *body = NULL;
    const char *model = cli_get(opts, "--model");
    const char *file = cli_get(opts, "--file");
    const char *upload = cli_get(opts, "--upload");
    const char *precision = cli_get(opts, "--precision");
    const char *goal = cli_get(opts, "--goal");
    const char *adapter = cli_get(opts, "--adapter");
    if (!model || !*model)
        return cli_usage_error(cx, cmd, "--model is required");
    /* --file takes a file id or, for a newcomer's first try, a path: what is
     * not an id is uploaded (as --upload does). */
    if (file && !upload && strncmp(file, "file-", 5) != 0) {
        upload = file;
        file = NULL;
    }
    if ((file != NULL) == (upload != NULL))
        return cli_usage_error(cx, cmd, "give either --file FILE_ID or --upload PATH");
    if (precision && !one_of(precision, "16-bit", "4-bit"))
        return cli_usage_error(cx, cmd, "--precision must be 16-bit or 4-bit");
    if (goal && !one_of(goal, "lowest_cost", "fastest_finish") && strcmp(goal, "finish_by") != 0)
        return cli_usage_error(cx, cmd,
                               "--goal must be lowest_cost, fastest_finish or finish_by");
    /* The deadline: the server checks that it lies ahead (its 400 names
     * finish_by); here only that it reads as a time. */
    const char *finish_by = cli_get(opts, "--finish-by");
    long long deadline = 0;
    if (finish_by && cli_parse_time(finish_by, &deadline) != 0)
        return cli_usage_error(cx, cmd,
                               "--finish-by must be a time such as 2026-12-03T18:00:00Z (RFC "
                               "3339, UTC or with an offset) or Unix seconds");
    if (goal && strcmp(goal, "finish_by") == 0 && !finish_by)
        return cli_usage_error(cx, cmd, "--goal finish_by needs --finish-by TIME");
    if (finish_by && goal && strcmp(goal, "finish_by") != 0)
        return cli_usage_error(cx, cmd, "--finish-by is the deadline of --goal finish_by");
    if (adapter && !one_of(adapter, "lora", "full"))
        return cli_usage_error(cx, cmd, "--adapter must be lora or full");
    const char *mtype = cli_get(opts, "--method");
    if (mtype && !one_of(mtype, "supervised", "dpo"))
        return cli_usage_error(cx, cmd, "--method must be supervised or dpo");
    if (!mtype)
        mtype = "supervised";

    char ftbuf[256];
    int mrc = cli_model_arg(cx, cmd, model, ftbuf, sizeof ftbuf, &model);
    if (mrc != CLI_OK)
        return mrc;
    json_t *b = json_object();
    json_t *hp = json_object();
    json_object_set_new(b, "model", json_string(model));
    if (finish_by)
        json_object_set_new(b, "finish_by", json_integer((json_int_t)deadline));
    int bad = 0;
    const char *what = NULL;
    /* The server's limit (src/api/job_request.c): refused here, nothing sent. */
    if (whole(hp, "n_epochs", cli_get(opts, "--epochs"), 1, 50) != 0) {
        bad = 1;
        what = "--epochs must be a whole number from 1 to 50";
    } else if (whole(hp, "batch_size", cli_get(opts, "--batch-size"), 1, 4096) != 0) {
        bad = 1;
        what = "--batch-size must be a whole number from 1 to 4096";
    } else if (whole(b, "seed", cli_get(opts, "--seed"), 0, 2147483647L) != 0) {
        bad = 1;
        what = "--seed must be a whole number from 0 to 2147483647";
    } else if (whole(b, "max_steps", cli_get(opts, "--max-steps"), 1, 10000000L) != 0) {
        bad = 1;
        what = "--max-steps must be a positive whole number";
    }
    const char *lrm = cli_get(opts, "--learning-rate-multiplier");
    double x;
    if (!bad && lrm) {
        if (cli_parse_double(lrm, 1e-6, 1000, &x) != 0) {
            bad = 1;
            what = "--learning-rate-multiplier must be a positive number";
        } else {
            json_object_set_new(hp, "learning_rate_multiplier", json_real(x));
        }
    }
    if (!bad) {
        what = more_hyper(opts, hp);
        bad = what != NULL;
    }
    if (bad) {
        json_decref(b);
        json_decref(hp);
        return cli_usage_error(cx, cmd, what);
    }
    /* DPO's hyper-parameters live in method.dpo only (beta is not one of
     * the top-level, supervised ones). */
    bool dpo = strcmp(mtype, "dpo") == 0;
    if (json_object_size(hp) > 0 && !dpo)
        json_object_set(b, "hyperparameters", hp);
    json_t *method = json_pack("{s:s}", "type", mtype);
    if (json_object_size(hp) > 0)
        json_object_set_new(method, mtype, json_pack("{s:O}", "hyperparameters", hp));
    json_object_set_new(b, "method", method);
    json_decref(hp);
    static const char *const plain[][2] = {
        {"--name", "name"},       {"--precision", "precision"}, {"--goal", "goal"},
        {"--suffix", "suffix"},   {"--adapter", "adapter"},
        {"--validation-file", "validation_file"},
    };
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        const char *v = cli_get(opts, plain[i][0]);
        if (v)
            json_object_set_new(b, plain[i][1], json_string(v));
    }
    if (upload) {
        struct cli_answer a;
        char err[300];
        if (cli_upload(&cx->conn, upload, "fine-tune", &a, err, sizeof err) != 0) {
            fprintf(cx->err, "alallo: %s\n", err);
            json_decref(b);
            return CLI_FAILED;
        }
        const char *id = json_string_value(json_object_get(a.json, "id"));
        if (a.status >= 300 || !id) {
            char m[400];
            fprintf(cx->err, "alallo: %s\n", cli_answer_error(&a, m, sizeof m));
            cli_answer_free(&a);
            json_decref(b);
            return CLI_FAILED;
        }
        fprintf(cx->err, "uploaded %s as %s\n", upload, id);
        json_object_set_new(b, "training_file", json_string(id));
        cli_answer_free(&a);
    } else {
        json_object_set_new(b, "training_file", json_string(file));
    }
    *body = b;
    return CLI_OK;
}

/* The job id as a safe path segment, or NULL after a usage error. */
static const char *job_path(struct cli_ctx *cx, const char *cmd, const char *id, const char *tail,
                            char *buf, size_t cap)
{
    if (!id || !*id) {
        cli_usage_error(cx, cmd, "a job ID is needed");
        return NULL;
    }
    snprintf(buf, cap, "/v1/fine_tuning/jobs/");
    if (cli_url_escape(buf, cap, id) != 0 || strlen(buf) + strlen(tail) + 1 > cap) {
        cli_usage_error(cx, cmd, "job ID too long");
        return NULL;
    }
    strcat(buf, tail);
    return buf;
}

static int jobs_list(struct cli_ctx *cx, int argc, char **argv)
{
    struct cli_opt opts[] = {
        {"--limit", true, NULL}, {"--after", true, NULL}, {"--all", false, NULL}, {NULL, 0, 0}};
    struct cli_args args;
    char err[300];
    if (cli_parse(argc, argv, opts, &args, err, sizeof err) != 0 || args.npos > 0)
        return cli_usage_error(cx, "jobs list", args.npos > 0 ? "unexpected argument" : err);
    long limit = 20;
    const char *lv = cli_get(opts, "--limit");
    if (lv && cli_parse_long(lv, 1, 100, &limit) != 0)
        return cli_usage_error(cx, "jobs list", "--limit must be from 1 to 100");
    bool all = cli_get(opts, "--all") != NULL;
    if (all && !lv)
        limit = 100;
    char after[128] = "";
    if (cli_get(opts, "--after"))
        snprintf(after, sizeof after, "%s", cli_get(opts, "--after"));
    json_t *rows = json_array();
    int rc = CLI_OK;
    bool more = false;
    /* --all follows has_more up to 2,000 jobs, as the dashboard does. */
    for (int page = 0; page < 20; page++) {
        char path[400];
        snprintf(path, sizeof path, "/v1/fine_tuning/jobs?limit=%ld", limit);
        if (after[0]) {
            strcat(path, "&after=");
            if (cli_url_escape(path, sizeof path, after) != 0) {
                rc = cli_usage_error(cx, "jobs list", "--after too long");
                break;
            }
        }
        struct cli_answer a;
        rc = cli_do(cx, "GET", path, NULL, &a);
        if (rc != CLI_OK)
            break;
        if (args.json && !all) {
            cli_print_raw(cx, &a);
            cli_answer_free(&a);
            json_decref(rows);
            return CLI_OK;
        }
        json_t *data = json_object_get(a.json, "data");
        json_array_extend(rows, data);
        more = json_is_true(json_object_get(a.json, "has_more"));
        const char *last = json_string_value(
            json_object_get(json_array_get(data, json_array_size(data) - 1), "id"));
        snprintf(after, sizeof after, "%s", last ? last : "");
        cli_answer_free(&a);
        if (!all || !more || !after[0])
            break;
    }
    if (rc == CLI_OK) {
        json_t *list = json_pack("{s:s,s:O,s:b}", "object", "list", "data", rows, "has_more",
                                 more);
        if (args.json) {
            char *text = json_dumps(list, JSON_COMPACT);
            fprintf(cx->out, "%s\n", text ? text : "");
            free(text);
        } else {
            cli_print_jobs(cx->out, list);
            if (more && after[0])
                fprintf(cx->out, "(more: alallo jobs --after %s)\n", after);
        }
        json_decref(list);
    }
    json_decref(rows);
    return rc;
}

static int jobs_show(struct cli_ctx *cx, int argc, char **argv)
{
    struct cli_opt opts[] = {{NULL, 0, 0}};
    struct cli_args args;
    char err[300], path[400], cpath[400];
    if (cli_parse(argc, argv, opts, &args, err, sizeof err) != 0 || args.npos != 1)
        return cli_usage_error(cx, "jobs show", args.npos != 1 ? "give one job ID" : err);
    if (!job_path(cx, "jobs show", args.pos[0], "", path, sizeof path) ||
        !job_path(cx, "jobs show", args.pos[0], "/checkpoints", cpath, sizeof cpath))
        return CLI_USAGE;
    struct cli_answer a;
    int rc = cli_do(cx, "GET", path, NULL, &a);
    if (rc != CLI_OK)
        return rc;
    if (args.json) {
        cli_print_raw(cx, &a);
    } else {
        /* Checkpoints are a second call; without them the job still shows. */
        struct cli_answer c;
        int crc = cli_call(&cx->conn, "GET", cpath, NULL, &c, err, sizeof err);
        cli_print_job(cx->out, a.json, crc == 0 && c.status == 200 ? c.json : NULL);
        if (crc == 0)
            cli_answer_free(&c);
    }
    cli_answer_free(&a);
    return CLI_OK;
}

static int jobs_create(struct cli_ctx *cx, int argc, char **argv, bool estimate)
{
    struct cli_opt opts[CLI_JOB_OPTS_COUNT];
    memcpy(opts, cli_job_opts, sizeof opts);
    struct cli_args args;
    char err[300];
    const char *cmd = estimate ? "estimate" : "jobs create";
    if (cli_parse(argc, argv, opts, &args, err, sizeof err) != 0 || args.npos > 0)
        return cli_usage_error(cx, cmd, args.npos > 0 ? "unexpected argument" : err);
    json_t *body;
    int rc = cli_job_body(cx, cmd, opts, &body);
    if (rc != CLI_OK)
        return rc;
    struct cli_answer a;
    rc = cli_do(cx, "POST", estimate ? "/v1/fine_tuning/estimates" : "/v1/fine_tuning/jobs",
                body, &a);
    json_decref(body);
    if (rc != CLI_OK)
        return rc;
    if (args.json) {
        cli_print_raw(cx, &a);
    } else if (estimate) {
        cli_print_estimate(cx->out, a.json);
    } else {
        const char *id = json_string_value(json_object_get(a.json, "id"));
        fprintf(cx->out, "%s\n", id ? id : "?");
    }
    /* A job no capacity can ever run is created failed (SPEC §2): the id is
     * printed, but the command did not do what was asked. */
    const char *status = json_string_value(json_object_get(a.json, "status"));
    if (!estimate && status && strcmp(status, "failed") == 0) {
        const char *msg = json_string_value(json_object_get(a.json, "message"));
        char safe[600];
        fprintf(cx->err, "alallo: the job failed: %s\n",
                cli_safe_text(safe, sizeof safe, msg && *msg ? msg : "no reason given"));
        rc = CLI_FAILED;
    }
    cli_answer_free(&a);
    return rc;
}

static int jobs_cancel(struct cli_ctx *cx, int argc, char **argv)
{
    struct cli_opt opts[] = {{NULL, 0, 0}};
    struct cli_args args;
    char err[300], path[400];
    if (cli_parse(argc, argv, opts, &args, err, sizeof err) != 0 || args.npos != 1)
        return cli_usage_error(cx, "jobs cancel", args.npos != 1 ? "give one job ID" : err);
    if (!job_path(cx, "jobs cancel", args.pos[0], "/cancel", path, sizeof path))
        return CLI_USAGE;
    struct cli_answer a;
    int rc = cli_do(cx, "POST", path, NULL, &a);
    if (rc != CLI_OK)
        return rc;
    if (args.json) {
        cli_print_raw(cx, &a);
    } else {
        const char *status = json_string_value(json_object_get(a.json, "status"));
        fprintf(cx->out, "%s: %s\n", args.pos[0], status ? status : "cancelling");
    }
    cli_answer_free(&a);
    return CLI_OK;
}

/* Prints a log answer that is not a stream: plain text as it is, or JSON
 * with the lines in `data`/`lines` (strings or {line}) or `text`. */
static void print_log(struct cli_ctx *cx, const struct cli_answer *a)
{
    if (!a->json) {
        cli_write_safe(cx->out, a->body, a->len);
        if (a->len > 0 && a->body[a->len - 1] != '\n')
            fputc('\n', cx->out);
        return;
    }
    const json_t *lines = json_object_get(a->json, "data");
    if (!lines)
        lines = json_object_get(a->json, "lines");
    const char *text = json_string_value(json_object_get(a->json, "text"));
    if (json_is_array(lines)) {
        size_t i;
        const json_t *l;
        json_array_foreach(lines, i, l) {
            const char *s = json_string_value(l);
            if (!s)
                s = json_string_value(json_object_get(l, "line"));
            if (!s)
                s = json_string_value(json_object_get(l, "message"));
            if (s) {
                cli_write_safe(cx->out, s, strlen(s));
                fputc('\n', cx->out);
            }
        }
        if (json_array_size(lines) == 0) {
            const char *empty = json_string_value(json_object_get(a->json, "message"));
            fprintf(cx->out, "%s\n", empty ? empty : "No log yet. It appears once training starts.");
        }
    } else if (text) {
        cli_write_safe(cx->out, text, strlen(text));
        if (!text[0] || text[strlen(text) - 1] != '\n')
            fputc('\n', cx->out);
    } else {
        cli_print_raw(cx, a);
    }
}

static int jobs_log(struct cli_ctx *cx, int argc, char **argv)
{
    struct cli_opt opts[] = {{"--follow", false, NULL}, {NULL, 0, 0}};
    struct cli_args args;
    char err[300], path[400];
    if (cli_parse(argc, argv, opts, &args, err, sizeof err) != 0 || args.npos != 1)
        return cli_usage_error(cx, "jobs log", args.npos != 1 ? "give one job ID" : err);
    bool follow = cli_get(opts, "--follow") != NULL;
    if (!job_path(cx, "jobs log", args.pos[0], follow ? "/log?follow=1" : "/log", path,
                  sizeof path))
        return CLI_USAGE;
    if (!follow) {
        struct cli_answer a;
        int rc = cli_do(cx, "GET", path, NULL, &a);
        if (rc != CLI_OK)
            return rc;
        if (args.json)
            cli_print_raw(cx, &a);
        else
            print_log(cx, &a);
        cli_answer_free(&a);
        return CLI_OK;
    }
    /* Streamed: lines appear as the server sends them, until the run ends. */
    struct cli_answer a;
    if (cli_get_to_file(&cx->conn, path, cx->out, &a, err, sizeof err) != 0) {
        fprintf(cx->err, "alallo: %s\n", err);
        cli_answer_free(&a);
        return CLI_FAILED;
    }
    int rc = CLI_OK;
    if (a.status >= 300) {
        char m[400];
        fprintf(cx->err, "alallo: %s\n", cli_answer_error(&a, m, sizeof m));
        rc = CLI_FAILED;
    }
    cli_answer_free(&a);
    return rc;
}

int cli_jobs(struct cli_ctx *cx, int argc, char **argv)
{
    const char *sub = argc > 0 && strncmp(argv[0], "--", 2) != 0 ? argv[0] : "list";
    int skip = argc > 0 && strncmp(argv[0], "--", 2) != 0 ? 1 : 0;
    if (strcmp(sub, "list") == 0)
        return jobs_list(cx, argc - skip, argv + skip);
    if (strcmp(sub, "show") == 0)
        return jobs_show(cx, argc - 1, argv + 1);
    if (strcmp(sub, "create") == 0)
        return jobs_create(cx, argc - 1, argv + 1, false);
    if (strcmp(sub, "cancel") == 0)
        return jobs_cancel(cx, argc - 1, argv + 1);
    if (strcmp(sub, "log") == 0)
        return jobs_log(cx, argc - 1, argv + 1);
    return cli_usage_error(cx, "jobs", "expected list, show, create, cancel or log");
}

int cli_estimate(struct cli_ctx *cx, int argc, char **argv)
{
    return jobs_create(cx, argc, argv, true);
}
