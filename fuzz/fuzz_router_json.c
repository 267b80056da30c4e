/* fuzz_router_json.c - libFuzzer driver for the API as the socket layer
 * calls it: api_dispatch() (src/api/router.c) with a request built from the
 * input, so the route table, authentication, every handler and the JSON
 * bodies they read (job creation and estimates above all, job_request.c)
 * meet arbitrary requests against a real store.
 *
 * Input, text in the shape of an HTTP request:
 *
 *     POST /v1/fine_tuning/jobs?limit=2          <- METHOD SP TARGET
 *     Authorization: Bearer $OTHER               <- optional headers
 *     Content-Type: application/json
 *                                                <- empty line
 *     {"model":"tiny","training_file":"$FILE"}   <- body
 *
 * Before parsing, placeholders become real values of the fixture, since a
 * fuzzer cannot guess random ids and keys: $KEY (the operator's key,
 * used when no Authorization header is given), $OTHER (a second account's
 * key), $TOKEN (the worker token), $FILE/$OFILE (a data set of each
 * account), $JOB/$OJOB (a job of each), $ATTEMPT (a running attempt of
 * $JOB on worker w1) and $MODEL (the base model's id). The target is
 * split and decoded as libmicrohttpd and the server do it: the path and
 * each query key and value by the server's own decoder,
 * http_percent_decode() (src/api/http_mhd.c), the query's '+' turned into
 * spaces first; a request the socket layer refuses before dispatch (a
 * path holding "%00" or too long, a query past the caps) is dropped, and a
 * header value too long reads as absent, as there.
 *
 * The fixture lives in /dev/shm (or $TMPDIR): a data folder made by the
 * same set-up as `alallo serve`, a base model folder "tiny", and a fake
 * `alallo` (a shell script) for the generate and export children. State
 * grows as inputs create jobs and files, so the whole fixture is rebuilt
 * every RESET_EVERY inputs; a crash therefore may need the inputs before it,
 * but every crash seen so far replays alone.
 *
 * Properties, per request: no crash, leak or undefined behaviour; a status
 * in 200..599; JSON answers parse and errors have the documented shape
 * {"error":{"code","message","param"}}; and no 500, which the API keeps for
 * real internal failures (none can happen here: the disk is memory and the
 * children succeed); and no JSON answer to one account names the other's
 * files or jobs as objects (check_isolation()).
 *
 * FUZZ_ECHO=1 in the environment prints each answer, to check what a seed
 * reaches: FUZZ_ECHO=1 build-fuzz/fuzz_router_json fuzz/corpus/fuzz_router_json/seed-x
 */
#include <ftw.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/auth.h"
#include "control/control.h"
#include "api/http.h"
#include "api/http_mhd.h"
#include "api/router.h"
#include "api/server.h"
#include "control/service.h"
#include "control/setup.h"
#include "core/ids.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define RESET_EVERY 4000
#define MAX_INPUT (64 * 1024)
#define STREAM_READ_MAX (256 * 1024)

struct fixture {
    char root[200];
    struct api_server srv;
    struct control ctl; /* srv.ctl */
    char key[KEYS_MAX], other_key[KEYS_MAX];
    char file[IDS_MAX], ofile[IDS_MAX], job[IDS_MAX], ojob[IDS_MAX], attempt[IDS_MAX];
    long runs;
    bool up;
};

static struct fixture fx;

/* ---- files -------------------------------------------------------------- */

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void remove_tree(const char *path)
{
    nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void write_file(const char *dir, const char *name, const char *text, mode_t mode)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    FUZZ_CHECK(f != NULL);
    fputs(text, f);
    fclose(f);
    chmod(path, mode);
}

/* The stand-in for `alallo generate --json` and `alallo export`: answers as
 * the real commands do, instantly. */
static const char fake_alallo[] =
    "#!/bin/sh\n"
    "cmd=$1; shift\n"
    "out=; fmt=\n"
    "while [ $# -gt 0 ]; do\n"
    "  case $1 in --out) out=$2; shift;; --format) fmt=$2; shift;; esac; shift\n"
    "done\n"
    "case $cmd in\n"
    "generate) printf '{\"text\":\" fake\",\"finish_reason\":\"length\","
    "\"prompt_tokens\":2,\"completion_tokens\":1}\\n';;\n"
    "export) if [ \"$fmt\" = gguf ]; then printf GGUF > \"$out\";\n"
    "        else mkdir -p \"$out\" && printf '{}' > \"$out/config.json\"; fi;;\n"
    "*) exit 1;;\n"
    "esac\n";

static const char tiny_config[] =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"intermediate_size\":128,"
    "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":4,"
    "\"vocab_size\":300,\"max_position_embeddings\":256,\"rms_norm_eps\":1e-5,"
    "\"rope_theta\":10000.0,\"tie_word_embeddings\":true}";

/* ---- one request -------------------------------------------------------- */

/* Replaces the fixture's placeholders in in[0, n) into a malloc'd,
 * NUL-terminated copy; *out_n is its length. */
static char *expand(const char *in, size_t n, size_t *out_n)
{
    const struct {
        const char *name, *value;
    } subst[] = {
        {"$KEY", fx.key},         {"$OTHER", fx.other_key}, {"$TOKEN", fx.srv.worker_token},
        {"$OFILE", fx.ofile},     {"$FILE", fx.file},       {"$OJOB", fx.ojob},
        {"$JOB", fx.job},         {"$ATTEMPT", fx.attempt}, {"$MODEL", "tiny"},
    };
    size_t nsub = sizeof subst / sizeof subst[0], ratio = 1, o = 0;
    for (size_t k = 0; k < nsub; k++) {
        size_t r = strlen(subst[k].value) / strlen(subst[k].name) + 1;
        ratio = r > ratio ? r : ratio;
    }
    char *out = malloc(n * ratio + 1);
    FUZZ_CHECK(out != NULL);
    for (size_t i = 0; i < n;) {
        size_t k = 0;
        for (; in[i] == '$' && k < nsub; k++) {
            size_t l = strlen(subst[k].name);
            if (n - i >= l && memcmp(in + i, subst[k].name, l) == 0)
                break;
        }
        if (in[i] == '$' && k < nsub) {
            size_t vl = strlen(subst[k].value);
            memcpy(out + o, subst[k].value, vl);
            o += vl;
            i += strlen(subst[k].name);
        } else {
            out[o++] = in[i++];
        }
    }
    out[o] = '\0';
    *out_n = o;
    return out;
}

/* Copies a header value as the socket layer does: too long reads as absent. */
static void header_value(char *dst, size_t cap, const char *v)
{
    while (*v == ' ' || *v == '\t')
        v++;
    size_t n = strlen(v);
    if (n && v[n - 1] == '\r')
        n--;
    if (n >= cap) {
        dst[0] = '\0';
        return;
    }
    memcpy(dst, v, n);
    dst[n] = '\0';
}

/* Fills req from text[0, n) (NUL-terminated). False when the socket layer
 * would have refused the request before dispatch. */
static bool build_request(char *text, size_t n, struct http_request *req)
{
    char *eol = strchr(text, '\n');
    if (!eol)
        eol = text + n;
    char *line_end = eol;
    if (line_end > text && line_end[-1] == '\r')
        line_end--;
    char saved = *line_end;
    *line_end = '\0';
    char *sp = strchr(text, ' ');
    if (!sp || (size_t)(sp - text) >= sizeof req->method || sp == text)
        return false;
    memcpy(req->method, text, (size_t)(sp - text));
    req->method[sp - text] = '\0';
    char *target = sp + 1;
    char *q = strchr(target, '?');
    if (q)
        *q++ = '\0';
    size_t decoded = http_percent_decode(target);
    FUZZ_CHECK(decoded == strlen(target));
    if (strlen(target) >= sizeof req->path || strstr(target, "%00") || target[0] != '/')
        return false;
    strcpy(req->path, target);
    /* Query: k=v&k2=v2, each part percent-decoded ('+' is a space there). */
    for (char *part = q; part && *part;) {
        char *amp = strchr(part, '&');
        if (amp)
            *amp = '\0';
        for (char *p = part; *p; p++)
            if (*p == '+')
                *p = ' ';
        char *eq = strchr(part, '=');
        if (eq)
            *eq++ = '\0';
        http_percent_decode(part);
        if (eq)
            http_percent_decode(eq);
        if (!http_query_add(req, part, eq))
            return false; /* too many or too long: the server answers 400 */
        part = amp ? amp + 1 : NULL;
    }
    *line_end = saved;

    bool have_auth = false;
    char *p = *eol ? eol + 1 : eol;
    while (*p) {
        char *e = strchr(p, '\n');
        char *next = e ? e + 1 : p + strlen(p);
        if (e)
            *e = '\0';
        if (p[0] == '\0' || (p[0] == '\r' && p[1] == '\0')) {
            p = next;
            break;
        }
        if (strncasecmp(p, "Authorization:", 14) == 0) {
            header_value(req->authorization, sizeof req->authorization, p + 14);
            have_auth = true;
        } else if (strncasecmp(p, "Content-Type:", 13) == 0) {
            header_value(req->content_type, sizeof req->content_type, p + 13);
        }
        p = next;
    }
    if (!have_auth)
        snprintf(req->authorization, sizeof req->authorization, "Bearer %s", fx.key);
    req->body = p;
    req->body_len = (size_t)(text + n - p);
    return (int64_t)req->body_len <= router_body_cap(&fx.srv, req->method, req->path);
}

/* True when `id` occurs in the request the caller sent (path, query or
 * body): an answer may echo what it was asked about. */
static bool request_names(const struct http_request *req, const char *id)
{
    if (strstr(req->path, id))
        return true;
    for (int i = 0; i < req->n_query; i++)
        if (strstr(req->query[i].value, id))
            return true;
    return req->body && memmem(req->body, req->body_len, id, strlen(id)) != NULL;
}

/* True when the JSON value v holds, under a key that names an object
 * (id, training_file, ...), the string `id`. User text (a job's name,
 * metadata, a log line) may quote any id and is not looked at. */
static bool names_object(json_t *v, const char *id)
{
    static const char *const keys[] = {"id",      "training_file", "validation_file",
                                       "job_id",  "file_id",       "first_id",
                                       "last_id", "fine_tuned_model"};
    if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) if (names_object(e, id)) return true;
        return false;
    }
    if (!json_is_object(v))
        return false;
    const char *k;
    json_t *e;
    json_object_foreach(v, k, e)
    {
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
            if (strcmp(k, keys[i]) == 0 && json_is_string(e) &&
                strcmp(json_string_value(e), id) == 0)
                return true;
        if (names_object(e, id))
            return true;
    }
    return false;
}

/* Account isolation (SPEC 4: an account never sees another's files or
 * jobs): a JSON answer to one account's key must not name the other
 * account's file or job as an object, unless the request itself named it.
 * (This covers /v1/workers too, where a worker runs $JOB whoever asks.) */
static void check_isolation(const struct http_request *req, json_t *answer)
{
    char mine[KEYS_MAX + 8], theirs[KEYS_MAX + 8];
    snprintf(mine, sizeof mine, "Bearer %s", fx.key);
    snprintf(theirs, sizeof theirs, "Bearer %s", fx.other_key);
    const char *hidden[2];
    if (strcmp(req->authorization, mine) == 0) {
        hidden[0] = fx.ofile, hidden[1] = fx.ojob;
    } else if (strcmp(req->authorization, theirs) == 0) {
        hidden[0] = fx.file, hidden[1] = fx.job;
    } else {
        return;
    }
    for (int i = 0; i < 2; i++)
        if (names_object(answer, hidden[i]) && !request_names(req, hidden[i])) {
            fprintf(stderr, "%s %s: the answer shows another account's %s\n", req->method,
                    req->path, hidden[i]);
            abort();
        }
}

/* Checks an answer against the API's promises; aborts on a broken one. */
static void check_response(const struct http_request *req, struct http_response *res)
{
    if (res->status < 200 || res->status > 599) {
        fprintf(stderr, "%s %s: status %d\n", req->method, req->path, res->status);
        abort();
    }
    if (res->stream) {
        char *buf = malloc(64 * 1024);
        FUZZ_CHECK(buf != NULL);
        size_t total = 0;
        for (;;) {
            ssize_t got = res->stream(res->stream_ctx, buf, 64 * 1024);
            if (got < 0)
                break;
            FUZZ_CHECK((size_t)got <= 64 * 1024);
            total += (size_t)got;
            if (total > STREAM_READ_MAX)
                break;
        }
        free(buf);
        return;
    }
    FUZZ_CHECK(res->len == 0 || res->body != NULL);
    if (res->status == 500) {
        fprintf(stderr, "%s %s answered 500: %.*s\n", req->method, req->path, (int)res->len,
                res->body ? res->body : "");
        abort();
    }
    if (res->status == 204) {
        FUZZ_CHECK(res->len == 0); /* No Content */
        return;
    }
    /* "application/json" and its parameters, not "application/jsonl". */
    if (strncmp(res->content_type, "application/json", 16) != 0 ||
        (res->content_type[16] != '\0' && res->content_type[16] != ';'))
        return;
    json_error_t jerr;
    json_t *v = json_loadb(res->body, res->len, 0, &jerr);
    if (!v) {
        fprintf(stderr, "%s %s: the JSON answer does not parse: %s\n", req->method, req->path,
                jerr.text);
        abort();
    }
    check_isolation(req, v);
    if (res->status >= 400) {
        json_t *e = json_object_get(v, "error");
        if (!json_is_string(json_object_get(e, "code")) ||
            !json_is_string(json_object_get(e, "message")) || !json_object_get(e, "param")) {
            fprintf(stderr, "%s %s: error %d without the error shape: %.*s\n", req->method,
                    req->path, res->status, (int)res->len, res->body);
            abort();
        }
    }
    json_decref(v);
}

/* Sends a request built in C (set-up only); returns the answer's "id". */
static void call(const char *method, const char *path, const char *auth, const char *ctype,
                 const char *body, char *id_out, size_t id_cap, int want_status)
{
    struct http_request *req = calloc(1, sizeof *req);
    FUZZ_CHECK(req != NULL);
    snprintf(req->method, sizeof req->method, "%s", method);
    snprintf(req->path, sizeof req->path, "%s", path);
    snprintf(req->authorization, sizeof req->authorization, "Bearer %s", auth);
    snprintf(req->content_type, sizeof req->content_type, "%s", ctype);
    req->body = body;
    req->body_len = strlen(body);
    struct http_response res = {0};
    api_dispatch(&fx.srv, req, &res);
    if (res.status != want_status) {
        fprintf(stderr, "fixture: %s %s answered %d: %.*s\n", method, path, res.status,
                (int)res.len, res.body ? res.body : "");
        abort();
    }
    if (id_out) {
        json_t *v = json_loadb(res.body, res.len, 0, NULL);
        const char *key = strstr(path, "/claim") ? "attempt_id" : "id";
        const char *id = json_string_value(json_object_get(v, key));
        FUZZ_CHECK(id != NULL);
        snprintf(id_out, id_cap, "%s", id);
        json_decref(v);
    }
    http_response_free(&res);
    free(req);
}

/* ---- the fixture -------------------------------------------------------- */

static void fixture_down(void)
{
    if (!fx.up)
        return;
    api_server_pools_close(&fx.srv);
    control_close(&fx.ctl);
    remove_tree(fx.root);
    fx.up = false;
}

static void fixture_up(void)
{
    char err[300], dir[512];
    memset(&fx, 0, sizeof fx);
    fuzz_temp_path(fx.root, sizeof fx.root, "router");
    remove_tree(fx.root);
    FUZZ_CHECK(mkdir(fx.root, 0700) == 0);
    snprintf(dir, sizeof dir, "%s/models", fx.root);
    FUZZ_CHECK(mkdir(dir, 0700) == 0);
    snprintf(dir, sizeof dir, "%s/models/tiny", fx.root);
    FUZZ_CHECK(mkdir(dir, 0700) == 0);
    write_file(dir, "config.json", tiny_config, 0600);
    write_file(dir, "model.safetensors", "\x08\0\0\0\0\0\0\0{}      ", 0600);
    write_file(dir, "tokenizer.json", "{}", 0600);
    write_file(fx.root, "alallo", fake_alallo, 0700);

    struct api_server *srv = &fx.srv;
    srv->ctl = &fx.ctl;
    api_config_defaults(&srv->cfg);
    control_config_defaults(&srv->ctl->cfg);
    snprintf(srv->ctl->cfg.data_dir, sizeof srv->ctl->cfg.data_dir, "%s/data", fx.root);
    snprintf(srv->ctl->cfg.models_dir, sizeof srv->ctl->cfg.models_dir, "%s/models", fx.root);
    snprintf(srv->ctl->alallo_bin, sizeof srv->ctl->alallo_bin, "%s/alallo", fx.root);
    srv->cfg.completion_timeout_s = 10;
    /* Streams (a followed log) end after what is there instead of waiting
     * for a job that will never run. */
    atomic_store(&srv->stopping, 1);
    bool created;
    struct store *store = NULL;
    if (setup_data_dir(srv->ctl->cfg.data_dir, err, sizeof err) != 0 ||
        setup_open_store(srv->ctl->cfg.data_dir, &store, err, sizeof err) != 0 ||
        setup_first_run(store, srv->ctl->cfg.data_dir, fx.key, srv->worker_token, &created, err,
                        sizeof err) != 0 ||
        control_open(srv->ctl, store, err, sizeof err) != 0) {
        fprintf(stderr, "fixture: %s\n", err);
        abort();
    }
    srv->cfg.slot_wait_ms = 0; /* one input at a time: a busy slot is 429 at once */
    FUZZ_CHECK(api_server_pools_open(srv) == 0);
    FUZZ_CHECK(setup_create_account(srv->ctl->store, "other", fx.other_key) == ERR_OK);
    fx.up = true;

    const char *ct = "multipart/form-data; boundary=XyZ";
    const char *upload =
        "--XyZ\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nfine-tune\r\n"
        "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"train.jsonl\"\r\n"
        "Content-Type: application/jsonl\r\n\r\n"
        "{\"prompt\":\"Great film.\",\"completion\":\" positive\"}\n"
        "{\"messages\":[{\"role\":\"user\",\"content\":\"Dull.\"},"
        "{\"role\":\"assistant\",\"content\":\"negative\"}]}\n\r\n--XyZ--\r\n";
    call("POST", "/v1/files", fx.key, ct, upload, fx.file, sizeof fx.file, 200);
    call("POST", "/v1/files", fx.other_key, ct, upload, fx.ofile, sizeof fx.ofile, 200);
    call("POST", "/internal/workers/register", srv->worker_token, "application/json",
         "{\"name\":\"w1\",\"cpus\":2,\"mem_bytes\":8589934592,\"accelerator\":\"cpu\","
         "\"price_per_hour\":0.4,\"class\":\"on-demand\","
         "\"speed\":{\"tokens_per_s\":1000,\"flops\":1e11}}",
         NULL, 0, 200);
    char body[256];
    snprintf(body, sizeof body, "{\"model\":\"tiny\",\"training_file\":\"%s\"}", fx.file);
    call("POST", "/v1/fine_tuning/jobs", fx.key, "application/json", body, fx.job,
         sizeof fx.job, 200);
    snprintf(body, sizeof body, "{\"model\":\"tiny\",\"training_file\":\"%s\"}", fx.ofile);
    call("POST", "/v1/fine_tuning/jobs", fx.other_key, "application/json", body, fx.ojob,
         sizeof fx.ojob, 200);
    /* The claim may find nothing placed yet (204); then $ATTEMPT names no
     * attempt and the fuzzer still exercises the 404 paths. */
    struct http_request *req = calloc(1, sizeof *req);
    FUZZ_CHECK(req != NULL);
    strcpy(req->method, "POST");
    strcpy(req->path, "/internal/workers/w1/claim");
    snprintf(req->authorization, sizeof req->authorization, "Bearer %s", srv->worker_token);
    req->body = "{}";
    req->body_len = 2;
    struct http_response res = {0};
    api_dispatch(srv, req, &res);
    json_t *v = res.status == 200 ? json_loadb(res.body, res.len, 0, NULL) : NULL;
    const char *att = json_string_value(json_object_get(v, "attempt_id"));
    snprintf(fx.attempt, sizeof fx.attempt, "%s", att ? att : "att-none");
    json_decref(v);
    http_response_free(&res);
    free(req);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > MAX_INPUT)
        return 0;
    if (fx.up && fx.runs >= RESET_EVERY)
        fixture_down();
    if (!fx.up) {
        static bool registered;
        fixture_up();
        if (!registered)
            atexit(fixture_down);
        registered = true;
    }
    fx.runs++;
    size_t n;
    char *text = expand((const char *)data, size, &n);
    struct http_request *req = calloc(1, sizeof *req);
    FUZZ_CHECK(req != NULL);
    /* The body must not be NUL-terminated for the handlers: copy it into a
     * buffer of its own size so ASan sees any read past its end. */
    char *body = NULL;
    if (build_request(text, n, req)) {
        if (req->body_len) {
            body = malloc(req->body_len);
            FUZZ_CHECK(body != NULL);
            memcpy(body, req->body, req->body_len);
        }
        req->body = body;
        struct http_response res = {0};
        api_dispatch(&fx.srv, req, &res);
        if (getenv("FUZZ_ECHO")) /* to see what a seed reaches */
            fprintf(stderr, "%s %s -> %d %.*s\n", req->method, req->path, res.status,
                    res.stream ? 0 : (int)res.len, res.body ? res.body : "");
        check_response(req, &res);
        http_response_free(&res);
    }
    free(body);
    free(req);
    free(text);
    return 0;
}
