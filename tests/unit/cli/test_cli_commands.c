/* test_cli_commands.c - the client commands as a user runs them: the real
 * binary (ALALLO_BINARY) against a stand-in API server in this process.
 * Checks the requests it sends (paths, bodies, the key, multipart uploads),
 * what it prints, and its exit statuses (0, 1 with the server's words, 2 on
 * usage errors). The real server is covered by the integration tests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the stand-in server ----------------------------------------------- */

#define MAX_SEEN 8

struct seen {
    char method[8];
    char url[512];
    char auth[256];
    char *body;
    size_t len;
};

static struct {
    struct MHD_Daemon *d;
    int port;
    pthread_mutex_t mu;
    struct seen req[MAX_SEEN];
    int n;
    char *tar; /* a folder export, made by tar(1) at set-up */
    size_t tar_len;
} S;

struct body {
    char *data;
    size_t len;
};

static enum MHD_Result reply(struct MHD_Connection *c, int status, const char *type,
                             const char *text)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static const char job_json[] =
    "{\"id\":\"ftjob-1\",\"object\":\"fine_tuning.job\",\"name\":\"demo\",\"status\":\"running\","
    "\"message\":null,\"model\":\"alallo-tiny\",\"precision\":\"4-bit\","
    "\"progress\":{\"steps_done\":54,\"max_steps\":120,\"percent\":45},"
    "\"time_left\":{\"low_s\":2400,\"high_s\":3000,\"text\":\"40 min to 50 min\","
    "\"basis\":\"pace\"},"
    "\"estimate\":{\"time\":{\"low_s\":2400,\"high_s\":4680},"
    "\"price\":{\"low\":0.12,\"high\":0.31,\"currency\":\"usd\"}},"
    "\"price\":{\"charged\":0,\"refunded\":0,\"currency\":\"usd\"},\"attempts\":[]}";

/* Streams three log lines, one per call, then ends. */
static ssize_t log_stream(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)cls;
    (void)max;
    static const char *const lines[] = {"step 10/20: loss 2.3114\n", "saved checkpoint at step 20\n",
                                        "training finished: 20 steps, final loss 1.2031\n"};
    size_t off = 0;
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(lines[i]);
        if (pos == off) {
            usleep(100000);
            memcpy(buf, lines[i], n);
            return (ssize_t)n;
        }
        off += n;
    }
    return MHD_CONTENT_READER_END_OF_STREAM;
}

static enum MHD_Result route(struct MHD_Connection *c, const char *url, const char *method,
                             const struct seen *s)
{
    const char *json = "application/json";
    if (strcmp(url, "/v1/fine_tuning/jobs") == 0 && strcmp(method, "GET") == 0) {
        char text[4096];
        snprintf(text, sizeof text, "{\"object\":\"list\",\"data\":[%s],\"has_more\":false}",
                 job_json);
        return reply(c, 200, json, text);
    }
    /* A job no capacity can run is created failed (SPEC §2), with 200. */
    if (strcmp(url, "/v1/fine_tuning/jobs") == 0 && s->body && strstr(s->body, "\"huge\""))
        return reply(c, 200, json,
                     "{\"id\":\"ftjob-new\",\"status\":\"failed\",\"message\":\"No worker "
                     "has enough memory for this job.\"}");
    if (strcmp(url, "/v1/fine_tuning/jobs") == 0)
        return reply(c, 200, json, "{\"id\":\"ftjob-new\",\"status\":\"queued\"}");
    if (strcmp(url, "/v1/fine_tuning/jobs/ftjob-done") == 0)
        return reply(c, 200, json,
                     "{\"id\":\"ftjob-done\",\"status\":\"succeeded\","
                     "\"fine_tuned_model\":\"ft-1\"}");
    if (strcmp(url, "/v1/fine_tuning/jobs/ftjob-bad") == 0)
        return reply(c, 200, json,
                     "{\"id\":\"ftjob-bad\",\"status\":\"failed\",\"fine_tuned_model\":null,"
                     "\"message\":\"Training failed: boom\"}");
    if (strcmp(url, "/v1/fine_tuning/jobs/ftjob-1") == 0)
        return reply(c, 200, json, job_json);
    if (strcmp(url, "/v1/fine_tuning/jobs/ftjob-1/checkpoints") == 0)
        return reply(c, 200, json, "{\"object\":\"list\",\"data\":[]}");
    if (strcmp(url, "/v1/fine_tuning/jobs/ftjob-1/cancel") == 0)
        return reply(c, 200, json, "{\"id\":\"ftjob-1\",\"status\":\"cancelling\"}");
    if (strcmp(url, "/v1/fine_tuning/jobs/ftjob-1/log") == 0) {
        if (MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "follow")) {
            struct MHD_Response *r =
                MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 256, log_stream, NULL, NULL);
            MHD_add_response_header(r, "Content-Type", "text/plain");
            enum MHD_Result ret = MHD_queue_response(c, 200, r);
            MHD_destroy_response(r);
            return ret;
        }
        return reply(c, 200, "text/plain", "No log yet. It appears once training starts.\n");
    }
    if (strcmp(url, "/v1/fine_tuning/estimates") == 0)
        return reply(c, 200, json,
                     "{\"time\":{\"low_s\":2400,\"high_s\":4680,\"text\":\"40 min to 1.3 h\"},"
                     "\"price\":{\"low\":0.12,\"high\":0.31,\"currency\":\"usd\"},"
                     "\"plan\":{\"memory_bytes\":1073741824,\"worker\":null},"
                     "\"message\":\"No capacity is free right now; the job would wait in the "
                     "queue.\"}");
    if (strcmp(url, "/v1/files") == 0 && strcmp(method, "POST") == 0) {
        if (s->body && strstr(s->body, "\"completion\"") == NULL)
            return reply(c, 400, json,
                         "{\"error\":{\"code\":\"invalid_file\",\"message\":\"line 1 of "
                         "bad.jsonl: missing field \\\"completion\\\"\",\"param\":\"file\"}}");
        return reply(c, 200, json, "{\"id\":\"file-abc\",\"object\":\"file\"}");
    }
    if (strcmp(url, "/v1/workers/small/drain") == 0)
        return reply(c, 200, json, "{\"name\":\"small\",\"state\":\"draining\"}");
    if (strcmp(url, "/v1/completions") == 0)
        return reply(c, 200, json, "{\"choices\":[{\"text\":\" a happy ending\",\"index\":0}]}");
    if (strcmp(url, "/v1/models/ft-1/export") == 0) {
        const char *format = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "format");
        if (format && strcmp(format, "hf") == 0) {
            struct MHD_Response *r = MHD_create_response_from_buffer(
                S.tar_len, S.tar, MHD_RESPMEM_PERSISTENT);
            MHD_add_response_header(r, "Content-Type", "application/x-tar");
            enum MHD_Result ret = MHD_queue_response(c, 200, r);
            MHD_destroy_response(r);
            return ret;
        }
        return reply(c, 200, "application/octet-stream", "GGUF-BYTES");
    }
    return reply(c, 404, json,
                 "{\"error\":{\"code\":\"not_found\",\"message\":\"No such job: ftjob-404\","
                 "\"param\":null}}");
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls)
{
    (void)cls;
    (void)version;
    struct body *b = *con_cls;
    if (!b) {
        b = calloc(1, sizeof *b);
        *con_cls = b;
        return MHD_YES;
    }
    if (*upload_size) {
        b->data = realloc(b->data, b->len + *upload_size + 1);
        memcpy(b->data + b->len, upload, *upload_size);
        b->len += *upload_size;
        b->data[b->len] = '\0';
        *upload_size = 0;
        return MHD_YES;
    }
    pthread_mutex_lock(&S.mu);
    struct seen *s = &S.req[S.n < MAX_SEEN ? S.n : MAX_SEEN - 1];
    if (S.n < MAX_SEEN)
        S.n++;
    free(s->body);
    memset(s, 0, sizeof *s);
    snprintf(s->method, sizeof s->method, "%s", method);
    const char *q = NULL;
    snprintf(s->url, sizeof s->url, "%s", url);
    q = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit");
    if (q) {
        strcat(s->url, "?limit=");
        strncat(s->url, q, 16);
    }
    q = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "format");
    if (q) {
        strcat(s->url, "?format=");
        strncat(s->url, q, 16);
    }
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    snprintf(s->auth, sizeof s->auth, "%s", auth ? auth : "");
    if (b->data) {
        s->body = b->data;
        s->len = b->len;
        b->data = NULL;
    }
    pthread_mutex_unlock(&S.mu);
    return route(c, url, method, s);
}

static void done_request(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    struct body *b = *con_cls;
    if (b) {
        free(b->data);
        free(b);
    }
}

/* ---- running the binary ------------------------------------------------- */

static char dir[256];
static char out[65536], err[65536];

static void slurp(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
}

/* Runs `alallo ARGS` (ARGS already shell-quoted) with ALALLO_URL set to the
 * stand-in's address followed by `tail`; returns its exit status. */
static int run_url(const char *tail, const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && ALALLO_URL=http://127.0.0.1:%d%s ALALLO_API_KEY=sk-test %s %s "
             ">out.txt 2>err.txt",
             dir, S.port, tail, ALALLO_BINARY, args);
    pthread_mutex_lock(&S.mu);
    for (int i = 0; i < S.n; i++) {
        free(S.req[i].body);
        memset(&S.req[i], 0, sizeof S.req[i]);
    }
    S.n = 0;
    pthread_mutex_unlock(&S.mu);
    int st = system(cmd);
    char path[400];
    snprintf(path, sizeof path, "%s/out.txt", dir);
    slurp(path, out, sizeof out);
    snprintf(path, sizeof path, "%s/err.txt", dir);
    slurp(path, err, sizeof err);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int run(const char *args)
{
    return run_url("/", args);
}

static void write_file(const char *name, const char *text)
{
    char path[400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static json_t *body_of(int i)
{
    return json_loadb(S.req[i].body, S.req[i].len, 0, NULL);
}

static int setup(void **state)
{
    (void)state;
    pthread_mutex_init(&S.mu, NULL);
    S.d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0,
                           NULL, NULL, handle, NULL, MHD_OPTION_NOTIFY_COMPLETED, done_request,
                           NULL, MHD_OPTION_END);
    if (!S.d)
        return -1;
    S.port = MHD_get_daemon_info(S.d, MHD_DAEMON_INFO_BIND_PORT)->port;
    snprintf(dir, sizeof dir, "/tmp/alallo-test-cli-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    char cmd[600];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && mkdir hfsrc && printf '{\"hidden_size\":64}' > hfsrc/config.json && "
             "printf 'weights' > hfsrc/model.safetensors && cd hfsrc && "
             "tar --format=ustar -cf ../hf.tar *",
             dir);
    if (system(cmd) != 0)
        return -1;
    char path[400];
    snprintf(path, sizeof path, "%s/hf.tar", dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    S.tar = malloc(1 << 20);
    S.tar_len = fread(S.tar, 1, 1 << 20, f);
    fclose(f);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    MHD_stop_daemon(S.d);
    free(S.tar);
    for (int i = 0; i < S.n; i++)
        free(S.req[i].body);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- the tests ---------------------------------------------------------- */

static void jobs_lists_a_table_with_the_key(void **state)
{
    (void)state;
    assert_int_equal(run("jobs"), 0);
    assert_string_equal(S.req[0].url, "/v1/fine_tuning/jobs?limit=20");
    assert_string_equal(S.req[0].auth, "Bearer sk-test");
    assert_non_null(strstr(out, "ID       NAME  METHOD"));
    assert_non_null(strstr(out, "ftjob-1  demo  Supervised fine-tuning, 4-bit  running  "
                                "[#########-----------]  45%  40 min to 50 min  "
                                "$0.12 to $0.31 (estimate)\n"));
    /* --json: the server's JSON as it is. */
    assert_int_equal(run("jobs list --json --limit 5"), 0);
    assert_string_equal(S.req[0].url, "/v1/fine_tuning/jobs?limit=5");
    json_t *v = json_loads(out, 0, NULL);
    assert_non_null(v);
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(v, "data"),
                                                                          0),
                                                          "id")),
                        "ftjob-1");
    json_decref(v);
}

static void jobs_show_reads_as_the_help_page(void **state)
{
    (void)state;
    assert_int_equal(run("jobs show ftjob-1"), 0);
    assert_non_null(strstr(out, "Progress:              [#########-----------]  45%  "
                                "(54 / 120 steps)\n"));
    assert_non_null(strstr(out, "Time left (estimate):  40 min to 50 min  (from the job's pace)\n"));
    assert_non_null(strstr(out, "Estimate:              40 min to 1.3 h, $0.12 to $0.31\n"));
    assert_string_equal(S.req[1].url, "/v1/fine_tuning/jobs/ftjob-1/checkpoints");
}

static void server_errors_exit_1_with_its_message(void **state)
{
    (void)state;
    assert_int_equal(run("jobs show ftjob-404"), 1);
    assert_string_equal(err, "alallo: No such job: ftjob-404\n");
    assert_string_equal(out, "");
}

static void usage_errors_exit_2(void **state)
{
    (void)state;
    assert_int_equal(run("jobs create --file file-1"), 2);
    assert_non_null(strstr(err, "--model is required"));
    assert_int_equal(run("jobs create --model m --file f --precision 8-bit"), 2);
    assert_non_null(strstr(err, "16-bit or 4-bit"));
    assert_int_equal(run("jobs create --model m --file f --epochs zero"), 2);
    assert_int_equal(run("jobs frobnicate"), 2);
    assert_int_equal(run("jobs show"), 2);
    assert_int_equal(run("jobs --bogus"), 2);
    assert_non_null(strstr(err, "unknown option --bogus"));
    assert_int_equal(run("export ft-1 --format onnx --out x"), 2);
    assert_int_equal(run("generate --prompt hi"), 2);
    assert_int_equal(S.n, 0); /* nothing was sent */
}

static void create_uploads_then_creates(void **state)
{
    (void)state;
    write_file("train.jsonl", "{\"prompt\":\"a\",\"completion\":\"b\"}\n");
    assert_int_equal(run("jobs create --model alallo-tiny --upload train.jsonl --name demo "
                         "--precision 4-bit --goal fastest_finish --epochs 2 --batch-size 4 "
                         "--learning-rate-multiplier 0.5 --seed 7 --suffix x --adapter lora"),
                     0);
    assert_string_equal(out, "ftjob-new\n");
    assert_int_equal(S.n, 2);
    /* The upload: multipart with purpose and the file's bytes and name. */
    assert_string_equal(S.req[0].url, "/v1/files");
    assert_non_null(strstr(S.req[0].body, "name=\"purpose\""));
    assert_non_null(strstr(S.req[0].body, "fine-tune"));
    assert_non_null(strstr(S.req[0].body, "filename=\"train.jsonl\""));
    assert_non_null(strstr(S.req[0].body, "{\"prompt\":\"a\",\"completion\":\"b\"}"));
    /* The job body. */
    json_t *b = body_of(1);
    assert_non_null(b);
    assert_string_equal(json_string_value(json_object_get(b, "model")), "alallo-tiny");
    assert_string_equal(json_string_value(json_object_get(b, "training_file")), "file-abc");
    assert_string_equal(json_string_value(json_object_get(b, "name")), "demo");
    assert_string_equal(json_string_value(json_object_get(b, "precision")), "4-bit");
    assert_string_equal(json_string_value(json_object_get(b, "goal")), "fastest_finish");
    assert_string_equal(json_string_value(json_object_get(b, "adapter")), "lora");
    assert_string_equal(json_string_value(json_object_get(b, "suffix")), "x");
    assert_int_equal(json_integer_value(json_object_get(b, "seed")), 7);
    json_t *hp = json_object_get(b, "hyperparameters");
    assert_int_equal(json_integer_value(json_object_get(hp, "n_epochs")), 2);
    assert_int_equal(json_integer_value(json_object_get(hp, "batch_size")), 4);
    assert_true(json_number_value(json_object_get(hp, "learning_rate_multiplier")) == 0.5);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(b, "method"), "type")), "supervised");
    json_decref(b);
}

/* The further hyper-parameters reach the body: DPO's under method.dpo. */
static void create_dpo_with_more_hyperparameters(void **state)
{
    (void)state;
    assert_int_equal(run("jobs create --model alallo-tiny --file file-abc --method dpo "
                         "--beta 0.2 --max-seq-len 1024 --packing off --lora-rank 8 "
                         "--lora-alpha 16 --lora-dropout 0.05 --lora-target-modules q_proj,v_proj "
                         "--lr-scheduler linear --warmup-ratio 0.1 --weight-decay 0.01 "
                         "--train-on-inputs on"),
                     0);
    json_t *b = body_of(0);
    json_t *m = json_object_get(b, "method");
    assert_string_equal(json_string_value(json_object_get(m, "type")), "dpo");
    json_t *hp = json_object_get(json_object_get(m, "dpo"), "hyperparameters");
    assert_true(json_number_value(json_object_get(hp, "beta")) == 0.2);
    assert_int_equal(json_integer_value(json_object_get(hp, "max_seq_len")), 1024);
    assert_true(json_is_false(json_object_get(hp, "packing")));
    assert_int_equal(json_integer_value(json_object_get(hp, "lora_rank")), 8);
    assert_true(json_number_value(json_object_get(hp, "lora_dropout")) == 0.05);
    assert_int_equal(json_array_size(json_object_get(hp, "lora_target_modules")), 2);
    assert_string_equal(json_string_value(json_object_get(hp, "lr_scheduler")), "linear");
    assert_true(json_is_true(json_object_get(hp, "train_on_inputs")));
    assert_null(json_object_get(b, "hyperparameters"));
    json_decref(b);
    assert_int_equal(run("jobs create --model alallo-tiny --file file-abc --packing maybe"), 2);
    assert_non_null(strstr(err, "--packing and --train-on-inputs take on or off"));
    assert_int_equal(run("jobs create --model alallo-tiny --file file-abc --method rl"), 2);
}

static void a_bad_line_is_shown_as_the_server_words_it(void **state)
{
    (void)state;
    write_file("bad.jsonl", "{\"prompt\":\"a\"}\n");
    assert_int_equal(run("files upload bad.jsonl"), 1);
    assert_string_equal(err, "alallo: line 1 of bad.jsonl: missing field \"completion\"\n");
    assert_int_equal(run("files upload missing.jsonl"), 1);
    assert_non_null(strstr(err, "cannot read missing.jsonl"));
}

static void estimate_prints_ranges_and_the_no_capacity_sentence(void **state)
{
    (void)state;
    assert_int_equal(run("estimate --model alallo-tiny --file file-abc"), 0);
    assert_string_equal(S.req[0].url, "/v1/fine_tuning/estimates");
    assert_string_equal(out, "Time:                  40 min to 1.3 h\n"
                             "Price:                 $0.12 to $0.31\n"
                             "Plan:                  1.0 GiB of memory\n"
                             "No capacity is free right now; the job would wait in the queue.\n");
}

static void log_follow_streams(void **state)
{
    (void)state;
    assert_int_equal(run("jobs log ftjob-1 --follow"), 0);
    assert_string_equal(out, "step 10/20: loss 2.3114\nsaved checkpoint at step 20\n"
                             "training finished: 20 steps, final loss 1.2031\n");
    assert_int_equal(run("jobs log ftjob-1"), 0);
    assert_string_equal(out, "No log yet. It appears once training starts.\n");
}

static void cancel_drain_generate_export(void **state)
{
    (void)state;
    assert_int_equal(run("jobs cancel ftjob-1"), 0);
    assert_string_equal(S.req[0].method, "POST");
    assert_string_equal(out, "ftjob-1: cancelling\n");
    assert_int_equal(run("workers drain small"), 0);
    assert_string_equal(S.req[0].url, "/v1/workers/small/drain");
    assert_string_equal(out, "small: draining\n");
    assert_int_equal(run("generate --model ft-1 --prompt 'Once upon' --max-tokens 8 "
                         "--temperature 0"),
                     0);
    assert_string_equal(out, " a happy ending\n");
    json_t *b = body_of(0);
    assert_string_equal(json_string_value(json_object_get(b, "prompt")), "Once upon");
    assert_int_equal(json_integer_value(json_object_get(b, "max_tokens")), 8);
    assert_true(json_number_value(json_object_get(b, "temperature")) == 0);
    json_decref(b);
    assert_int_equal(run("export ft-1 --format gguf --out model.gguf"), 0);
    assert_string_equal(S.req[0].url, "/v1/models/ft-1/export?format=gguf");
    char path[400], data[64];
    snprintf(path, sizeof path, "%s/model.gguf", dir);
    slurp(path, data, sizeof data);
    assert_string_equal(data, "GGUF-BYTES");
    /* An existing target is never overwritten. */
    assert_int_equal(run("export ft-1 --format gguf --out model.gguf"), 1);
    assert_non_null(strstr(err, "already exists"));
    /* A folder export arrives as a tar archive and is unpacked... */
    assert_int_equal(run("export ft-1 --format hf --out hf-model"), 0);
    assert_string_equal(S.req[0].url, "/v1/models/ft-1/export?format=hf");
    snprintf(path, sizeof path, "%s/hf-model/config.json", dir);
    slurp(path, data, sizeof data);
    assert_string_equal(data, "{\"hidden_size\":64}");
    snprintf(path, sizeof path, "%s/hf-model/model.safetensors", dir);
    slurp(path, data, sizeof data);
    assert_string_equal(data, "weights");
    /* ...unless the archive itself is asked for. */
    assert_int_equal(run("export ft-1 --format hf --out hf-model.tar"), 0);
    snprintf(path, sizeof path, "%s/hf-model.tar", dir);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal((size_t)st.st_size, S.tar_len);
    /* A failed export leaves no file behind. */
    assert_int_equal(run("export ft-404 --format gguf --out other.gguf"), 1);
    snprintf(path, sizeof path, "%s/other.gguf", dir);
    assert_int_not_equal(access(path, F_OK), 0);
    snprintf(path, sizeof path, "%s/other.gguf.part", dir);
    assert_int_not_equal(access(path, F_OK), 0);
}

/* Where a model is expected, a job id stands for its fine-tuned model. */
static void a_job_id_stands_for_its_model(void **state)
{
    (void)state;
    assert_int_equal(run("generate --model ftjob-done --prompt hi"), 0);
    assert_string_equal(S.req[0].url, "/v1/fine_tuning/jobs/ftjob-done");
    json_t *b = body_of(1);
    assert_string_equal(json_string_value(json_object_get(b, "model")), "ft-1");
    json_decref(b);
    assert_int_equal(run("export ftjob-done --format gguf --out byjob.gguf"), 0);
    assert_string_equal(S.req[1].url, "/v1/models/ft-1/export?format=gguf");
    assert_int_equal(run("jobs create --model ftjob-done --file file-1"), 0);
    b = body_of(1);
    assert_string_equal(json_string_value(json_object_get(b, "model")), "ft-1");
    json_decref(b);
    /* A job without a model says why, and nothing else is sent. */
    assert_int_equal(run("generate --model ftjob-bad --prompt hi"), 1);
    assert_string_equal(err, "alallo: ftjob-bad: the job failed: it has no model "
                             "(Training failed: boom)\n");
    assert_int_equal(S.n, 1);
}

/* A newcomer's first tries: a path given to --file, the epochs the server
 * allows, a create the server answers with a failed job, an SDK-style URL. */
static void first_tries(void **state)
{
    (void)state;
    write_file("first.jsonl", "{\"prompt\":\"a\",\"completion\":\"b\"}\n");
    assert_int_equal(run("jobs create --model alallo-tiny --file first.jsonl"), 0);
    assert_int_equal(S.n, 2);
    assert_string_equal(S.req[0].url, "/v1/files");
    json_t *b = body_of(1);
    assert_string_equal(json_string_value(json_object_get(b, "training_file")), "file-abc");
    json_decref(b);
    assert_non_null(strstr(err, "uploaded first.jsonl as file-abc"));

    assert_int_equal(run("jobs create --model m --file file-1 --epochs 51"), 2);
    assert_non_null(strstr(err, "--epochs must be a whole number from 1 to 50"));
    assert_int_equal(run("jobs create --model m --file file-1 --epochs 50"), 0);

    assert_int_equal(run("jobs create --model huge --file file-1"), 1);
    assert_string_equal(out, "ftjob-new\n");
    assert_string_equal(err, "alallo: the job failed: No worker has enough memory for this job.\n");

    assert_int_equal(run_url("/v1/", "jobs"), 0);
    assert_string_equal(S.req[0].url, "/v1/fine_tuning/jobs?limit=20");
    assert_non_null(strstr(out, "ftjob-1"));
    assert_int_equal(run_url("/v1", "models --json"), 1); /* the stand-in has no /v1/models */
    assert_string_equal(S.req[0].url, "/v1/models");
}

static void an_unreachable_server_exits_1(void **state)
{
    (void)state;
    char cmd[600];
    snprintf(cmd, sizeof cmd,
             "ALALLO_URL=http://127.0.0.1:1 %s models >/dev/null 2>'%s/err.txt'",
             ALALLO_BINARY, dir);
    int st = system(cmd);
    assert_int_equal(WEXITSTATUS(st), 1);
    char path[400];
    snprintf(path, sizeof path, "%s/err.txt", dir);
    slurp(path, err, sizeof err);
    assert_non_null(strstr(err, "cannot reach http://127.0.0.1:1/v1/models"));
    assert_non_null(strstr(err, "(ALALLO_URL is http://127.0.0.1:1; is `alallo serve` running"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(jobs_lists_a_table_with_the_key),
        cmocka_unit_test(jobs_show_reads_as_the_help_page),
        cmocka_unit_test(server_errors_exit_1_with_its_message),
        cmocka_unit_test(usage_errors_exit_2),
        cmocka_unit_test(create_uploads_then_creates),
        cmocka_unit_test(create_dpo_with_more_hyperparameters),
        cmocka_unit_test(a_bad_line_is_shown_as_the_server_words_it),
        cmocka_unit_test(estimate_prints_ranges_and_the_no_capacity_sentence),
        cmocka_unit_test(log_follow_streams),
        cmocka_unit_test(cancel_drain_generate_export),
        cmocka_unit_test(a_job_id_stands_for_its_model),
        cmocka_unit_test(first_tries),
        cmocka_unit_test(an_unreachable_server_exits_1),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
