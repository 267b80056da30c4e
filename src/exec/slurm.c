/* slurm.c - the executor over Slurm's command-line tools (slurm.h). */
#include "exec/slurm.h"

#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/child.h"
#include "core/clock.h"
#include "core/ids.h"
#include "core/text.h"
#include "exec/slurm_text.h"

#define MAX_ARGS 32
#define PARTITIONS_CACHED 16

struct partition_memo {
    char name[64];     /* as asked ("" : the default partition)   */
    char real[64];     /* the partition's own name                */
    long max_time_min; /* 0: unlimited                            */
    int64_t read_ms;   /* monotonic; 0: empty slot                */
};

struct slurm_x {
    struct executor base; /* first: a struct executor * is a struct slurm_x * */
    struct slurm_config cfg;
    struct partition_memo memo[PARTITIONS_CACHED];
};

static struct slurm_x *of(struct executor *x)
{
    return (struct slurm_x *)x;
}

/* stderr made into the tail of an error line: its last non-empty line. */
static const char *last_line(char *err)
{
    size_t n = strlen(err);
    while (n > 0 && (err[n - 1] == '\n' || err[n - 1] == '\r' || err[n - 1] == ' '))
        err[--n] = '\0';
    char *nl = strrchr(err, '\n');
    return nl ? nl + 1 : err;
}

/* A failure that retrying later can cure: the controller is away or slow. */
static bool transient(const char *err)
{
    static const char *const words[] = {
        "Unable to contact",   "timed out",      "Socket",        "Connection refused",
        "try again",           "Try again",      "temporarily",   "not responding",
        "Zero Bytes",          "Communication",  "Unable to connect",
    };
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strstr(err, words[i]))
            return true;
    return false;
}

/* Runs TOOL with args (NULL-ended, args[0] unused: the tool's path goes
 * there) and collects its output into r. ERR_OK only when it exited 0;
 * otherwise x->error says what happened, with the tool's stderr, and the
 * caller frees r either way. */
static enum alallo_err run_tool(struct slurm_x *sx, const char *tool, char **args,
                                struct child_result *r /* OUT */)
{
    struct executor *x = &sx->base;
    char path[EXEC_PATH_MAX + 32];
    if (sx->cfg.bin_dir[0])
        snprintf(path, sizeof path, "%s/%s", sx->cfg.bin_dir, tool);
    else
        snprintf(path, sizeof path, "%s", tool);
    args[0] = path;
    int timeout_ms = sx->cfg.timeout_ms > 0 ? sx->cfg.timeout_ms : SLURM_TIMEOUT_MS_DEFAULT;
    if (child_run_ms(args, timeout_ms, SLURM_OUTPUT_MAX, r) != 0) {
        memset(r, 0, sizeof *r);
        return exec_fail(x, ERR_UNAVAILABLE, "could not run %s: %s", path, strerror(errno));
    }
    if (r->too_large)
        return exec_fail(x, ERR_TOO_LARGE, "%s printed more than %u MiB", tool,
                         SLURM_OUTPUT_MAX >> 20);
    if (r->timed_out)
        return exec_fail(x, ERR_UNAVAILABLE, "%s did not answer within %d ms (killed)", tool,
                         timeout_ms);
    if (r->signal)
        return exec_fail(x, ERR_UNAVAILABLE, "%s was killed by signal %d: %s", tool, r->signal,
                         last_line(r->err));
    if (r->exit_status == 127 && !r->err[0])
        return exec_fail(x, ERR_UNAVAILABLE, "could not run %s", path);
    if (r->exit_status != 0) {
        const char *line = last_line(r->err);
        return exec_fail(x, transient(r->err) ? ERR_UNAVAILABLE : ERR_INVALID,
                         "%s exited with status %d: %s", tool, r->exit_status,
                         line[0] ? line : "(nothing on stderr)");
    }
    return ERR_OK;
}

/* The named partition's MaxTime (and its own name, for the default one),
 * from the memo when fresh. */
static enum alallo_err partition_info(struct slurm_x *sx, const char *name,
                                      struct partition_memo *out /* OUT */)
{
    int64_t now = clock_mono_ms();
    int ttl_s = sx->cfg.partition_cache_s == 0 ? 60 : sx->cfg.partition_cache_s;
    int oldest = 0;
    for (int i = 0; i < PARTITIONS_CACHED; i++) {
        struct partition_memo *m = &sx->memo[i];
        if (m->read_ms && strcmp(m->name, name) == 0 && ttl_s > 0 &&
            now - m->read_ms < (int64_t)ttl_s * 1000) {
            *out = *m;
            return ERR_OK;
        }
        if (m->read_ms < sx->memo[oldest].read_ms)
            oldest = i;
    }
    char *args[MAX_ARGS] = {NULL, "show", "partition", "-o"};
    int k = 4;
    if (name[0])
        args[k++] = (char *)name;
    args[k] = NULL;
    struct child_result r;
    enum alallo_err e = run_tool(sx, "scontrol", args, &r);
    if (e == ERR_INVALID && (strstr(r.err, "not found") || (r.out && strstr(r.out, "not found"))))
        e = exec_fail(&sx->base, ERR_INVALID, "Slurm has no partition %s", name);
    if (e) {
        child_result_free(&r);
        return e;
    }
    bool found = false;
    char *save = NULL;
    for (char *line = r.out ? strtok_r(r.out, "\n", &save) : NULL; line && !found;
         line = strtok_r(NULL, "\n", &save)) {
        char pname[64] = "";
        if (strncmp(line, "PartitionName=", 14) == 0) {
            size_t n = strcspn(line + 14, " ");
            if (n < sizeof pname) {
                memcpy(pname, line + 14, n);
                pname[n] = '\0';
            }
        }
        bool match = name[0] ? strcmp(pname, name) == 0 : strstr(line, " Default=YES") != NULL;
        if (!match)
            continue;
        memset(out, 0, sizeof *out);
        text_copy(out->name, sizeof out->name, name);
        text_copy(out->real, sizeof out->real, pname);
        if (!slurm_partition_max_time(line, &out->max_time_min)) {
            child_result_free(&r);
            return exec_fail(&sx->base, ERR_UNAVAILABLE,
                             "scontrol show partition %s: no readable MaxTime", pname);
        }
        found = true;
    }
    child_result_free(&r);
    if (!found)
        return exec_fail(&sx->base, ERR_INVALID, "Slurm has no %s%s%s", name[0] ? "partition " : "",
                         name[0] ? name : "default partition", name[0] ? "" : " (give one)");
    out->read_ms = now ? now : 1;
    sx->memo[oldest] = *out;
    return ERR_OK;
}

static enum alallo_err slurm_submit_receipt(struct executor *x, const struct exec_submit *s,
                                            struct exec_receipt *rc)
{
    struct slurm_x *sx = of(x);
    memset(rc, 0, sizeof *rc);
    rc->time_limit_min = s->time_limit_min;
    if (s->time_limit_min > 0) {
        struct partition_memo p;
        enum alallo_err e = partition_info(sx, s->partition, &p);
        if (e)
            return e;
        if (p.max_time_min > 0 && s->time_limit_min > p.max_time_min) {
            rc->time_limit_min = p.max_time_min;
            rc->clamped = true;
            text_printf(rc->note, sizeof rc->note,
                        "Time limit cut from %ld to %ld min, the most partition %s allows",
                        s->time_limit_min, p.max_time_min, p.real);
        }
    }
    /* Every value goes as one --key=value argument: no shell, no quoting. */
    char a[16][EXEC_PATH_MAX + 24];
    int na = 0;
    char *args[MAX_ARGS] = {NULL, "--parsable", "--no-requeue", "--export=NONE", "--nodes=1",
                            "--ntasks=1"};
    int k = 6;
#define ADD(...)                                                                                   \
    do {                                                                                           \
        snprintf(a[na], sizeof a[na], __VA_ARGS__);                                               \
        args[k++] = a[na++];                                                                       \
    } while (0)
    ADD("--job-name=%s", s->tag);
    if (s->partition[0])
        ADD("--partition=%s", s->partition);
    if (s->qos[0])
        ADD("--qos=%s", s->qos);
    if (s->account[0])
        ADD("--account=%s", s->account);
    if (s->constraint[0])
        ADD("--constraint=%s", s->constraint);
    if (s->gres[0])
        ADD("--gres=%s", s->gres);
    if (s->cpus > 0)
        ADD("--cpus-per-task=%d", s->cpus);
    if (s->mem_mb > 0)
        ADD("--mem=%lldM", (long long)s->mem_mb);
    if (rc->time_limit_min > 0)
        ADD("--time=%ld", rc->time_limit_min);
    if (s->signal_lead_s > 0)
        ADD("--signal=USR1@%d", s->signal_lead_s);
    if (s->output[0]) {
        ADD("--output=%s", s->output);
        args[k++] = "--open-mode=append";
    }
    if (s->workdir[0])
        ADD("--chdir=%s", s->workdir);
    if (s->comment[0])
        ADD("--comment=%s", s->comment);
#undef ADD
    args[k++] = (char *)s->script;
    args[k] = NULL;

    struct child_result r;
    enum alallo_err e = run_tool(sx, "sbatch", args, &r);
    if (e == ERR_UNAVAILABLE && r.timed_out)
        exec_fail(x, e, "sbatch for %s did not answer in time: the job may exist; list by tag",
                  s->tag);
    if (!e && !slurm_parse_job_id(r.out, rc->id))
        e = exec_fail(x, ERR_UNAVAILABLE, "sbatch for %s answered no job id: '%.60s'", s->tag,
                      r.out ? r.out : "");
    child_result_free(&r);
    return e;
}

static enum alallo_err slurm_list(struct executor *x, struct exec_job *out, int cap, int *n)
{
    struct slurm_x *sx = of(x);
    char user_arg[96];
    snprintf(user_arg, sizeof user_arg, "--user=%s", sx->cfg.user);
    char *args[MAX_ARGS] = {NULL, "--noheader", "--all", "--states=all", user_arg,
                            "--format=" SLURM_SQUEUE_FORMAT, NULL};
    struct child_result r;
    enum alallo_err e = run_tool(sx, "squeue", args, &r);
    int count = 0;
    char *save = NULL;
    for (char *line = (!e && r.out) ? strtok_r(r.out, "\n", &save) : NULL; line;
         line = strtok_r(NULL, "\n", &save)) {
        struct exec_job j;
        char copy[256];
        text_copy(copy, sizeof copy, line);
        if (!slurm_parse_squeue_line(line, &j)) {
            e = exec_fail(x, ERR_UNAVAILABLE, "squeue printed a line that is not a job: '%.120s'",
                          copy);
            break;
        }
        if (!exec_tag_is_alallo(j.tag))
            continue;
        if (count < cap)
            out[count] = j;
        count++;
    }
    child_result_free(&r);
    *n = e ? 0 : count;
    return e;
}

static enum alallo_err slurm_cancel(struct executor *x, const char *tag)
{
    struct slurm_x *sx = of(x);
    char name_arg[EXEC_TAG_MAX + 16], user_arg[96];
    snprintf(name_arg, sizeof name_arg, "--name=%s", tag);
    snprintf(user_arg, sizeof user_arg, "--user=%s", sx->cfg.user);
    char *args[MAX_ARGS] = {NULL, name_arg, user_arg, NULL};
    struct child_result r;
    enum alallo_err e = run_tool(sx, "scancel", args, &r);
    /* A job that ended meanwhile is cancelled enough. */
    if (e == ERR_INVALID && strstr(r.err, "already completing or completed"))
        e = ERR_OK;
    child_result_free(&r);
    if (e == ERR_OK)
        x->error[0] = '\0';
    return e;
}

static enum alallo_err slurm_capacity(struct executor *x, const char *partition,
                                      const char *gpu_type, struct exec_capacity *c)
{
    struct slurm_x *sx = of(x);
    struct partition_memo p;
    enum alallo_err e = partition_info(sx, partition, &p);
    if (e)
        return e;
    char part_arg[96];
    snprintf(part_arg, sizeof part_arg, "--partition=%s", p.real);
    char *args[MAX_ARGS] = {NULL, "--noheader", "--Node", part_arg,
                            "--format=" SLURM_SINFO_FORMAT, NULL};
    struct child_result r;
    e = run_tool(sx, "sinfo", args, &r);
    char *save = NULL;
    for (char *line = (!e && r.out) ? strtok_r(r.out, "\n", &save) : NULL; line;
         line = strtok_r(NULL, "\n", &save)) {
        char copy[256];
        text_copy(copy, sizeof copy, line);
        if (!slurm_add_sinfo_line(line, gpu_type, c)) {
            e = exec_fail(x, ERR_UNAVAILABLE, "sinfo printed a line that is not a node: '%.120s'",
                          copy);
            break;
        }
    }
    child_result_free(&r);
    c->max_time_min = p.max_time_min;
    if (e)
        memset(c, 0, sizeof *c);
    return e;
}

static void slurm_close(struct executor *x)
{
    free(of(x));
}

static const struct executor_ops slurm_ops = {
    .submit = exec_submit_by_receipt,
    .list = slurm_list,
    .cancel = slurm_cancel,
    .close = slurm_close,
    .submit_receipt = slurm_submit_receipt,
    .capacity = slurm_capacity,
};

enum alallo_err executor_slurm_open(const struct slurm_config *cfg, struct executor **x,
                                    char *err, size_t errcap)
{
    *x = NULL;
    struct slurm_config c = *cfg;
    if (c.bin_dir[0]) {
        struct stat st;
        if (c.bin_dir[0] != '/' || stat(c.bin_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
            text_error(err, errcap, "slurm: the tools' folder '%.200s' is not an absolute path to "
                                    "a folder", c.bin_dir);
            return ERR_INVALID;
        }
    }
    if (!c.user[0]) {
        struct passwd pw, *res = NULL;
        char buf[4096];
        if (getpwuid_r(geteuid(), &pw, buf, sizeof buf, &res) == 0 && res)
            text_copy(c.user, sizeof c.user, res->pw_name);
        else
            snprintf(c.user, sizeof c.user, "%u", (unsigned)geteuid());
    }
    if (!ids_valid_name(c.user, sizeof c.user)) {
        text_error(err, errcap, "slurm: '%.64s' is not a user name", c.user);
        return ERR_INVALID;
    }
    struct slurm_x *sx = calloc(1, sizeof *sx);
    if (!sx) {
        text_error(err, errcap, "slurm: out of memory");
        return ERR_NOMEM;
    }
    sx->cfg = c;
    sx->base.ops = &slurm_ops;
    text_copy(sx->base.name, sizeof sx->base.name, "slurm");
    *x = &sx->base;
    return ERR_OK;
}
