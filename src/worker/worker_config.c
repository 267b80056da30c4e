/* worker_config.c - a worker's declaration: defaults from this machine and
 * the --local-worker SPEC syntax. */
#include "worker/worker.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"

/* CPUs this process may run on: the affinity mask first, because a worker in
 * a container or under taskset must not declare the whole host. */
static int machine_cpus(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0)
            return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* MemTotal from /proc/meminfo in bytes; 0 when unreadable. */
static int64_t machine_memory(void)
{
    FILE *f = fopen("/proc/meminfo", "re");
    if (!f)
        return 0;
    char line[256];
    int64_t bytes = 0;
    while (fgets(line, sizeof line, f)) {
        long long kib;
        if (sscanf(line, "MemTotal: %lld kB", &kib) == 1) {
            bytes = (int64_t)kib * 1024;
            break;
        }
    }
    fclose(f);
    return bytes;
}

static void copy_str(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src);
}

void worker_config_defaults(struct worker_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    char host[64] = "";
    if (gethostname(host, sizeof host - 1) != 0 || !worker_name_valid(host))
        copy_str(host, sizeof host, "worker");
    copy_str(cfg->name, sizeof cfg->name, host);
    cfg->cpus = machine_cpus();
    cfg->mem_bytes = machine_memory();
    cfg->price_per_hour = WORKER_DEFAULT_PRICE_PER_HOUR;
    copy_str(cfg->class_, sizeof cfg->class_, "on-demand");
    copy_str(cfg->accelerator, sizeof cfg->accelerator, "cpu");
    ssize_t n = readlink("/proc/self/exe", cfg->alallo_bin, sizeof cfg->alallo_bin - 1);
    if (n > 0)
        cfg->alallo_bin[n] = '\0';
    else
        cfg->alallo_bin[0] = '\0';
    cfg->stop_grace_s = 30;
    cfg->bench_timeout_s = 120;
}

const char *worker_trainer_device(const struct worker_config *cfg)
{
    return cfg->gpus > 0 && cfg->trainer_cuda ? "cuda" : "cpu";
}

bool worker_gpu_warning(const struct worker_config *cfg, char *out, size_t cap)
{
    if (cap > 0)
        out[0] = '\0';
    if (cfg->gpus <= 0 || cfg->trainer_cuda)
        return false;
    snprintf(out, cap,
             "warning: %d GPU%s declared, but this alallo was built without CUDA: its attempts "
             "train on the CPU (build with CUDA as docs/trainer.md \"GPU\" says)",
             cfg->gpus, cfg->gpus == 1 ? "" : "s");
    return true;
}

bool worker_name_valid(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 63)
        return false;
    /* The name goes into URL paths and file names: keep it plain. */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (!isalnum(c) && c != '-' && c != '_' && c != '.')
            return false;
    }
    return name[0] != '.';
}

int worker_parse_size(const char *text, int64_t *out)
{
    if (!text || !isdigit((unsigned char)text[0]))
        return -1;
    errno = 0;
    char *end = NULL;
    double v = strtod(text, &end);
    if (errno || end == text || !(v >= 0))
        return -1;
    double mult = 1;
    switch (*end) {
    case 'K': case 'k': mult = 1024.0; end++; break;
    case 'M': case 'm': mult = 1024.0 * 1024; end++; break;
    case 'G': case 'g': mult = 1024.0 * 1024 * 1024; end++; break;
    case 'T': case 't': mult = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B') { /* "2GiB", "2GB" read as 2G */
        if (*end == 'i')
            end++;
        if (*end == 'B')
            end++;
    }
    if (*end != '\0')
        return -1;
    double bytes = floor(v * mult);
    if (bytes > 9.0e18)
        return -1;
    *out = (int64_t)bytes;
    return 0;
}

/* One key=value of a SPEC. */
static int apply_pair(struct worker_config *cfg, const char *key, const char *val, char *err,
                      size_t errcap)
{
    if (strcmp(key, "name") == 0) {
        if (!worker_name_valid(val)) {
            snprintf(err, errcap,
                     "name=%s: use 1 to 63 letters, digits, '-', '_' or '.'", val);
            return -1;
        }
        copy_str(cfg->name, sizeof cfg->name, val);
    } else if (strcmp(key, "cpus") == 0) {
        char *end = NULL;
        errno = 0;
        long n = strtol(val, &end, 10);
        if (errno || end == val || *end || n < 1 || n > 4096) {
            snprintf(err, errcap, "cpus=%s: expected a whole number from 1 to 4096", val);
            return -1;
        }
        cfg->cpus = (int)n;
    } else if (strcmp(key, "mem") == 0) {
        int64_t bytes;
        if (worker_parse_size(val, &bytes) != 0 || bytes < 1024 * 1024) {
            snprintf(err, errcap, "mem=%s: expected a size of at least 1M such as 512M or 2G",
                     val);
            return -1;
        }
        cfg->mem_bytes = bytes;
    } else if (strcmp(key, "price") == 0) {
        char *end = NULL;
        errno = 0;
        double p = strtod(val, &end);
        if (errno || end == val || *end || !(p >= 0) || p > 1e6) {
            snprintf(err, errcap, "price=%s: expected an hourly price such as 0.40", val);
            return -1;
        }
        cfg->price_per_hour = p;
    } else if (strcmp(key, "class") == 0) {
        if (strcmp(val, "on-demand") != 0 && strcmp(val, "spot") != 0) {
            snprintf(err, errcap, "class=%s: expected on-demand or spot", val);
            return -1;
        }
        copy_str(cfg->class_, sizeof cfg->class_, val);
    } else if (strcmp(key, "accelerator") == 0) {
        if (!worker_name_valid(val) || strlen(val) >= sizeof cfg->accelerator) {
            snprintf(err, errcap, "accelerator=%s: expected a short name such as cpu", val);
            return -1;
        }
        copy_str(cfg->accelerator, sizeof cfg->accelerator, val);
    } else if (strcmp(key, "gpus") == 0) {
        char *end = NULL;
        errno = 0;
        long n = strtol(val, &end, 10);
        if (errno || end == val || *end || n < 1 || n > WORKER_GPUS_MAX) {
            snprintf(err, errcap, "gpus=%s: expected a whole number from 1 to %d", val,
                     WORKER_GPUS_MAX);
            return -1;
        }
        cfg->gpus = (int)n;
    } else if (strcmp(key, "gpu_kind") == 0) {
        if (!worker_name_valid(val) || strlen(val) >= sizeof cfg->gpu_kind) {
            snprintf(err, errcap, "gpu_kind=%s: expected a short name such as h200", val);
            return -1;
        }
        /* One spelling per kind: the estimator learns speed by this name. */
        for (size_t i = 0; val[i]; i++)
            cfg->gpu_kind[i] = (char)tolower((unsigned char)val[i]);
        cfg->gpu_kind[strlen(val)] = '\0';
    } else if (strcmp(key, "gpu_mem") == 0) {
        int64_t bytes;
        if (worker_parse_size(val, &bytes) != 0 || bytes < 1024 * 1024 * 1024) {
            snprintf(err, errcap, "gpu_mem=%s: expected the memory of one GPU, at least 1G, "
                     "such as 80G", val);
            return -1;
        }
        cfg->gpu_mem_bytes = bytes;
    } else {
        snprintf(err, errcap,
                 "unknown key '%s' (known: name, cpus, mem, price, class, accelerator, gpus, "
                 "gpu_kind, gpu_mem)", key);
        return -1;
    }
    return 0;
}

int worker_config_check(const struct worker_config *cfg, char *err, size_t errcap)
{
    if (cfg->gpus > 0 && (!cfg->gpu_kind[0] || cfg->gpu_mem_bytes <= 0)) {
        snprintf(err, errcap, "gpus=%d needs gpu_kind (such as h200) and gpu_mem (the memory "
                 "of one GPU, such as 80G)", cfg->gpus);
        return -1;
    }
    if (cfg->gpus == 0 && (cfg->gpu_kind[0] || cfg->gpu_mem_bytes > 0)) {
        snprintf(err, errcap, "gpu_kind and gpu_mem need gpus (how many GPUs, such as 1)");
        return -1;
    }
    return 0;
}

int worker_config_parse_spec(struct worker_config *cfg, const char *spec, char *err, size_t errcap)
{
    char buf[512];
    if (!spec || !*spec) {
        snprintf(err, errcap, "empty worker spec");
        return -1;
    }
    if (strlen(spec) >= sizeof buf) {
        snprintf(err, errcap, "worker spec too long (at most %zu characters)", sizeof buf - 1);
        return -1;
    }
    copy_str(buf, sizeof buf, spec);
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq || eq == item || eq[1] == '\0') {
            snprintf(err, errcap, "'%s': expected key=value", item);
            return -1;
        }
        *eq = '\0';
        if (apply_pair(cfg, item, eq + 1, err, errcap) != 0)
            return -1;
    }
    return 0;
}

int worker_read_token(const char *arg, char *out, size_t cap)
{
    if (arg[0] != '@') {
        if (strlen(arg) >= cap)
            return -1;
        snprintf(out, cap, "%s", arg);
        return 0;
    }
    return fs_read_line(arg + 1, out, cap);
}

void worker_catch_stop_signals(void (*on)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

void worker_engine_place(char *engine_id, size_t idcap, char *node, size_t nodecap)
{
    const char *id = getenv("SLURM_JOB_ID");
    if (!id)
        id = getenv("ALALLO_ENGINE_ID");
    snprintf(engine_id, idcap, "%s", id ? id : "");
    const char *n = getenv("SLURMD_NODENAME");
    if (n)
        snprintf(node, nodecap, "%s", n);
    else if (gethostname(node, nodecap) != 0)
        node[0] = '\0';
    node[nodecap - 1] = '\0';
}
