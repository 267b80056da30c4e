/* test_worker_run.c - worker_run end to end against a stand-in server
 * (libmicrohttpd, in this process) and stand-in trainers (/bin/sh scripts):
 * registration with the measured speed, claim, ATTEMPT.json, events relayed
 * unchanged, heartbeats naming the attempt, finish with the exit status,
 * stop on cancel, fencing, re-registration, a server that starts late.
 * The real server and trainer are covered by the integration tests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "worker/trainer_proc.h"
#include "worker/worker.h"

/* ---- the stand-in server ----------------------------------------------- */

struct fake {
    struct MHD_Daemon *d;
    int port;
    pthread_mutex_t mu;
    /* behaviour */
    int claims_to_give;      /* attempts still to hand out */
    json_t *claim;           /* the claim answer */
    const char *stop;        /* "cancel"/"move" in answers, or NULL */
    int stop_after_events;   /* only once this many events arrived */
    int fence_events;        /* answer events with 409 */
    int register_status;     /* 200 unless set */
    int heartbeat_404_once;
    /* what arrived */
    int registers, heartbeats, claims, heartbeats_with_attempt, heartbeats_w2;
    json_t *register_body;
    json_t *events;          /* all events, in order */
    json_t *finish;          /* the finish body, NULL until it came */
    int finishes;
    long long events_fence;
    int bad_first;
};

static struct fake F;

struct body {
    char *data;
    size_t len;
};

static enum MHD_Result answer(struct MHD_Connection *c, int status, json_t *obj)
{
    char *text = obj ? json_dumps(obj, JSON_COMPACT) : strdup("");
    json_decref(obj);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
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
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (strcmp(method, "POST") != 0 || !auth || strcmp(auth, "Bearer tok") != 0)
        return answer(c, 401, json_pack("{s:{s:s}}", "error", "message", "bad token"));
    json_t *in = b->len ? json_loadb(b->data, b->len, 0, NULL) : NULL;
    enum MHD_Result ret;
    pthread_mutex_lock(&F.mu);
    if (strcmp(url, "/internal/workers/register") == 0) {
        F.registers++;
        json_decref(F.register_body);
        F.register_body = json_incref(in);
        int st = F.register_status ? F.register_status : 200;
        ret = st == 200 ? answer(c, 200, json_pack("{s:s,s:i}", "name", "w1", "heartbeat_s", 1))
                        : answer(c, st, json_pack("{s:{s:s}}", "error", "message", "refused"));
    } else if (strcmp(url, "/internal/workers/w2/heartbeat") == 0) {
        F.heartbeats_w2++;
        ret = answer(c, 200, json_pack("{s:s,s:n}", "state", "active", "stop"));
    } else if (strcmp(url, "/internal/workers/w2/claim") == 0) {
        ret = answer(c, 204, NULL);
    } else if (strcmp(url, "/internal/workers/w1/heartbeat") == 0) {
        F.heartbeats++;
        if (json_string_value(json_object_get(in, "attempt_id")))
            F.heartbeats_with_attempt++;
        if (F.heartbeat_404_once) {
            F.heartbeat_404_once = 0;
            ret = answer(c, 404, json_pack("{s:{s:s}}", "error", "message", "no such worker"));
        } else {
            bool stop = F.stop && (int)json_array_size(F.events) >= F.stop_after_events;
            ret = answer(c, 200, json_pack("{s:s,s:o}", "state", "active", "stop",
                                           stop ? json_string(F.stop) : json_null()));
        }
    } else if (strcmp(url, "/internal/workers/w1/claim") == 0) {
        F.claims++;
        if (F.claims_to_give > 0) {
            F.claims_to_give--;
            ret = answer(c, 200, json_incref(F.claim));
        } else {
            ret = answer(c, 204, NULL);
        }
    } else if (strcmp(url, "/internal/attempts/att-1/events") == 0) {
        if (F.fence_events) {
            ret = answer(c, 409, json_pack("{s:{s:s,s:s}}", "error", "code", "fenced",
                                           "message", "stale attempt"));
        } else {
            F.events_fence = json_integer_value(json_object_get(in, "fence"));
            /* Batches follow each other without gaps or repeats. */
            if (json_integer_value(json_object_get(in, "first")) != (json_int_t)json_array_size(F.events))
                F.bad_first++;
            json_array_extend(F.events, json_object_get(in, "events"));
            /* Stop only in heartbeats, so that both paths are exercised by
             * the tests that use it: events answer with stop null. */
            ret = answer(c, 200, json_pack("{s:n}", "stop"));
        }
    } else if (strcmp(url, "/internal/attempts/att-1/finish") == 0) {
        F.finishes++;
        json_decref(F.finish);
        F.finish = json_incref(in);
        ret = answer(c, 200, json_object());
    } else {
        ret = answer(c, 404, json_pack("{s:{s:s}}", "error", "message", "no such path"));
    }
    pthread_mutex_unlock(&F.mu);
    json_decref(in);
    return ret;
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

static void fake_start(int port)
{
    F.d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                               MHD_USE_ERROR_LOG,
                           (uint16_t)port, NULL, NULL, handle, NULL, MHD_OPTION_NOTIFY_COMPLETED,
                           done_request, NULL, MHD_OPTION_END);
    assert_non_null(F.d);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(F.d, MHD_DAEMON_INFO_BIND_PORT);
    F.port = info->port;
}

static void fake_stop(void)
{
    if (F.d)
        MHD_stop_daemon(F.d);
    F.d = NULL;
}

/* ---- the stand-in trainer and the worker under test -------------------- */

static char dir[256];
static struct worker_config cfg;
static volatile sig_atomic_t stop_flag;
static pthread_t runner;
static int run_result;

static void *run_worker(void *arg)
{
    (void)arg;
    run_result = worker_run(&cfg, &stop_flag);
    return NULL;
}

/* The fake binary: `bench ...` prints a speed; `train --config F` runs the
 * given body with $CONFIG set. */
static void fake_bin(const char *train_body)
{
    snprintf(cfg.alallo_bin, sizeof cfg.alallo_bin, "%s/alallo", dir);
    FILE *f = fopen(cfg.alallo_bin, "w");
    assert_non_null(f);
    fprintf(f,
            "#!/bin/sh\n"
            "if [ \"$1\" = bench ]; then echo '{\"tokens_per_s\": 4321, \"flops\": 2e9}'; exit 0; fi\n"
            "[ \"$1\" = train ] && [ \"$2\" = --config ] || exit 99\n"
            "CONFIG=$3\n"
            "%s\n",
            train_body);
    fclose(f);
    assert_int_equal(chmod(cfg.alallo_bin, 0755), 0);
}

static json_t *default_claim(void)
{
    return json_pack("{s:s,s:s,s:i,s:{s:s,s:s,s:i}}", "attempt_id", "att-1", "job_id", "ftjob-1",
                     "fence", 5, "spec", "model_dir", "/models/tiny", "train_file",
                     "/data/train.jsonl", "max_steps", 20);
}

static int setup(void **state)
{
    (void)state;
    memset(&F, 0, sizeof F);
    pthread_mutex_init(&F.mu, NULL);
    F.events = json_array();
    F.claim = default_claim();
    snprintf(dir, sizeof dir, "/tmp/alallo-test-worker-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    worker_config_defaults(&cfg);
    snprintf(cfg.name, sizeof cfg.name, "w1");
    snprintf(cfg.token, sizeof cfg.token, "tok");
    snprintf(cfg.work_dir, sizeof cfg.work_dir, "%s/work", dir);
    cfg.cpus = 2;
    cfg.mem_bytes = 3LL << 30;
    cfg.price_per_hour = 0.25;
    snprintf(cfg.class_, sizeof cfg.class_, "spot");
    cfg.stop_grace_s = 5;
    cfg.bench_timeout_s = 10;
    stop_flag = 0;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    stop_flag = 1;
    fake_stop();
    json_decref(F.events);
    json_decref(F.claim);
    json_decref(F.finish);
    json_decref(F.register_body);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void start_worker(void)
{
    snprintf(cfg.server_url, sizeof cfg.server_url, "http://127.0.0.1:%d", F.port);
    assert_int_equal(pthread_create(&runner, NULL, run_worker, NULL), 0);
}

static int stop_worker(void)
{
    stop_flag = 1;
    pthread_join(runner, NULL);
    return run_result;
}

/* Waits (up to `seconds`) until the finish has arrived. */
static int wait_finish(double seconds)
{
    double until = trainer_proc_now() + seconds;
    for (;;) {
        pthread_mutex_lock(&F.mu);
        int n = F.finishes;
        pthread_mutex_unlock(&F.mu);
        if (n > 0)
            return n;
        if (trainer_proc_now() > until)
            return 0;
        usleep(50000);
    }
}

/* Waits (up to `seconds`) until the counter *n of F (read under F.mu)
 * is above `than`; returns its last value. A fixed sleep before such an
 * assert was a guess that a loaded machine can miss. */
static int wait_above(const int *n, int than, double seconds)
{
    double until = trainer_proc_now() + seconds;
    for (;;) {
        pthread_mutex_lock(&F.mu);
        int v = *n;
        pthread_mutex_unlock(&F.mu);
        if (v > than || trainer_proc_now() > until)
            return v;
        usleep(50000);
    }
}

static json_t *finish_field(const char *key)
{
    return json_object_get(F.finish, key);
}

static const char *event_name(size_t i)
{
    return json_string_value(json_object_get(json_array_get(F.events, i), "event"));
}

/* The worker's log in dir/SUB/worker.log, into out. */
static void read_worker_log(const char *sub, char *out, size_t cap)
{
    char path[400];
    snprintf(path, sizeof path, "%s/%s/worker.log", dir, sub);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    fclose(f);
}

/* ---- the tests ---------------------------------------------------------- */

static void a_successful_attempt(void **state)
{
    (void)state;
    fake_start(0);
    F.claims_to_give = 1;
    fake_bin("cp \"$CONFIG\" ../seen-config.json\n"
             "echo '{\"event\":\"started\",\"t\":0.1,\"step\":0,\"max_steps\":20,"
             "\"examples\":8,\"tokens\":900,\"resumed_from\":null}'\n"
             "echo 'a diagnostic' >&2\n"
             "echo '{\"event\":\"log\",\"t\":0.2,\"line\":\"step 10/20: loss 2.3114\"}'\n"
             "echo 'not an event'\n"
             "echo '{\"event\":\"step\",\"t\":0.2,\"step\":10,\"loss\":2.3114,\"lr\":1e-4,"
             "\"tokens_per_s\":500}'\n"
             "sleep 1.5\n" /* long enough for a heartbeat to name the attempt */
             "echo '{\"event\":\"checkpoint\",\"t\":1.7,\"step\":20,\"path\":\"/c\","
             "\"train_loss\":1.5}'\n"
             "echo '{\"event\":\"done\",\"t\":1.8,\"step\":20,\"train_loss\":1.5,"
             "\"model_dir\":\"/o/model\",\"adapter_dir\":\"/o/adapter\"}'\n"
             "exit 0");
    start_worker();
    assert_true(wait_finish(20) > 0);
    assert_int_equal(stop_worker(), 0);

    /* Registration declared the worker and its measured speed. */
    json_t *r = F.register_body;
    assert_string_equal(json_string_value(json_object_get(r, "name")), "w1");
    assert_int_equal(json_integer_value(json_object_get(r, "cpus")), 2);
    assert_int_equal(json_integer_value(json_object_get(r, "mem_bytes")), 3LL << 30);
    assert_string_equal(json_string_value(json_object_get(r, "class")), "spot");
    assert_string_equal(json_string_value(json_object_get(r, "accelerator")), "cpu");
    assert_true(json_number_value(json_object_get(r, "price_per_hour")) == 0.25);
    json_t *speed = json_object_get(r, "speed");
    assert_true(json_number_value(json_object_get(speed, "tokens_per_s")) == 4321);
    assert_true(json_number_value(json_object_get(speed, "flops")) == 2e9);

    assert_string_equal(json_string_value(json_object_get(r, "trainer")), "cpu");

    /* ATTEMPT.json = spec + threads + device. */
    char path[400];
    snprintf(path, sizeof path, "%s/work/attempts/seen-config.json", dir);
    json_t *conf = json_load_file(path, 0, NULL);
    assert_non_null(conf);
    assert_int_equal(json_integer_value(json_object_get(conf, "threads")), 2);
    assert_string_equal(json_string_value(json_object_get(conf, "device")), "cpu");
    assert_string_equal(json_string_value(json_object_get(conf, "model_dir")), "/models/tiny");
    json_decref(conf);

    /* Events relayed in order, unchanged; the non-event line is not. */
    assert_int_equal(json_array_size(F.events), 5);
    assert_string_equal(event_name(0), "started");
    assert_string_equal(event_name(1), "log");
    assert_string_equal(event_name(2), "step");
    assert_string_equal(event_name(3), "checkpoint");
    assert_string_equal(event_name(4), "done");
    assert_string_equal(json_string_value(json_object_get(json_array_get(F.events, 1), "line")),
                        "step 10/20: loss 2.3114");
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(F.events, 4), "adapter_dir")),
        "/o/adapter");
    assert_int_equal(F.events_fence, 5);
    assert_int_equal(F.bad_first, 0);

    /* Finish: exit 0, nothing else. */
    assert_int_equal(F.finishes, 1);
    assert_int_equal(json_integer_value(finish_field("fence")), 5);
    assert_int_equal(json_integer_value(finish_field("exit_status")), 0);
    assert_true(json_is_null(finish_field("signal")));
    assert_true(json_is_null(finish_field("error_kind")));
    assert_true(json_is_null(finish_field("stop")));
    assert_true(F.heartbeats_with_attempt >= 1);

    /* The worker's own log has the trainer's stderr and the dropped line. */
    char logtext[16384];
    read_worker_log("work", logtext, sizeof logtext);
    assert_non_null(strstr(logtext, "a diagnostic"));
    assert_non_null(strstr(logtext, "not an event"));
    assert_non_null(strstr(logtext, "measured speed: 4321.0 tokens/s"));
}

/* A worker with one GPU whose trainer was (not) built with CUDA runs one
 * attempt: ATTEMPT.json's "device" and the registration's "trainer" are
 * `expect`, and its log warns exactly when the GPU goes unused. */
static void gpu_worker_trains_on(bool trainer_cuda, const char *expect)
{
    char err[200];
    assert_int_equal(
        worker_config_parse_spec(&cfg, "gpus=1,gpu_kind=h100,gpu_mem=80G", err, sizeof err), 0);
    cfg.trainer_cuda = trainer_cuda;
    fake_start(0);
    F.claims_to_give = 1;
    fake_bin("cp \"$CONFIG\" ../seen-config.json\n"
             "echo '{\"event\":\"done\",\"t\":0.1,\"step\":20,\"train_loss\":1.5}'\n"
             "exit 0");
    start_worker();
    assert_true(wait_finish(20) > 0);
    assert_int_equal(stop_worker(), 0);
    char path[400];
    snprintf(path, sizeof path, "%s/work/attempts/seen-config.json", dir);
    json_t *conf = json_load_file(path, 0, NULL);
    assert_non_null(conf);
    assert_string_equal(json_string_value(json_object_get(conf, "device")), expect);
    json_decref(conf);
    assert_string_equal(json_string_value(json_object_get(F.register_body, "trainer")), expect);
    char logtext[16384];
    read_worker_log("work", logtext, sizeof logtext);
    const char *warning = strstr(logtext, "w1: warning: 1 GPU declared, but this alallo was built "
                                          "without CUDA: its attempts train on the CPU");
    if (trainer_cuda)
        assert_null(warning);
    else
        assert_non_null(warning);
}

static void a_gpu_worker_with_a_cuda_trainer_trains_on_cuda(void **state)
{
    (void)state;
    gpu_worker_trains_on(true, "cuda");
}

static void a_gpu_worker_without_cuda_trains_on_the_cpu_and_says_so(void **state)
{
    (void)state;
    gpu_worker_trains_on(false, "cpu");
}

static void a_user_error_is_reported_with_its_line(void **state)
{
    (void)state;
    fake_start(0);
    F.claims_to_give = 1;
    /* A relative work folder: the trainer, started inside its attempt's
     * folder, must still find its config. */
    char cwd[512];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(dir), 0);
    snprintf(cfg.work_dir, sizeof cfg.work_dir, "relative-work");
    fake_bin("[ -r \"$CONFIG\" ] || { echo '{\"event\":\"error\",\"kind\":\"user\","
             "\"line\":\"no config\"}'; exit 3; }\n"
             "echo '{\"event\":\"error\",\"t\":0.1,\"kind\":\"user\","
             "\"line\":\"line 3 of train.jsonl: missing field \\\"completion\\\"\"}'\n"
             "exit 3");
    start_worker();
    assert_true(wait_finish(20) > 0);
    assert_int_equal(stop_worker(), 0);
    assert_int_equal(chdir(cwd), 0);
    assert_int_equal(json_integer_value(finish_field("exit_status")), 3);
    assert_string_equal(json_string_value(finish_field("error_kind")), "user");
    assert_string_equal(json_string_value(finish_field("line")),
                        "line 3 of train.jsonl: missing field \"completion\"");
    assert_int_equal(json_array_size(F.events), 1);
}

static void a_crash_reports_the_signal_and_last_stderr_line(void **state)
{
    (void)state;
    fake_start(0);
    F.claims_to_give = 1;
    fake_bin("echo 'something broke inside' >&2\nkill -SEGV $$");
    start_worker();
    assert_true(wait_finish(20) > 0);
    assert_int_equal(stop_worker(), 0);
    assert_true(json_is_null(finish_field("exit_status")));
    assert_int_equal(json_integer_value(finish_field("signal")), SIGSEGV);
    assert_true(json_is_null(finish_field("error_kind")));
    assert_string_equal(json_string_value(finish_field("line")), "something broke inside");
}

static void cancel_stops_the_trainer_with_sigterm(void **state)
{
    (void)state;
    fake_start(0);
    F.claims_to_give = 1;
    F.stop = "cancel";
    F.stop_after_events = 1;
    /* A trainer that checkpoints and exits 4 on SIGTERM, as the protocol says. */
    fake_bin("trap 'echo \"{\\\"event\\\":\\\"checkpoint\\\",\\\"step\\\":3,\\\"path\\\":\\\"/c\\\","
             "\\\"train_loss\\\":2}\"; exit 4' TERM\n"
             "echo '{\"event\":\"started\",\"step\":0,\"max_steps\":100}'\n"
             "i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done\nexit 0");
    double t0 = trainer_proc_now();
    start_worker();
    assert_true(wait_finish(20) > 0);
    assert_true(trainer_proc_now() - t0 < 15);
    assert_int_equal(stop_worker(), 0);
    assert_int_equal(json_integer_value(finish_field("exit_status")), 4);
    assert_string_equal(json_string_value(finish_field("stop")), "cancel");
    assert_string_equal(event_name(json_array_size(F.events) - 1), "checkpoint");
}

static void a_trainer_ignoring_sigterm_is_killed_after_the_grace(void **state)
{
    (void)state;
    fake_start(0);
    F.claims_to_give = 1;
    F.stop = "move";
    cfg.stop_grace_s = 1;
    fake_bin("trap '' TERM\necho '{\"event\":\"started\",\"step\":0}'\n"
             "i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done");
    start_worker();
    assert_true(wait_finish(20) > 0);
    assert_int_equal(stop_worker(), 0);
    assert_int_equal(json_integer_value(finish_field("signal")), SIGKILL);
    assert_string_equal(json_string_value(finish_field("stop")), "move");
}

static void a_fenced_attempt_is_killed_and_not_finished(void **state)
{
    (void)state;
    fake_start(0);
    F.claims_to_give = 1;
    F.fence_events = 1;
    fake_bin("echo \"$$\" > ../trainer.pid\n"
             "while :; do echo '{\"event\":\"step\",\"step\":1,\"loss\":1}'; sleep 0.1; done");
    start_worker();
    /* The trainer goes quickly; the worker goes back to claiming. */
    char path[400];
    snprintf(path, sizeof path, "%s/work/attempts/trainer.pid", dir);
    double until = trainer_proc_now() + 20;
    int pid = 0;
    while (trainer_proc_now() < until) {
        FILE *f = fopen(path, "r");
        if (f) {
            if (fscanf(f, "%d", &pid) != 1)
                pid = 0;
            fclose(f);
        }
        if (pid > 0 && kill(pid, 0) != 0)
            break;
        usleep(100000);
    }
    assert_true(pid > 0);
    assert_int_not_equal(kill(pid, 0), 0);
    int claims_then;
    pthread_mutex_lock(&F.mu);
    claims_then = F.claims;
    pthread_mutex_unlock(&F.mu);
    /* back to claiming: the attempt was over, and its finish (if one
     * were sent) would have come before */
    int claims_now = wait_above(&F.claims, claims_then, 60);
    assert_int_equal(stop_worker(), 0);
    assert_true(claims_now > claims_then);
    assert_int_equal(F.finishes, 0);
}

static void a_bad_spec_finishes_as_internal(void **state)
{
    (void)state;
    fake_start(0);
    F.claims_to_give = 1;
    json_object_set_new(F.claim, "spec", json_string("not an object"));
    fake_bin("exit 0");
    start_worker();
    assert_true(wait_finish(20) > 0);
    assert_int_equal(stop_worker(), 0);
    assert_string_equal(json_string_value(finish_field("error_kind")), "internal");
    assert_non_null(strstr(json_string_value(finish_field("line")), "not a JSON object"));
    assert_true(json_is_null(finish_field("exit_status")));
}

static void worker_stop_moves_the_running_attempt(void **state)
{
    (void)state;
    fake_start(0);
    F.claims_to_give = 1;
    fake_bin("trap 'exit 4' TERM\necho '{\"event\":\"started\",\"step\":0}'\n"
             "i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done");
    start_worker();
    double until = trainer_proc_now() + 20;
    for (;;) {
        pthread_mutex_lock(&F.mu);
        size_t n = json_array_size(F.events);
        pthread_mutex_unlock(&F.mu);
        if (n > 0 || trainer_proc_now() > until)
            break;
        usleep(50000);
    }
    assert_int_equal(stop_worker(), 0);
    assert_int_equal(F.finishes, 1);
    assert_int_equal(json_integer_value(finish_field("exit_status")), 4);
    assert_string_equal(json_string_value(finish_field("stop")), "move");
}

static void registers_again_when_the_server_forgot_it(void **state)
{
    (void)state;
    fake_start(0);
    F.heartbeat_404_once = 1;
    cfg.bench_timeout_s = 0; /* speed unknown */
    fake_bin("exit 0");
    start_worker();
    double until = trainer_proc_now() + 15;
    for (;;) {
        pthread_mutex_lock(&F.mu);
        int n = F.registers;
        pthread_mutex_unlock(&F.mu);
        if (n >= 2 || trainer_proc_now() > until)
            break;
        usleep(50000);
    }
    assert_int_equal(stop_worker(), 0);
    assert_true(F.registers >= 2);
    json_t *speed = json_object_get(F.register_body, "speed");
    assert_true(json_is_null(json_object_get(speed, "tokens_per_s")));
}

static void waits_for_a_server_that_starts_late(void **state)
{
    (void)state;
    /* Find a free port by starting and stopping the server. */
    fake_start(0);
    int port = F.port;
    fake_stop();
    cfg.bench_timeout_s = 0;
    fake_bin("exit 0");
    snprintf(cfg.server_url, sizeof cfg.server_url, "http://127.0.0.1:%d", port);
    assert_int_equal(pthread_create(&runner, NULL, run_worker, NULL), 0);
    sleep(2);
    fake_start(port);
    double until = trainer_proc_now() + 15;
    for (;;) {
        pthread_mutex_lock(&F.mu);
        int n = F.heartbeats;
        pthread_mutex_unlock(&F.mu);
        if (n >= 1 || trainer_proc_now() > until)
            break;
        usleep(50000);
    }
    assert_int_equal(stop_worker(), 0);
    assert_int_equal(F.registers, 1);
    assert_true(F.heartbeats >= 1);
}

static void a_refused_token_ends_worker_run(void **state)
{
    (void)state;
    fake_start(0);
    F.register_status = 401;
    cfg.bench_timeout_s = 0;
    fake_bin("exit 0");
    double t0 = trainer_proc_now();
    start_worker();
    pthread_join(runner, NULL);
    assert_int_not_equal(run_result, 0);
    assert_true(trainer_proc_now() - t0 < 5);
}

static struct worker_config cfg2;
static volatile sig_atomic_t stop2;
static int run_result2;

static void *run_second(void *arg)
{
    (void)arg;
    run_result2 = worker_run(&cfg2, &stop2);
    return NULL;
}

static void two_workers_in_one_process(void **state)
{
    (void)state;
    /* Separate configs, stop flags and logs; both register and heartbeat,
     * and stopping one leaves the other running. */
    fake_start(0);
    cfg.bench_timeout_s = 0;
    fake_bin("exit 0");
    start_worker();
    cfg2 = cfg;
    snprintf(cfg2.name, sizeof cfg2.name, "w2");
    snprintf(cfg2.work_dir, sizeof cfg2.work_dir, "%s/work2", dir);
    stop2 = 0;
    pthread_t t2;
    assert_int_equal(pthread_create(&t2, NULL, run_second, NULL), 0);
    double until = trainer_proc_now() + 15;
    for (;;) {
        pthread_mutex_lock(&F.mu);
        int r = F.registers, h2 = F.heartbeats_w2;
        pthread_mutex_unlock(&F.mu);
        if ((r >= 2 && h2 >= 1) || trainer_proc_now() > until)
            break;
        usleep(50000);
    }
    stop2 = 1;
    pthread_join(t2, NULL);
    assert_int_equal(run_result2, 0);
    pthread_mutex_lock(&F.mu);
    int h1 = F.heartbeats;
    pthread_mutex_unlock(&F.mu);
    assert_true(wait_above(&F.heartbeats, h1, 60) > h1); /* w1 still beats */
    assert_int_equal(stop_worker(), 0);
    assert_true(F.registers >= 2);
    char path[400];
    snprintf(path, sizeof path, "%s/work2/worker.log", dir);
    assert_int_equal(access(path, F_OK), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(a_successful_attempt, setup, teardown),
        cmocka_unit_test_setup_teardown(a_gpu_worker_with_a_cuda_trainer_trains_on_cuda, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_gpu_worker_without_cuda_trains_on_the_cpu_and_says_so,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(a_user_error_is_reported_with_its_line, setup, teardown),
        cmocka_unit_test_setup_teardown(a_crash_reports_the_signal_and_last_stderr_line, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(cancel_stops_the_trainer_with_sigterm, setup, teardown),
        cmocka_unit_test_setup_teardown(a_trainer_ignoring_sigterm_is_killed_after_the_grace,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(a_fenced_attempt_is_killed_and_not_finished, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_bad_spec_finishes_as_internal, setup, teardown),
        cmocka_unit_test_setup_teardown(worker_stop_moves_the_running_attempt, setup, teardown),
        cmocka_unit_test_setup_teardown(registers_again_when_the_server_forgot_it, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(waits_for_a_server_that_starts_late, setup, teardown),
        cmocka_unit_test_setup_teardown(a_refused_token_ends_worker_run, setup, teardown),
        cmocka_unit_test_setup_teardown(two_workers_in_one_process, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
