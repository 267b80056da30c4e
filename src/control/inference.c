/* inference.c - the engine's supervisor and client (see inference.h). */
#include "control/inference.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "control/engine.h"
#include "control/serving_registry.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/text.h"

#define REMOTE_CONNECT_MS 3000 /* a node's engine that does not answer */

struct inference {
    char bin[512];
    char sock[sizeof(((struct sockaddr_un *)0)->sun_path)];
    struct inference_config cfg;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;     /* inference_stop: end the engine, start no other */
    bool stopping; /* serve is shutting down: an engine that ends stays ended */
    pid_t pid;     /* the engine running now; 0 between runs */
    atomic_long starts;
    struct serving_registry *remote; /* engines on nodes (inference_remote); the
                                        caller's. NULL: the engine beside serve */
    struct engine_config *map;       /* the paths' map to the nodes (its map_*) */
};

/* Starts the engine; its pid, or -1. It ends with the server
 * (PR_SET_PDEATHSIG) even when the server is killed. It has a process
 * group of its own, as the trainer has: a Ctrl-C at serve's terminal
 * reaches serve alone, which then stops the engine itself. */
static pid_t spawn(struct inference *inf)
{
    char mem[32], run[16], tok[32], q[16], th[16];
    text_printf(mem, sizeof mem, "%lld", inf->cfg.model_memory);
    text_printf(run, sizeof run, "%d", inf->cfg.max_running);
    text_printf(tok, sizeof tok, "%lld", inf->cfg.max_tokens);
    text_printf(q, sizeof q, "%d", inf->cfg.max_queued);
    text_printf(th, sizeof th, "%d", inf->cfg.threads);
    char *argv[] = {inf->bin, "inference", "--socket", inf->sock, "--model-memory", mem,
                    "--max-running", run, "--max-tokens-in-flight", tok, "--max-queued", q,
                    inf->cfg.threads > 0 ? "--threads" : NULL, th, NULL};
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        sigset_t none; /* serve blocks SIGTERM for its sigwait: not the engine */
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1);
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* Waits on inf->cv (inf->mu held) until `ms` from now, or a broadcast. */
static void wait_ms(struct inference *inf, long ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&inf->cv, &inf->mu, &until);
}

/* True when the engine that ended with `status` ended because serve is
 * shutting down (inf->mu held). The engine exits 0 only when stopped by
 * SIGTERM or SIGINT (engine.h): when one signal reached serve and the
 * engine together (a service manager stopping the whole group), the
 * engine may end before serve's shutdown is announced, so an engine that
 * was stopped waits up to INFERENCE_STOP_GRACE_MS for that announcement
 * before it counts as ended on its own. */
static bool shutting_down(struct inference *inf, int status)
{
    bool stopped = (WIFEXITED(status) && WEXITSTATUS(status) == 0) ||
                   (WIFSIGNALED(status) &&
                    (WTERMSIG(status) == SIGTERM || WTERMSIG(status) == SIGINT));
    int64_t until = clock_now_ms() + INFERENCE_STOP_GRACE_MS;
    while (stopped && !inf->stop && !inf->stopping && clock_now_ms() < until)
        wait_ms(inf, (long)(until - clock_now_ms()));
    return inf->stop || inf->stopping;
}

static void *supervise(void *arg)
{
    struct inference *inf = arg;
    long delay_ms = 200;
    pthread_mutex_lock(&inf->mu);
    while (!inf->stop && !inf->stopping) {
        pid_t pid = spawn(inf);
        if (pid < 0) {
            log_line("error", "cannot start the inference engine: %s", strerror(errno));
        } else {
            inf->pid = pid;
            atomic_fetch_add(&inf->starts, 1);
            pthread_mutex_unlock(&inf->mu);
            int status = 0;
            int64_t began = clock_now_ms();
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
            pthread_mutex_lock(&inf->mu);
            inf->pid = 0;
            int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
            int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
            if (shutting_down(inf, status)) {
                log_line("info", "the inference engine was stopped (exit %d, signal %d)", code,
                         sig);
                break;
            }
            log_line("error", "the inference engine ended (exit %d, signal %d); restarting it",
                     code, sig);
            /* a crash at once again backs off, up to 10 s; a long run resets */
            delay_ms = clock_now_ms() - began > 30000 ? 200 : delay_ms * 2;
            delay_ms = delay_ms > 10000 ? 10000 : delay_ms;
        }
        if (!inf->stop && !inf->stopping)
            wait_ms(inf, delay_ms);
    }
    pthread_mutex_unlock(&inf->mu);
    return NULL;
}

struct inference *inference_start(const char *bin, const char *data_dir,
                                  const struct inference_config *cfg)
{
    struct inference *inf = calloc(1, sizeof *inf);
    if (!inf)
        return NULL;
    text_copy(inf->bin, sizeof inf->bin, bin);
    inf->cfg = *cfg;
    if (!text_printf(inf->sock, sizeof inf->sock, "%s/inference-%d.sock", data_dir,
                     (int)getpid()))
        text_printf(inf->sock, sizeof inf->sock, "/tmp/alallo-inference-%d.sock", (int)getpid());
    pthread_mutex_init(&inf->mu, NULL);
    pthread_cond_init(&inf->cv, NULL);
    if (pthread_create(&inf->thread, NULL, supervise, inf) != 0) {
        pthread_mutex_destroy(&inf->mu);
        pthread_cond_destroy(&inf->cv);
        free(inf);
        return NULL;
    }
    return inf;
}

struct inference *inference_remote(struct serving_registry *registry, const char *map_from,
                                   const char *map_to)
{
    struct inference *inf = calloc(1, sizeof *inf);
    struct engine_config *map = calloc(1, sizeof *map);
    if (!inf || !map || !text_copy(map->map_from, sizeof map->map_from, map_from) ||
        !text_copy(map->map_to, sizeof map->map_to, map_to)) {
        free(inf);
        free(map);
        return NULL;
    }
    inf->remote = registry;
    inf->map = map;
    return inf;
}

void inference_stopping(struct inference *inf)
{
    if (!inf || inf->remote)
        return;
    pthread_mutex_lock(&inf->mu);
    inf->stopping = true;
    pthread_cond_broadcast(&inf->cv);
    pthread_mutex_unlock(&inf->mu);
}

void inference_stop(struct inference *inf)
{
    if (!inf)
        return;
    if (inf->remote) {
        free(inf->map);
        free(inf);
        return;
    }
    pthread_mutex_lock(&inf->mu);
    inf->stop = true;
    if (inf->pid > 0)
        kill(inf->pid, SIGTERM);
    pthread_cond_broadcast(&inf->cv);
    pthread_mutex_unlock(&inf->mu);
    pthread_join(inf->thread, NULL);
    pthread_mutex_destroy(&inf->mu);
    pthread_cond_destroy(&inf->cv);
    free(inf);
}

long inference_starts(const struct inference *inf)
{
    return inf && !inf->remote ? atomic_load(&inf->starts) : 0;
}

/* A TCP connection to host:port within REMOTE_CONNECT_MS; -1 when none. */
static int connect_tcp(const char *host, int port)
{
    char service[16];
    text_printf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, service, &hints, &res) != 0)
        return -1;
    int fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0)
            continue;
        int rc = connect(fd, a->ai_addr, a->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int err = 0;
            socklen_t len = sizeof err;
            rc = poll(&p, 1, REMOTE_CONNECT_MS) == 1 &&
                         getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0
                     ? 0
                     : -1;
        }
        if (rc != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd >= 0)
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

/* A model path of the request as the nodes see it, in place; false when
 * it does not fit. */
static bool map_key(const struct inference *inf, json_t *req, const char *key)
{
    const char *v = json_string_value(json_object_get(req, key));
    char out[1024];
    if (!v)
        return true;
    return engine_map_path(inf->map, v, out, sizeof out) &&
           json_object_set_new(req, key, json_string(out)) == 0;
}

/* The line to send a node's engine for `request` (its key, the paths
 * mapped) and a connection to the engine chosen for it, waiting up to
 * wait_ms for one to be known. -1 when none answered; *line is the
 * caller's either way (NULL when out of memory). */
static int connect_remote(struct inference *inf, const json_t *request, int wait_ms,
                          char **line)
{
    *line = NULL;
    json_t *req = json_deep_copy(request);
    if (!req || !map_key(inf, req, "weights") || !map_key(inf, req, "adapter")) {
        json_decref(req);
        return -1;
    }
    const char *weights = json_string_value(json_object_get(req, "weights"));
    const char *adapter = json_string_value(json_object_get(req, "adapter"));
    int64_t until = clock_now_ms() + wait_ms;
    struct serving_target t;
    int fd = -1;
    for (;;) {
        if (serving_registry_pick(inf->remote, weights, adapter, clock_now_ms(), &t)) {
            fd = connect_tcp(t.host, t.port);
            if (fd >= 0)
                break;
            log_line("warn", "the inference engine %s at %s:%d does not answer", t.id, t.host,
                     t.port);
        } else { /* none: an engine may start for it (sched/serve_scale.h) */
            serving_registry_missed(inf->remote, clock_now_ms());
        }
        if (clock_now_ms() >= until)
            break;
        usleep(100 * 1000);
    }
    if (fd >= 0 && json_object_set_new(req, "key", json_string(t.key)) == 0)
        *line = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    memset(t.key, 0, sizeof t.key);
    return fd;
}

/* A connection to the engine, waiting up to wait_ms for one that is
 * (re)starting. -1 when none came. */
static int connect_engine(struct inference *inf, int wait_ms)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    text_copy(a.sun_path, sizeof a.sun_path, inf->sock);
    int64_t until = clock_now_ms() + wait_ms;
    for (;;) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -1;
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
            return fd;
        close(fd);
        if (clock_now_ms() >= until)
            return -1;
        usleep(50 * 1000);
    }
}

static bool send_all(int fd, const char *s, size_t len)
{
    while (len > 0) {
        ssize_t k = send(fd, s, len, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false;
        s += k;
        len -= (size_t)k;
    }
    return true;
}

/* inference_call, waiting wait_ms for an engine to connect to. */
/* Whether o is a streamed answer's prompt line (engine.h): an object of
 * "prompt_text" (a string) and "prompt_logprobs" (an array), one or both. */
static bool prompt_line(const json_t *o)
{
    json_t *t = json_object_get(o, "prompt_text"), *lp = json_object_get(o, "prompt_logprobs");
    return (t || lp) && (!t || json_is_string(t)) && (!lp || json_is_array(lp)) &&
           json_object_size(o) == (size_t)(!!t + !!lp);
}

static enum alallo_err call(struct inference *inf, const json_t *request, int wait_ms,
                            int timeout_s, int watch_fd,
                            void (*on_delta)(void *ctx, const char *piece, size_t len,
                                             const json_t *logprobs),
                            void *ctx, json_t **out, char *why, size_t whycap)
{
    *out = NULL;
    why[0] = '\0';
    static const char restarting[] =
        "The inference engine is restarting; retry after Retry-After seconds.";
    char *line = NULL;
    int fd = -1;
    if (inf->remote) {
        fd = connect_remote(inf, request, wait_ms, &line);
    } else {
        line = json_dumps(request, JSON_COMPACT);
        fd = line ? connect_engine(inf, wait_ms) : -1;
    }
    if (fd < 0 || !line) {
        free(line);
        if (fd >= 0)
            close(fd);
        text_copy(why, whycap, restarting);
        return ERR_UNAVAILABLE;
    }
    bool sent = send_all(fd, line, strlen(line)) && send_all(fd, "\n", 1);
    memset(line, 0, strlen(line)); /* a node's engine's key */
    free(line);
    int64_t until = clock_now_ms() + (int64_t)timeout_s * 1000;
    size_t len = 0, cap = 1 << 16;
    char *buf = malloc(cap);
    enum alallo_err e = ERR_UNAVAILABLE;
    text_copy(why, whycap, restarting);
    while (sent && buf) {
        int64_t left = until - clock_now_ms();
        /* the engine's lines, and the client's hang-up (never its data: a
         * next request it may already have sent stays unread) */
        struct pollfd p[2] = {{.fd = fd, .events = POLLIN},
                              {.fd = watch_fd > 0 ? watch_fd : -1, .events = POLLRDHUP}};
        int ready = left > 0 ? poll(p, 2, (int)(left > 60000 ? 60000 : left)) : 0;
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready == 0 && clock_now_ms() < until)
            continue;
        if (ready == 0)
            text_copy(why, whycap, "The generation took too long and was stopped.");
        else if (ready > 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)))
            text_copy(why, whycap, "The client went away; the generation was cancelled.");
        if (ready <= 0 || p[1].revents)
            break; /* closing the connection cancels it in the engine */
        if (len + 4096 > cap) {
            char *b = cap < (64u << 20) ? realloc(buf, cap * 2) : NULL;
            if (!b)
                break;
            buf = b;
            cap *= 2;
        }
        ssize_t k = recv(fd, buf + len, cap - len, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break; /* the engine went away before its final line */
        len += (size_t)k;
        char *start = buf, *nl;
        bool done = false;
        while ((nl = memchr(start, '\n', len - (size_t)(start - buf)))) {
            json_t *o = json_loadb(start, (size_t)(nl - start), 0, NULL);
            start = nl + 1;
            json_t *d = json_object_get(o, "delta");
            json_t *lp = json_object_get(o, "logprobs");
            if (json_is_string(d) && json_object_size(o) == 1 + (lp != NULL)) {
                if (on_delta)
                    on_delta(ctx, json_string_value(d), json_string_length(d), lp);
                json_decref(o);
                continue;
            }
            if (prompt_line(o)) { /* before the deltas */
                if (on_delta)
                    on_delta(ctx, NULL, 0, o);
                json_decref(o);
                continue;
            }
            if (!json_is_object(o)) {
                json_decref(o);
                continue;
            }
            *out = o;
            done = true;
            break;
        }
        if (done) {
            e = ERR_OK;
            why[0] = '\0';
            break;
        }
        len -= (size_t)(start - buf);
        memmove(buf, start, len);
    }
    free(buf);
    close(fd);
    return e;
}

enum alallo_err inference_call(struct inference *inf, const json_t *request, int timeout_s,
                               int watch_fd,
                               void (*on_delta)(void *ctx, const char *piece, size_t len,
                                                const json_t *logprobs),
                               void *ctx, json_t **out, char *why, size_t whycap)
{
    return call(inf, request, INFERENCE_CONNECT_WAIT_MS, timeout_s, watch_fd, on_delta, ctx, out,
                why, whycap);
}

enum alallo_err inference_stats(struct inference *inf, json_t **out)
{
    if (inf->remote) {
        *out = serving_registry_stats(inf->remote, clock_now_ms());
        return *out ? ERR_OK : ERR_UNAVAILABLE;
    }
    char why[200];
    json_t *req = json_pack("{sb}", "stats", 1);
    enum alallo_err e = req ? call(inf, req, 0, 2, 0, NULL, NULL, out, why, sizeof why) : ERR_NOMEM;
    json_decref(req);
    return e;
}
