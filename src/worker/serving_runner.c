/* serving_runner.c - `alallo serving run`: the inference engine on a node,
 * its port and state reported to the server (see serving_runner.h). */
#include "worker/serving_runner.h"

#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "core/clock.h"
#include "core/cmd_help.h"
#include "core/ids.h"
#include "worker/wapi.h"
#include "worker/worker.h"

#define HTTP_TIMEOUT_MS 10000
#define STATS_TIMEOUT_MS 2000
#define STATS_MAX 65536

struct serving {
    char server[256];
    char id[64];
    char token[128];
    char token_arg[1100]; /* "@FILE", passed to the engine as its key */
    char work_dir[1024];
    char host[256];
    char node[256];
    char engine_id[32];
    const char *memory, *running, *threads; /* passed on as given */
    char bin[1024];
    char port_file[1200];
    int port;
    pid_t pid;
};

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static void usage(FILE *f)
{
    fputs("usage: alallo serving run --server URL --id ID --token @FILE --work-dir DIR"
          " [--host HOST] [--model-memory BYTES] [--max-running N] [--threads N]\n",
          f);
}

static void say(const struct serving *s, const char *fmt, const char *what)
{
    fprintf(stderr, "alallo serving %s: ", s->id);
    fprintf(stderr, fmt, what);
    fputc('\n', stderr);
}

static int parse_args(struct serving *s, int argc, char **argv)
{
    if (cmd_help_asked(argc, argv)) {
        usage(stdout);
        return -1;
    }
    if (argc < 2 || strcmp(argv[1], "run") != 0) {
        usage(stderr);
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) {
            fprintf(stderr, "alallo serving run: %s needs a value\n", a);
            return 2;
        }
        const char *v = argv[++i];
        bool ok = true;
        if (strcmp(a, "--server") == 0)
            ok = strlen(v) < sizeof s->server && snprintf(s->server, sizeof s->server, "%s", v);
        else if (strcmp(a, "--id") == 0)
            ok = ids_valid_name(v, sizeof s->id) &&
                 snprintf(s->id, sizeof s->id, "%s", v);
        else if (strcmp(a, "--token") == 0)
            ok = worker_read_token(v, s->token, sizeof s->token) == 0 &&
                 strlen(v) < sizeof s->token_arg &&
                 snprintf(s->token_arg, sizeof s->token_arg, "%s", v);
        else if (strcmp(a, "--work-dir") == 0)
            ok = v[0] == '/' && strlen(v) < sizeof s->work_dir &&
                 snprintf(s->work_dir, sizeof s->work_dir, "%s", v);
        else if (strcmp(a, "--host") == 0)
            ok = v[0] && strlen(v) < sizeof s->host && snprintf(s->host, sizeof s->host, "%s", v);
        else if (strcmp(a, "--model-memory") == 0)
            s->memory = v;
        else if (strcmp(a, "--max-running") == 0)
            s->running = v;
        else if (strcmp(a, "--threads") == 0)
            s->threads = v;
        else {
            fprintf(stderr, "alallo serving run: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "alallo serving run: bad value for %s\n", a);
            return 2;
        }
    }
    if (!s->server[0] || !s->id[0] || !s->token[0] || !s->work_dir[0] ||
        s->token_arg[0] != '@') {
        fprintf(stderr, "alallo serving run: --server, --id, --token @FILE and --work-dir are "
                        "required\n");
        usage(stderr);
        return 2;
    }
    return 0;
}

/* Where it runs: the engine's job id, and the host the server reaches the
 * engine at. */
static void place(struct serving *s)
{
    worker_engine_place(s->engine_id, sizeof s->engine_id, s->node, sizeof s->node);
    if (!s->host[0])
        snprintf(s->host, sizeof s->host, "%s", s->node);
}

/* Starts the engine: `alallo inference --listen 0.0.0.0:0 --key @FILE
 * --port-file F ...`, a child that dies with the runner. */
static pid_t start_engine(struct serving *s)
{
    char *argv[20];
    int n = 0;
    argv[n++] = s->bin;
    argv[n++] = "inference";
    argv[n++] = "--listen";
    argv[n++] = "0.0.0.0:0";
    argv[n++] = "--key";
    argv[n++] = s->token_arg;
    argv[n++] = "--port-file";
    argv[n++] = s->port_file;
    if (s->memory) {
        argv[n++] = "--model-memory";
        argv[n++] = (char *)s->memory;
    }
    if (s->running) {
        argv[n++] = "--max-running";
        argv[n++] = (char *)s->running;
    }
    if (s->threads) {
        argv[n++] = "--threads";
        argv[n++] = (char *)s->threads;
    }
    argv[n] = NULL;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(127);
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        sigaction(SIGTERM, &dfl, NULL);
        sigaction(SIGINT, &dfl, NULL);
        sigaction(SIGPIPE, &dfl, NULL);
        execv(s->bin, argv);
        _exit(127);
    }
    return pid;
}

/* The port the engine wrote, waiting for it while the engine lives; 0
 * when it ended first or took too long. */
static int wait_port(struct serving *s)
{
    double until = clock_mono_s() + SERVING_PORT_WAIT_S;
    while (!stop_flag && clock_mono_s() < until) {
        int status;
        if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
            s->pid = 0;
            return 0;
        }
        FILE *f = fopen(s->port_file, "r");
        int port = 0;
        if (f) {
            if (fscanf(f, "%d", &port) != 1)
                port = 0;
            fclose(f);
        }
        if (port > 0 && port < 65536)
            return port;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* The engine's stats, asked over its port with the key: a new object, or
 * NULL when it did not answer. */
static json_t *engine_stats(const struct serving *s)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0)
        return NULL;
    json_t *req = json_pack("{sb ss}", "stats", 1, "key", s->token);
    char *line = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    char *buf = malloc(STATS_MAX);
    json_t *out = NULL;
    size_t len = 0;
    if (line && buf && connect(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        send(fd, line, strlen(line), MSG_NOSIGNAL) == (ssize_t)strlen(line) &&
        send(fd, "\n", 1, MSG_NOSIGNAL) == 1) {
        double until = clock_mono_s() + STATS_TIMEOUT_MS / 1000.0;
        while (len < STATS_MAX - 1 && !memchr(buf, '\n', len) && clock_mono_s() < until) {
            struct pollfd p = {.fd = fd, .events = POLLIN};
            if (poll(&p, 1, 200) <= 0)
                continue;
            ssize_t k = recv(fd, buf + len, STATS_MAX - 1 - len, 0);
            if (k <= 0)
                break;
            len += (size_t)k;
        }
        char *nl = memchr(buf, '\n', len);
        if (nl)
            out = json_loadb(buf, (size_t)(nl - buf), 0, NULL);
        if (out && !json_is_object(out)) {
            json_decref(out);
            out = NULL;
        }
    }
    if (line) {
        memset(line, 0, strlen(line));
        free(line);
    }
    free(buf);
    close(fd);
    return out;
}

/* One heartbeat: 0 go on, 1 the server asked to stop, 3 it refused this
 * engine. Unreachable is go on. */
static int heartbeat(struct serving *s, struct wapi *api, bool *outage)
{
    char path[160], err[300];
    snprintf(path, sizeof path, "/internal/serving/%s/heartbeat", s->id);
    json_t *stats = engine_stats(s);
    json_t *body = json_pack("{ss si ss ss so}", "host", s->host, "port", s->port, "engine_id",
                             s->engine_id, "node", s->node, "stats", stats ? stats : json_null());
    long status = 0;
    json_t *answer = NULL;
    int rc = wapi_post(api, path, body, &status, &answer, err, sizeof err);
    json_decref(body);
    int verdict = 0;
    if (rc != 0 && !*outage)
        say(s, "heartbeat: %s", err);
    *outage = rc != 0;
    if (rc == 0 && (status == 401 || status == 403 || status == 404)) {
        say(s, "the server refused this engine: %s",
            wapi_error_message(answer, "no reason given"));
        verdict = 3;
    } else if (rc == 0 && status == 200 && json_is_true(json_object_get(answer, "stop"))) {
        say(s, "%s", "the server asked this engine to stop");
        verdict = 1;
    }
    json_decref(answer);
    return verdict;
}

/* Stops the engine (SIGTERM, then SIGKILL after 10 s) and waits for it. */
static void stop_engine(struct serving *s)
{
    if (s->pid <= 0)
        return;
    kill(s->pid, SIGTERM);
    double until = clock_mono_s() + 10;
    int status;
    while (waitpid(s->pid, &status, WNOHANG) == 0) {
        if (clock_mono_s() > until) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &status, 0);
            break;
        }
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    s->pid = 0;
}

int cmd_serving(int argc, char **argv)
{
    struct serving *s = calloc(1, sizeof *s);
    if (!s)
        return 1;
    int rc = parse_args(s, argc, argv);
    if (rc) {
        free(s);
        return rc < 0 ? 0 : rc;
    }
    place(s);
    ssize_t n = readlink("/proc/self/exe", s->bin, sizeof s->bin - 1);
    s->bin[n > 0 ? n : 0] = '\0';
    snprintf(s->port_file, sizeof s->port_file, "%s/%s.port", s->work_dir, s->id);
    worker_catch_stop_signals(on_signal);
    remove(s->port_file); /* an older engine's */
    struct wapi api;
    char err[300];
    rc = 1;
    if (wapi_init(&api, s->server, s->token, HTTP_TIMEOUT_MS, err, sizeof err) != 0) {
        say(s, "%s", err);
        goto out;
    }
    s->pid = start_engine(s);
    s->port = s->pid > 0 ? wait_port(s) : 0;
    if (stop_flag) {
        rc = 0;
        goto done;
    }
    if (s->port <= 0) {
        say(s, "%s", "the engine did not start (its stderr says why)");
        goto done;
    }
    fprintf(stderr, "alallo serving %s: engine on %s:%d (job %s)\n", s->id, s->host, s->port,
            s->engine_id[0] ? s->engine_id : "?");
    bool outage = false;
    while (!stop_flag) {
        int v = heartbeat(s, &api, &outage);
        if (v) {
            rc = v == 1 ? 0 : 3;
            break;
        }
        int status;
        if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
            s->pid = 0;
            say(s, "%s", "the engine ended; this serving job ends with it");
            break;
        }
        for (int i = 0; i < SERVING_BEAT_S * 10 && !stop_flag; i++) {
            struct timespec ts = {.tv_sec = 0, .tv_nsec = 100 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    if (stop_flag)
        rc = 0;
done:
    stop_engine(s);
    wapi_free(&api);
out:
    memset(s->token, 0, sizeof s->token);
    free(s);
    return rc;
}
