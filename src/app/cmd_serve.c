/* cmd_serve.c - `alallo serve`: the control plane on one machine.
 *
 *   alallo serve [--port N] [--host ADDR] [--data DIR] [--models DIR]
 *                [--local-worker SPEC|none]... [--worker-timeout S]
 *                [--time-limit S] [--webhook URL] [--webhook-allow CIDR]...
 *                [--max-upload BYTES]
 *                [--executor slurm|process [--slurm-pool SPEC]... [--cluster-data S=N]
 *                 [--runner-url URL]] [--advertise URL] [--wandb-url URL]
 *
 * Opens the store (SQLite in DATA, or --store URL: docs/store.md; DATA keeps
 * the files either way), creating the account `default` and the key files
 * on first run, and serves the API and the dashboard. Several serves may
 * share one store: one leads (control/leadership.h) and the others stand
 * by, answering reads and forwarding writes to it (api/forward.h). The
 * leader starts the local workers (threads that speak the worker protocol
 * to this server over loopback) and watches for lost workers and jobs past
 * their limits; a standby that takes the lead starts its own then. SIGTERM
 * or SIGINT stops it gracefully: local workers checkpoint and hand back
 * their attempts first. A leader that loses its lock stops the same way
 * and exits with status 3, to be restarted as a standby. See
 * docs/operations.md.
 */
#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api/http_mhd.h"
#include "api/ratelimit.h"
#include "api/server.h"
#include "app/cmds.h"
#include "control/control.h"
#include "control/engine.h"
#include "control/inference.h"
#include "control/serving_registry.h"
#include "control/leadership.h"
#include "control/webhook_delivery.h"
#include "control/service.h"
#include "control/setup.h"
#include "control/tick.h"
#include "store/leader_lock.h"
#include "control/wandb_forward.h"
#include "control/workers.h"
#include "core/cmd_help.h"
#include "core/text.h"
#include "train/run/train_device.h"
#include "worker/worker.h"

#define LOCAL_WORKERS_MAX 16

struct local_worker {
    struct worker_config cfg;
    pthread_t thread;
    int started;
};

static volatile sig_atomic_t workers_stop;

static void *run_local_worker(void *arg)
{
    struct local_worker *lw = arg;
    if (worker_run(&lw->cfg, &workers_stop) != 0)
        log_line("error", "local worker %s stopped: it could not register", lw->cfg.name);
    return NULL;
}

struct watcher {
    struct control *ctl;
    struct local_worker *lw; /* started when this process takes the lead */
    int n_local;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    atomic_int lost; /* leadership was lost: the process stops, status 3 */
};

static void start_local_workers(struct watcher *w)
{
    for (int i = 0; i < w->n_local; i++) {
        struct local_worker *lw = &w->lw[i];
        if (lw->started)
            continue;
        if (pthread_create(&lw->thread, NULL, run_local_worker, lw) == 0)
            lw->started = 1;
        printf("alallo: local worker %s: %d cpus, %.1f GB, %s, %.2f/h\n", lw->cfg.name,
               lw->cfg.cpus, (double)lw->cfg.mem_bytes / 1e9, lw->cfg.class_,
               lw->cfg.price_per_hour);
    }
    fflush(stdout);
}

/* Every half second the leader lock (control_leadership_step): taking the
 * lead starts the local workers, losing it stops the process (SIGTERM to
 * itself, taken by the main thread's sigwait). Once a second the control
 * layer's tick (control_tick, control/tick.h), which only the leader acts
 * on. */
static void *watch(void *arg)
{
    struct watcher *w = arg;
    long step = 0, tick = 0;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += LEADERSHIP_STEP_MS * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        if (w->stop)
            break;
        pthread_mutex_unlock(&w->mu);
        enum leadership_change ch = control_leadership_step(w->ctl);
        if (ch == LEADERSHIP_TAKEN) {
            start_local_workers(w);
        } else if (ch == LEADERSHIP_LOST && !w->lost) {
            w->lost = 1;
            kill(getpid(), SIGTERM);
        }
        if (++step % (1000 / LEADERSHIP_STEP_MS) == 0)
            control_tick(w->ctl, clock_now_ms(), ++tick);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static void usage(FILE *f)
{
    fputs("usage: alallo serve [--port N] [--host ADDR] [--data DIR] [--models DIR]\n"
          "                    [--store URL (default: SQLite in DATA; postgresql://...)]\n"
          "                    [--local-worker SPEC|none]... [--worker-timeout S]\n"
          "                    [--time-limit S] [--budget-multiple X] [--start-timeout S]\n"
          "                    [--plan-scale X] [--webhook URL] [--webhook-allow CIDR]...\n"
          "                    [--max-upload BYTES]\n"
          "                    [--rate-limit PER_SECOND] [--header-timeout S]\n"
          "                    [--executor slurm|process] [--slurm-pool POOL]...\n"
          "                    [--cluster-data SERVER_PREFIX=NODE_PREFIX] [--runner-url URL]\n"
          "                    [--advertise URL] [--wandb-url URL (default " WANDB_DEFAULT_URL ")]\n"
          "                    [--inference engine|child] [--inference-memory BYTES]\n"
          "                    [--inference-max-running N] [--inference-max-tokens N]\n"
          "                    [--inference-max-queued N] [--inference-threads N]\n"
          "                    [--inference-pool POOL[:N|:MIN-MAX]]... [--inference-idle S]\n"
          "  SPEC: name=small,cpus=1,mem=2G,price=0.40,class=spot\n"
          "  POOL: name=spot,partition=spot,gres=gpu:1,cpus=2,mem=4G,class=spot,price=0.80/h,"
          "slots=4\n",
          f);
}

/* Makes `path` absolute (it must exist). */
static int absolute(const char *path, char *out, size_t cap)
{
    char buf[PATH_MAX];
    if (!realpath(path, buf))
        return -1;
    return text_copy(out, cap, buf) ? 0 : -1;
}

/* models/ next to the source tree the binary was built in (build/alallo ->
 * ../models), else ./models. */
static void default_models_dir(char *out, size_t cap)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            char guess[PATH_MAX + 16];
            struct stat st;
            if (text_printf(guess, sizeof guess, "%s/../models", exe) && stat(guess, &st) == 0 &&
                S_ISDIR(st.st_mode) && absolute(guess, out, cap) == 0)
                return;
        }
    }
    text_copy(out, cap, "models");
}

struct serve_args {
    const char *host;
    const char *data;
    const char *store; /* a store URL (store_open_url); NULL: SQLite in data */
    const char *models;
    const char *specs[LOCAL_WORKERS_MAX];
    int n_specs;
    bool no_workers;
    const char *executor;     /* NULL, "slurm" or "process" (docs/slurm.md) */
    const char *pools[ENGINE_POOLS_MAX];
    int n_pools;
    const char *cluster_data; /* SERVER_PREFIX=NODE_PREFIX */
    const char *runner_url;   /* what runners call; default the served address */
    const char *inference_pools[ENGINE_SERVE_POOLS_MAX]; /* --inference-pool
                                 * POOL[:N|:MIN-MAX], once per pool: engines on nodes */
    int n_inference_pools;
    int inference_idle_s;       /* --inference-idle: an engine beyond MIN stops */
    const char *advertise;    /* where the others reach this serve; NULL: from --host, --port */
    const char *wandb_url;    /* the W&B-compatible server (control/wandb_forward.h) */
    bool inference_child;     /* --inference child: no resident engine */
    struct inference_config inference; /* --inference-* (control/inference.h) */
};

static int parse_args(int argc, char **argv, struct api_config *cfg, struct control_config *ccfg,
                      struct serve_args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        long v;
        if (!val) {
            fprintf(stderr, "alallo serve: %s needs a value\n", arg);
            return -1;
        }
        i++;
        if (strcmp(arg, "--port") == 0) {
            if (!text_parse_long(val, 0, 65535, &v))
                goto bad;
            cfg->port = (int)v;
        } else if (strcmp(arg, "--host") == 0) {
            a->host = val;
        } else if (strcmp(arg, "--data") == 0) {
            a->data = val;
        } else if (strcmp(arg, "--store") == 0) {
            a->store = val;
        } else if (strcmp(arg, "--models") == 0) {
            a->models = val;
        } else if (strcmp(arg, "--wandb-url") == 0) {
            /* where jobs' metrics go for their W&B integration (self-hosted W&B) */
            if (strncmp(val, "http://", 7) != 0 && strncmp(val, "https://", 8) != 0)
                goto bad;
            a->wandb_url = val;
        } else if (strcmp(arg, "--advertise") == 0) {
            /* The URL other serves of the same store forward writes to
             * when this one leads (docs/operations.md). */
            if ((strncmp(val, "http://", 7) != 0 && strncmp(val, "https://", 8) != 0) ||
                strlen(val) >= LEADER_URL_MAX)
                goto bad;
            a->advertise = val;
        } else if (strcmp(arg, "--local-worker") == 0) {
            if (strcmp(val, "none") == 0) {
                a->no_workers = true;
            } else if (a->n_specs < LOCAL_WORKERS_MAX) {
                a->specs[a->n_specs++] = val;
            } else {
                fprintf(stderr, "alallo serve: at most %d local workers\n", LOCAL_WORKERS_MAX);
                return -1;
            }
        } else if (strcmp(arg, "--executor") == 0) {
            if (strcmp(val, "slurm") != 0 && strcmp(val, "process") != 0)
                goto bad;
            a->executor = val;
        } else if (strcmp(arg, "--slurm-pool") == 0 || strcmp(arg, "--pool") == 0) {
            if (a->n_pools >= ENGINE_POOLS_MAX) {
                fprintf(stderr, "alallo serve: at most %d pools\n", ENGINE_POOLS_MAX);
                return -1;
            }
            a->pools[a->n_pools++] = val;
        } else if (strcmp(arg, "--cluster-data") == 0) {
            const char *eq = strchr(val, '=');
            if (!eq || eq == val || val[0] != '/' || eq[1] != '/')
                goto bad;
            a->cluster_data = val;
        } else if (strcmp(arg, "--runner-url") == 0) {
            if (strncmp(val, "http://", 7) != 0 && strncmp(val, "https://", 8) != 0)
                goto bad;
            a->runner_url = val;
        } else if (strcmp(arg, "--inference-pool") == 0) {
            if (a->n_inference_pools >= ENGINE_SERVE_POOLS_MAX) {
                fprintf(stderr, "alallo serve: --inference-pool %s: more than %d pools serve\n",
                        val, ENGINE_SERVE_POOLS_MAX);
                return -1;
            }
            a->inference_pools[a->n_inference_pools++] = val;
        } else if (strcmp(arg, "--inference-idle") == 0) {
            if (!text_parse_long(val, 1, 86400, &v))
                goto bad;
            a->inference_idle_s = (int)v;
        } else if (strcmp(arg, "--inference") == 0) {
            /* engine: the resident engine (docs/serving.md); child: a
             * process per request, nothing kept loaded between them */
            if (strcmp(val, "engine") != 0 && strcmp(val, "child") != 0)
                goto bad;
            a->inference_child = strcmp(val, "child") == 0;
        } else if (strcmp(arg, "--inference-memory") == 0) {
            if (!text_parse_long(val, 1L << 20, 1L << 50, &v))
                goto bad;
            a->inference.model_memory = v;
        } else if (strcmp(arg, "--inference-max-running") == 0) {
            if (!text_parse_long(val, 1, 4096, &v))
                goto bad;
            a->inference.max_running = (int)v;
        } else if (strcmp(arg, "--inference-max-tokens") == 0) {
            if (!text_parse_long(val, 1, 1L << 30, &v))
                goto bad;
            a->inference.max_tokens = v;
        } else if (strcmp(arg, "--inference-max-queued") == 0) {
            if (!text_parse_long(val, 1, 1L << 20, &v))
                goto bad;
            a->inference.max_queued = (int)v;
        } else if (strcmp(arg, "--inference-threads") == 0) {
            if (!text_parse_long(val, 1, 1024, &v))
                goto bad;
            a->inference.threads = (int)v;
            ccfg->generate_threads = (int)v; /* a child per request too */
        } else if (strcmp(arg, "--worker-timeout") == 0) {
            if (!text_parse_long(val, 1, 86400, &v))
                goto bad;
            ccfg->worker_timeout_s = (int)v;
        } else if (strcmp(arg, "--time-limit") == 0) {
            if (!text_parse_long(val, 1, 365L * 86400, &v))
                goto bad;
            ccfg->time_limit_s = v;
        } else if (strcmp(arg, "--budget-multiple") == 0) {
            char *end;
            double m = strtod(val, &end);
            if (end == val || *end || !(m >= 0.01 && m <= 1000))
                goto bad;
            ccfg->budget_multiple = m;
        } else if (strcmp(arg, "--start-timeout") == 0) {
            if (!text_parse_long(val, 1, 86400, &v))
                goto bad;
            ccfg->start_timeout_s = (int)v;
        } else if (strcmp(arg, "--plan-scale") == 0) {
            /* For tests and operators who know their trainer's memory
             * better than the planner: the planned need times this. */
            char *end;
            double m = strtod(val, &end);
            if (end == val || *end || !(m >= 0.001 && m <= 1000))
                goto bad;
            ccfg->plan_scale = m;
        } else if (strcmp(arg, "--webhook") == 0) {
            if ((strncmp(val, "http://", 7) != 0 && strncmp(val, "https://", 8) != 0) ||
                !text_copy(ccfg->webhook, sizeof ccfg->webhook, val))
                goto bad;
        } else if (strcmp(arg, "--webhook-allow") == 0) {
            /* an internal range accounts' webhooks may reach (docs/security.md) */
            if (webhook_allow_add(&ccfg->webhook_allow, val) != 0) {
                fprintf(stderr,
                        "alallo serve: bad value for --webhook-allow: %s (a CIDR range such as "
                        "10.1.0.0/16 or fd00::/8; at most %d)\n",
                        val, WEBHOOK_ALLOW_MAX);
                return -1;
            }
        } else if (strcmp(arg, "--rate-limit") == 0) {
            /* Requests per second per API key (bursts of twice that); 0 = off. */
            char *end;
            double r = strtod(val, &end);
            if (end == val || *end || !(r >= 0 && r <= 1e6))
                goto bad;
            cfg->rate_limit = r;
        } else if (strcmp(arg, "--header-timeout") == 0) {
            /* Seconds a connection has to send its request's headers,
             * from when it opens or its previous answer ends; bytes that
             * trickle in do not extend it (docs/security.md). */
            if (!text_parse_long(val, 1, 3600, &v))
                goto bad;
            cfg->header_timeout_s = (int)v;
        } else if (strcmp(arg, "--max-upload") == 0) {
            int64_t bytes;
            if (worker_parse_size(val, &bytes) || bytes < 1024 || bytes > (4LL << 30))
                goto bad;
            cfg->max_upload = bytes;
        } else {
            fprintf(stderr, "alallo serve: unknown option %s\n", arg);
            usage(stderr);
            return -1;
        }
        continue;
    bad:
        fprintf(stderr, "alallo serve: bad value for %s: %s\n", arg, val);
        return -1;
    }
    /* Workers heartbeat every 2 s, more often when the timeout is short, so
     * that at least three heartbeats fit in it. */
    ccfg->heartbeat_s = ccfg->worker_timeout_s >= 6 ? 2 : 1;
    if ((a->n_pools || a->cluster_data || a->runner_url || a->n_inference_pools) &&
        !a->executor) {
        fprintf(stderr, "alallo serve: --slurm-pool, --cluster-data, --runner-url and "
                        "--inference-pool need --executor\n");
        return -1;
    }
    if (a->n_inference_pools && a->inference_child) {
        fprintf(stderr, "alallo serve: --inference-pool runs engines on nodes; --inference child "
                        "runs none\n");
        return -1;
    }
    if (a->executor && strcmp(a->executor, "slurm") == 0 && !a->n_pools) {
        fprintf(stderr, "alallo serve: --executor slurm needs at least one --slurm-pool\n");
        return -1;
    }
    if (a->no_workers && a->n_specs) {
        fprintf(stderr, "alallo serve: --local-worker none cannot go with other workers\n");
        return -1;
    }
    return 0;
}

/* Builds the local workers' configurations. Returns how many, or -1. */
static int local_workers(const struct serve_args *a, const struct api_server *srv, int port,
                         struct local_worker *lw)
{
    if (a->no_workers || (a->executor && !a->n_specs))
        return 0; /* an engine's pools are the capacity */
    int n = a->n_specs ? a->n_specs : 1;
    for (int i = 0; i < n; i++) {
        struct worker_config *c = &lw[i].cfg;
        worker_config_defaults(c);
        if (!a->n_specs)
            text_copy(c->name, sizeof c->name, "local");
        char err[256];
        if (a->n_specs && (worker_config_parse_spec(c, a->specs[i], err, sizeof err) != 0 ||
                           worker_config_check(c, err, sizeof err) != 0)) {
            fprintf(stderr, "alallo serve: --local-worker %s: %s\n", a->specs[i], err);
            return -1;
        }
        for (int k = 0; k < i; k++) {
            if (strcmp(lw[k].cfg.name, c->name) == 0) {
                fprintf(stderr, "alallo serve: two local workers are named %s\n", c->name);
                return -1;
            }
        }
        text_printf(c->server_url, sizeof c->server_url, "http://127.0.0.1:%d", port);
        text_copy(c->token, sizeof c->token, srv->worker_token);
        text_copy(c->alallo_bin, sizeof c->alallo_bin, srv->ctl->alallo_bin);
        c->trainer_cuda = train_device_cuda_built() != 0; /* alallo_bin is this binary */
        if (!text_printf(c->work_dir, sizeof c->work_dir, "%s/workers/%s", srv->ctl->cfg.data_dir,
                         c->name)) {
            fprintf(stderr, "alallo serve: the data folder's path is too long\n");
            return -1;
        }
        mkdir(c->work_dir, 0700);
    }
    return n;
}

/* The absolute path of `name` in PATH, for a batch script run with no
 * PATH (Slurm's --export=NONE). */
static bool in_path(const char *name, char *out, size_t cap)
{
    const char *path = getenv("PATH");
    char dirs[4096];
    if (!path || !text_copy(dirs, sizeof dirs, path))
        return false;
    char *save = NULL;
    for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save))
        if (d[0] == '/' && text_printf(out, cap, "%s/%s", d, name) && access(out, X_OK) == 0)
            return true;
    return false;
}

/* Starts the engine --executor names over the pools declared (docs/slurm.md).
 * Returns 0 (also when there is none), or -1 with a reason printed. */
static int start_engine(struct control *ctl, const struct serve_args *a, const char *host,
                        int port)
{
    if (!a->executor)
        return 0;
    static struct engine_config ec; /* big; read once by engine_start */
    memset(&ec, 0, sizeof ec);
    char err[512];
    bool slurm = strcmp(a->executor, "slurm") == 0;
    const char *local = "name=local,partition=local,mem=2G,class=on-demand,price=0.40/h,slots=1";
    int n = a->n_pools ? a->n_pools : 1;
    for (int i = 0; i < n; i++) {
        const char *spec = a->n_pools ? a->pools[i] : local;
        if (engine_pool_parse(spec, &ec.pools[i], err, sizeof err) != 0) {
            fprintf(stderr, "alallo serve: --slurm-pool %s: %s\n", spec, err);
            return -1;
        }
        for (int k = 0; k < i; k++)
            if (strcmp(ec.pools[k].decl.name, ec.pools[i].decl.name) == 0) {
                fprintf(stderr, "alallo serve: two pools are named %s\n", ec.pools[i].decl.name);
                return -1;
            }
    }
    ec.n_pools = n;
    if (a->runner_url)
        text_copy(ec.server_url, sizeof ec.server_url, a->runner_url);
    else
        text_printf(ec.server_url, sizeof ec.server_url, "http://%s:%d", host, port);
    if (a->cluster_data) {
        const char *eq = strchr(a->cluster_data, '=');
        if (!text_printf(ec.map_from, sizeof ec.map_from, "%.*s", (int)(eq - a->cluster_data),
                         a->cluster_data) ||
            !text_copy(ec.map_to, sizeof ec.map_to, eq + 1)) {
            fprintf(stderr, "alallo serve: --cluster-data is too long\n");
            return -1;
        }
    }
    if (slurm) {
        char srun[EXEC_PATH_MAX - 32];
        if (!in_path("srun", srun, sizeof srun)) {
            fprintf(stderr, "alallo serve: --executor slurm: srun is not in PATH\n");
            return -1;
        }
        /* srun: preemption's SIGTERM reaches the job's steps only. */
        text_printf(ec.launcher, sizeof ec.launcher, "%s --kill-on-bad-exit=1", srun);
    }
    for (int i = 0; i < a->n_inference_pools; i++) /* POOL, POOL:N or POOL:MIN-MAX */
        if (engine_serve_parse(a->inference_pools[i], &ec, err, sizeof err) != 0) {
            fprintf(stderr, "alallo serve: %s\n", err);
            return -1;
        }
    if (a->n_inference_pools) {
        ec.serve_idle_s = a->inference_idle_s;
        ec.serve_memory = a->inference.model_memory;
        ec.serve_running = a->inference.max_running;
    }
    if (engine_start(ctl, a->executor, &ec, err, sizeof err) != 0) {
        fprintf(stderr, "alallo serve: --executor %s: %s\n", a->executor, err);
        return -1;
    }
    /* Generations go to the engines on the pool's nodes (control/inference.h). */
    if (a->n_inference_pools && !(ctl->inference = inference_remote(ctl->serving, ec.map_from,
                                                                 ec.map_to))) {
        fprintf(stderr, "alallo serve: out of memory\n");
        return -1;
    }
    printf("alallo: executor %s: %d pool(s); runners call %s\n", a->executor, ec.n_pools,
           ec.server_url);
    return 0;
}

int cmd_serve(int argc, char **argv)
{
    static struct control ctl;    /* big; lives as long as the process */
    static struct api_server srv = {.ctl = &ctl};
    struct serve_args a = {.host = "127.0.0.1",
                           .data = "var",
                           .wandb_url = WANDB_DEFAULT_URL,
                           .inference = {.model_memory = 8LL << 30,
                                         .max_running = 32,
                                         .max_tokens = 65536,
                                         .max_queued = 64}};
    api_config_defaults(&srv.cfg);
    control_config_defaults(&ctl.cfg);
    if (cmd_help_asked(argc, argv)) {
        usage(stdout);
        return 0;
    }
    if (parse_args(argc, argv, &srv.cfg, &ctl.cfg, &a))
        return 2;

    /* Signals are taken by sigwait below; every thread started from here
     * on inherits the block. Trainers get their mask reset. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    umask(077); /* the store holds key hashes; uploads are people's data */
    curl_global_init(CURL_GLOBAL_DEFAULT);

    char err[512];
    if (setup_data_dir(a.data, err, sizeof err) != 0 ||
        absolute(a.data, ctl.cfg.data_dir, sizeof ctl.cfg.data_dir) != 0) {
        fprintf(stderr, "alallo serve: %s\n", err[0] ? err : "bad --data folder");
        return 1;
    }
    if (a.models) {
        if (absolute(a.models, ctl.cfg.models_dir, sizeof ctl.cfg.models_dir) != 0) {
            fprintf(stderr, "alallo serve: --models %s: %s\n", a.models, strerror(errno));
            return 1;
        }
    } else {
        default_models_dir(ctl.cfg.models_dir, sizeof ctl.cfg.models_dir);
    }
    ssize_t n = readlink("/proc/self/exe", ctl.alallo_bin, sizeof ctl.alallo_bin - 1);
    if (n <= 0) {
        fprintf(stderr, "alallo serve: cannot find its own binary\n");
        return 1;
    }
    ctl.alallo_bin[n] = '\0';

    struct store *store;
    if (setup_open_store_at(a.store, ctl.cfg.data_dir, &store, err, sizeof err) != 0) {
        fprintf(stderr, "alallo serve: %s\n", err);
        return 1;
    }
    char key[KEYS_MAX];
    bool created;
    if (setup_first_run(store, ctl.cfg.data_dir, key, srv.worker_token, &created, err,
                        sizeof err) != 0) {
        fprintf(stderr, "alallo serve: %s\n", err);
        store_close(store);
        return 1;
    }
    ctl.cfg.standby = true; /* leads once it holds the lock (leadership.h) */
    if (control_open(&ctl, store, err, sizeof err) != 0) {
        fprintf(stderr, "alallo serve: %s\n", err);
        store_close(store);
        return 1;
    }
    if (srv.cfg.rate_limit > 0) {
        srv.ratelimit = ratelimit_new(srv.cfg.rate_limit, 2 * srv.cfg.rate_limit,
                                      RATELIMIT_MAX_KEYS);
        if (!srv.ratelimit) {
            fprintf(stderr, "alallo serve: out of memory for the rate limiter\n");
            control_close(&ctl);
            return 1;
        }
    }
    /* The inference engine beside this process, supervised (restarted
     * when it ends) until the end (control/inference.h). */
    if (a.n_inference_pools) {
        if (!(ctl.serving = serving_registry_new())) {
            fprintf(stderr, "alallo serve: out of memory\n");
            control_close(&ctl);
            return 1;
        }
    } else if (!a.inference_child &&
               !(ctl.inference = inference_start(ctl.alallo_bin, ctl.cfg.data_dir, &a.inference)))
        log_line("warn", "the inference engine did not start; a process per generation");
    if (api_server_pools_open(&srv) != 0) {
        fprintf(stderr, "alallo serve: out of memory for the slot pools\n");
        ratelimit_free(srv.ratelimit);
        control_close(&ctl);
        return 1;
    }
    struct http_server *http;
    if (http_server_start(&srv, a.host, srv.cfg.port, &http, err, sizeof err) != 0) {
        fprintf(stderr, "alallo serve: %s\n", err);
        control_close(&ctl);
        return 1;
    }
    int port = http_server_port(http);
    const char *shown_host = strcmp(a.host, "0.0.0.0") == 0 ? "127.0.0.1" : a.host;
    /* The engine before anything is announced: its pools are part of what
     * the server serves. Its thread submits, polls and reconciles only
     * while this process leads (engine.c). */
    if (start_engine(&ctl, &a, shown_host, port) != 0) {
        http_server_stop(http);
        control_close(&ctl);
        return 2;
    }
    char my_url[LEADER_URL_MAX];
    char host_name[128];
    if (a.advertise)
        text_copy(my_url, sizeof my_url, a.advertise);
    else if (strcmp(a.host, "0.0.0.0") == 0 && gethostname(host_name, sizeof host_name) == 0)
        text_printf(my_url, sizeof my_url, "http://%.127s:%d", host_name, port); /* reachable */
    else
        text_printf(my_url, sizeof my_url, "http://%s:%d", shown_host, port);
    /* The lock (of a PostgreSQL store in the database; of SQLite in DATA)
     * is tried once before anything is printed; a write that comes in
     * meanwhile waits for the outcome (api/forward.h). */
    const char *lock_at = a.store && (strncmp(a.store, "postgresql://", 13) == 0 ||
                                      strncmp(a.store, "postgres://", 11) == 0)
                              ? a.store
                              : ctl.cfg.data_dir;
    if (leadership_open(&ctl, lock_at, my_url, err, sizeof err) != 0) {
        fprintf(stderr, "alallo serve: %s\n", err);
        http_server_stop(http);
        control_close(&ctl);
        return 1;
    }
    bool leads = control_leadership_step(&ctl) == LEADERSHIP_TAKEN;
    printf("alallo: serving on http://%s:%d (data in %s, models in %s)\n", shown_host, port,
           ctl.cfg.data_dir, ctl.cfg.models_dir);
    if (created)
        printf("alallo: created the account default; its API key is in %s/api-key\n",
               ctl.cfg.data_dir);
    if (key[0]) {
        printf("Dashboard: http://%s:%d/#key=%s\n", shown_host, port, key);
        printf("API key (account default): %s\n", key);
    } else {
        printf("Dashboard: http://%s:%d/ (the key file %s/api-key is gone; make a new account "
               "with `alallo accounts create NAME --data %s`)\n",
               shown_host, port, ctl.cfg.data_dir, ctl.cfg.data_dir);
    }
    if (!leads)
        printf("alallo: standing by: another serve leads this store; this one answers reads, "
               "forwards writes to it and takes over if it stops\n");
    fflush(stdout);

    static struct local_worker lw[LOCAL_WORKERS_MAX];
    int n_local = local_workers(&a, &srv, port, lw);
    if (n_local < 0) {
        http_server_stop(http);
        leadership_close(&ctl);
        control_close(&ctl);
        return 2;
    }
    /* Forwards only while this process leads (wandb_forward.h). */
    struct wandb_forward *wandb = NULL;
    if (wandb_forward_start(&ctl, a.wandb_url, &wandb, err, sizeof err) != 0)
        log_line("warn", "alallo serve: %s: W&B integrations will not be forwarded", err);
    struct watcher w = {.ctl = &ctl, .lw = lw, .n_local = n_local};
    if (leads)
        start_local_workers(&w);
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    pthread_create(&w.thread, NULL, watch, &w);
    struct webhook_sender *sender = webhook_sender_start(&ctl);
    if (!sender)
        log_line("warn", "webhooks: the sender did not start; deliveries wait in the outbox");

    int sig = 0;
    sigwait(&sigs, &sig);
    log_line("info", "%s: stopping", w.lost ? "leadership lost" : sig == SIGINT ? "SIGINT"
                                                                              : "SIGTERM");
    inference_stopping(ctl.inference); /* an engine that ends now is not a crash */

    /* The watcher first, so that no local worker starts from here on. */
    pthread_mutex_lock(&w.mu);
    w.stop = 1;
    pthread_cond_signal(&w.cv);
    pthread_mutex_unlock(&w.mu);
    pthread_join(w.thread, NULL);
    /* Workers next, while the API still answers them: each stops its
     * trainer (which checkpoints) and reports the attempt's end. */
    workers_stop = 1;
    for (int i = 0; i < n_local; i++)
        if (lw[i].started)
            pthread_join(lw[i].thread, NULL);
    http_server_stop(http);
    webhook_sender_stop(sender);
    wandb_forward_stop(wandb);
    leadership_close(&ctl);
    ratelimit_free(srv.ratelimit);
    api_server_pools_close(&srv);
    inference_stop(ctl.inference);
    ctl.inference = NULL;
    control_close(&ctl);
    serving_registry_free(ctl.serving); /* after the engine's thread, which notes in it */
    ctl.serving = NULL;
    curl_global_cleanup();
    log_line("info", "stopped");
    return w.lost ? 3 : 0;
}
