/* cli_cmds.c - `alallo files|models|workers|ledger|generate|export`; the
 * call-and-check helper every client command uses is cli.c. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_format.h"
#include "cli/cli_tar.h"
#include "core/fs.h"

/* Runs GET `path` and prints it with `print`, or raw with --json. Takes no
 * options besides --json and no arguments. */
static int simple_list(struct cli_ctx *cx, const char *cmd, int argc, char **argv,
                       const char *path, void (*print)(FILE *, const json_t *))
{
    struct cli_opt opts[] = {{NULL, 0, 0}};
    struct cli_args args;
    char err[300];
    if (cli_parse(argc, argv, opts, &args, err, sizeof err) != 0 || args.npos > 0)
        return cli_usage_error(cx, cmd, args.npos > 0 ? "unexpected argument" : err);
    struct cli_answer a;
    int rc = cli_do(cx, "GET", path, NULL, &a);
    if (rc != CLI_OK)
        return rc;
    if (args.json)
        cli_print_raw(cx, &a);
    else
        print(cx->out, a.json);
    cli_answer_free(&a);
    return CLI_OK;
}

static int files_upload(struct cli_ctx *cx, int argc, char **argv)
{
    struct cli_opt opts[] = {{"--purpose", true, NULL}, {NULL, 0, 0}};
    struct cli_args args;
    char err[400];
    if (cli_parse(argc, argv, opts, &args, err, sizeof err) != 0 || args.npos != 1)
        return cli_usage_error(cx, "files upload", args.npos != 1 ? "give one FILE" : err);
    const char *purpose = cli_get(opts, "--purpose");
    if (access(args.pos[0], R_OK) != 0) {
        fprintf(cx->err, "alallo: cannot read %s: %s\n", args.pos[0], strerror(errno));
        return CLI_FAILED;
    }
    struct cli_answer a;
    if (cli_upload(&cx->conn, args.pos[0], purpose ? purpose : "fine-tune", &a, err,
                   sizeof err) != 0) {
        fprintf(cx->err, "alallo: %s\n", err);
        cli_answer_free(&a);
        return CLI_FAILED;
    }
    int rc = CLI_OK;
    if (a.status < 200 || a.status >= 300) {
        /* A bad line is named by the server: its words, as they are. */
        char m[600];
        fprintf(cx->err, "alallo: %s\n", cli_answer_error(&a, m, sizeof m));
        rc = CLI_FAILED;
    } else if (args.json) {
        cli_print_raw(cx, &a);
    } else {
        const char *id = json_string_value(json_object_get(a.json, "id"));
        fprintf(cx->out, "%s\n", id ? id : "?");
    }
    cli_answer_free(&a);
    return rc;
}

static int files_delete(struct cli_ctx *cx, int argc, char **argv)
{
    struct cli_opt opts[] = {{NULL, 0, 0}};
    struct cli_args args;
    char err[300], path[400] = "/v1/files/";
    if (cli_parse(argc, argv, opts, &args, err, sizeof err) != 0 || args.npos != 1)
        return cli_usage_error(cx, "files delete", args.npos != 1 ? "give one FILE_ID" : err);
    if (cli_url_escape(path, sizeof path, args.pos[0]) != 0)
        return cli_usage_error(cx, "files delete", "FILE_ID too long");
    struct cli_answer a;
    int rc = cli_do(cx, "DELETE", path, NULL, &a);
    if (rc != CLI_OK)
        return rc;
    if (args.json)
        cli_print_raw(cx, &a);
    else
        fprintf(cx->out, "%s: deleted\n", args.pos[0]);
    cli_answer_free(&a);
    return CLI_OK;
}

int cli_files(struct cli_ctx *cx, int argc, char **argv)
{
    const char *sub = argc > 0 && strncmp(argv[0], "--", 2) != 0 ? argv[0] : "list";
    int skip = argc > 0 && strncmp(argv[0], "--", 2) != 0 ? 1 : 0;
    if (strcmp(sub, "upload") == 0)
        return files_upload(cx, argc - 1, argv + 1);
    if (strcmp(sub, "list") == 0)
        return simple_list(cx, "files list", argc - skip, argv + skip, "/v1/files",
                           cli_print_files);
    if (strcmp(sub, "delete") == 0)
        return files_delete(cx, argc - 1, argv + 1);
    return cli_usage_error(cx, "files", "expected list, upload FILE or delete FILE_ID");
}

int cli_models(struct cli_ctx *cx, int argc, char **argv)
{
    return simple_list(cx, "models", argc, argv, "/v1/models", cli_print_models);
}

int cli_ledger(struct cli_ctx *cx, int argc, char **argv)
{
    return simple_list(cx, "ledger", argc, argv, "/v1/billing/ledger", cli_print_ledger);
}

int cli_workers(struct cli_ctx *cx, int argc, char **argv)
{
    const char *sub = argc > 0 && strncmp(argv[0], "--", 2) != 0 ? argv[0] : "list";
    int skip = argc > 0 && strncmp(argv[0], "--", 2) != 0 ? 1 : 0;
    if (strcmp(sub, "list") == 0)
        return simple_list(cx, "workers", argc - skip, argv + skip, "/v1/workers",
                           cli_print_workers);
    if (strcmp(sub, "drain") != 0)
        return cli_usage_error(cx, "workers", "expected list or drain NAME");
    struct cli_opt opts[] = {{NULL, 0, 0}};
    struct cli_args args;
    char err[300], path[300] = "/v1/workers/";
    if (cli_parse(argc - 1, argv + 1, opts, &args, err, sizeof err) != 0 || args.npos != 1)
        return cli_usage_error(cx, "workers drain", args.npos != 1 ? "give one NAME" : err);
    if (cli_url_escape(path, sizeof path, args.pos[0]) != 0 ||
        strlen(path) + sizeof "/drain" > sizeof path)
        return cli_usage_error(cx, "workers drain", "NAME too long");
    strcat(path, "/drain");
    struct cli_answer a;
    int rc = cli_do(cx, "POST", path, NULL, &a);
    if (rc != CLI_OK)
        return rc;
    if (args.json) {
        cli_print_raw(cx, &a);
    } else {
        const char *state = json_string_value(json_object_get(a.json, "state"));
        fprintf(cx->out, "%s: %s\n", args.pos[0], state ? state : "draining");
    }
    cli_answer_free(&a);
    return CLI_OK;
}

int cli_generate(struct cli_ctx *cx, int argc, char **argv)
{
    struct cli_opt opts[] = {{"--model", true, NULL},      {"--prompt", true, NULL},
                             {"--max-tokens", true, NULL}, {"--temperature", true, NULL},
                             {"--seed", true, NULL},       {"--top-p", true, NULL},
                             {"--stop", true, NULL},       {NULL, 0, 0}};
    struct cli_args args;
    char err[300];
    if (cli_parse(argc, argv, opts, &args, err, sizeof err) != 0 || args.npos > 0)
        return cli_usage_error(cx, "generate", args.npos > 0 ? "unexpected argument" : err);
    const char *model = cli_get(opts, "--model");
    const char *prompt = cli_get(opts, "--prompt");
    if (!model || !prompt)
        return cli_usage_error(cx, "generate", "--model and --prompt are required");
    char ftbuf[256];
    int mrc = cli_model_arg(cx, "generate", model, ftbuf, sizeof ftbuf, &model);
    if (mrc != CLI_OK)
        return mrc;
    json_t *body = json_pack("{s:s,s:s}", "model", model, "prompt", prompt);
    long n;
    double t;
    const char *v = cli_get(opts, "--max-tokens");
    if (v) {
        if (cli_parse_long(v, 1, 100000, &n) != 0) {
            json_decref(body);
            return cli_usage_error(cx, "generate", "--max-tokens must be a positive whole number");
        }
        json_object_set_new(body, "max_tokens", json_integer(n));
    }
    v = cli_get(opts, "--temperature");
    if (v) {
        if (cli_parse_double(v, 0, 10, &t) != 0) {
            json_decref(body);
            return cli_usage_error(cx, "generate", "--temperature must be from 0 to 10");
        }
        json_object_set_new(body, "temperature", json_real(t));
    }
    v = cli_get(opts, "--seed");
    if (v) {
        if (cli_parse_long(v, 0, 2147483647L, &n) != 0) {
            json_decref(body);
            return cli_usage_error(cx, "generate", "--seed must be a whole number");
        }
        json_object_set_new(body, "seed", json_integer(n));
    }
    v = cli_get(opts, "--top-p");
    if (v) {
        if (cli_parse_double(v, 0, 1, &t) != 0) {
            json_decref(body);
            return cli_usage_error(cx, "generate", "--top-p must be from 0 to 1");
        }
        json_object_set_new(body, "top_p", json_real(t));
    }
    v = cli_get(opts, "--stop"); /* the server checks its length, as any client's */
    json_t *stop = v ? json_string(v) : NULL;
    if (v && !stop) {
        json_decref(body);
        return cli_usage_error(cx, "generate", "--stop must be UTF-8 text");
    }
    if (stop)
        json_object_set_new(body, "stop", stop);
    struct cli_answer a;
    int rc = cli_do(cx, "POST", "/v1/completions", body, &a);
    json_decref(body);
    if (rc != CLI_OK)
        return rc;
    if (args.json) {
        cli_print_raw(cx, &a);
    } else {
        const json_t *choice = json_array_get(json_object_get(a.json, "choices"), 0);
        const char *text = json_string_value(json_object_get(choice, "text"));
        fprintf(cx->out, "%s\n", text ? text : "");
    }
    cli_answer_free(&a);
    return CLI_OK;
}

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), t = strlen(tail);
    return n >= t && strcmp(s + n - t, tail) == 0;
}

int cli_export(struct cli_ctx *cx, int argc, char **argv)
{
    struct cli_opt opts[] = {
        {"--format", true, NULL}, {"--out", true, NULL}, {"--dtype", true, NULL}, {NULL, 0, 0}};
    struct cli_args args;
    char err[600];
    if (cli_parse(argc, argv, opts, &args, err, sizeof err) != 0 || args.npos != 1)
        return cli_usage_error(cx, "export", args.npos != 1 ? "give one model ID" : err);
    const char *format = cli_get(opts, "--format");
    const char *out = cli_get(opts, "--out");
    const char *dtype = cli_get(opts, "--dtype");
    if (!format || (strcmp(format, "hf") != 0 && strcmp(format, "peft") != 0 &&
                    strcmp(format, "gguf") != 0 && strcmp(format, "ollama") != 0))
        return cli_usage_error(cx, "export", "--format must be hf, peft, gguf or ollama");
    if (dtype && (strlen(dtype) > 8 || strspn(dtype, "abcdefghijklmnopqrstuvwxyz0123456789_") !=
                                           strlen(dtype)))
        return cli_usage_error(cx, "export", "--dtype must be f16, bf16, f32, q8_0, q4_0 or q4_k_m");
    if (!out || !*out)
        return cli_usage_error(cx, "export", "--out PATH is required");
    char ftbuf[256];
    const char *model;
    int mrc = cli_model_arg(cx, "export", args.pos[0], ftbuf, sizeof ftbuf, &model);
    if (mrc != CLI_OK)
        return mrc;
    char path[600] = "/v1/models/";
    if (cli_url_escape(path, sizeof path, model) != 0 ||
        strlen(path) + 48 > sizeof path)
        return cli_usage_error(cx, "export", "model ID too long");
    strcat(path, "/export?format=");
    strcat(path, format);
    if (dtype) {
        strcat(path, "&dtype=");
        strcat(path, dtype);
    }
    struct stat st;
    if (stat(out, &st) == 0) {
        fprintf(cx->err, "alallo: %s already exists\n", out);
        return CLI_FAILED;
    }
    /* Written beside the target and renamed when complete, so that a broken
     * download never looks like a finished one. */
    char part[1100], unpacked[1100];
    if (snprintf(part, sizeof part, "%s.part", out) >= (int)sizeof part ||
        snprintf(unpacked, sizeof unpacked, "%s.part.d", out) >= (int)sizeof unpacked)
        return cli_usage_error(cx, "export", "--out PATH too long");
    FILE *f = fopen(part, "wb");
    if (!f) {
        fprintf(cx->err, "alallo: cannot create %s: %s\n", part, strerror(errno));
        return CLI_FAILED;
    }
    struct cli_answer a;
    int rc = cli_get_to_file(&cx->conn, path, f, &a, err, sizeof err);
    int closed = fclose(f);
    if (rc != 0) {
        fprintf(cx->err, "alallo: %s\n", err);
        cli_answer_free(&a);
        unlink(part);
        return CLI_FAILED;
    }
    if (a.status < 200 || a.status >= 300) {
        char m[600];
        fprintf(cx->err, "alallo: %s\n", cli_answer_error(&a, m, sizeof m));
        cli_answer_free(&a);
        unlink(part);
        return CLI_FAILED;
    }
    /* A folder (hf, peft) comes as a tar archive: unpacked into PATH unless
     * PATH asks for the archive itself (*.tar). */
    bool folder = strncmp(a.content_type, "application/x-tar", 17) == 0 && !ends_with(out, ".tar");
    cli_answer_free(&a);
    if (closed != 0) {
        fprintf(cx->err, "alallo: cannot write %s: %s\n", part, strerror(errno));
        unlink(part);
        return CLI_FAILED;
    }
    if (folder) {
        fs_remove_tree(unpacked);
        if (cli_untar(part, unpacked, err, sizeof err) != 0) {
            fprintf(cx->err, "alallo: %s\n", err);
            fs_remove_tree(unpacked);
            unlink(part);
            return CLI_FAILED;
        }
        unlink(part);
    }
    if (rename(folder ? unpacked : part, out) != 0) {
        fprintf(cx->err, "alallo: cannot write %s: %s\n", out, strerror(errno));
        if (folder)
            fs_remove_tree(unpacked);
        else
            unlink(part);
        return CLI_FAILED;
    }
    if (args.json) {
        json_t *o = json_pack("{s:s,s:s,s:s}", "path", out, "format", format, "kind",
                              folder ? "folder" : "file");
        char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
        fprintf(cx->out, "%s\n", text ? text : "{}");
        free(text);
        json_decref(o);
    } else {
        fprintf(cx->out, "%s\n", out);
    }
    return CLI_OK;
}
