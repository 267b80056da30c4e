/* serving_jobs.c - the serving engines' jobs on a pool (see
 * serving_jobs.h). */
#include "control/serving_jobs.h"

#include <assert.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/serving_registry.h"
#include "core/clock.h"
#include "core/fs.h"
#include "core/ids.h"
#include "core/keys.h"
#include "core/log.h"
#include "core/text.h"
#include "exec/reconcile.h"

#define QUICK_END_MS 60000   /* a job that ends sooner ended quickly */
#define PAUSE_MAX_MS 300000  /* the longest pause after quick ends */
#define SCRIPT_MAX 4096

struct serving_job {
    char id[SERVING_ID_MAX];
    bool submitted;       /* since this server started */
    int64_t since_ms;     /* when it was last submitted */
    int64_t next_try_ms;  /* after a quick end: not before this */
    int quick_ends;       /* ends within QUICK_END_MS in a row */
};

struct serving_jobs {
    struct serving_job job[SERVING_JOBS_MAX];
    int n;             /* the most wanted (the range's top)    */
    atomic_int count;  /* wanted now: job[0..count)            */
};

struct serving_jobs *serving_jobs_new(const char *pool, int count)
{
    struct serving_jobs *sj = calloc(1, sizeof *sj);
    if (!sj)
        return NULL;
    for (int k = 0; k < count && k < SERVING_JOBS_MAX; k++) {
        char tag[EXEC_TAG_MAX];
        struct serving_job *s = &sj->job[sj->n++];
        if (!text_printf(s->id, sizeof s->id, "%s-%d", pool, k) || !exec_serve_tag_for(s->id, tag)) {
            free(sj);
            return NULL;
        }
    }
    atomic_init(&sj->count, sj->n);
    return sj;
}

int serving_jobs_count(const struct serving_jobs *sj)
{
    return sj ? atomic_load(&((struct serving_jobs *)sj)->count) : 0;
}

void serving_jobs_set_count(struct serving_jobs *sj, int count)
{
    assert(count >= 0 && count <= sj->n);
    for (int k = count; k < sj->n; k++) { /* stopped: a fresh start next time */
        sj->job[k].submitted = false;
        sj->job[k].next_try_ms = 0;
        sj->job[k].quick_ends = 0;
    }
    atomic_store(&sj->count, count);
}

const char *serving_jobs_id(const struct serving_jobs *sj, int k)
{
    assert(k >= 0 && k < sj->n);
    return sj->job[k].id;
}

void serving_jobs_free(struct serving_jobs *sj)
{
    free(sj);
}

bool serving_jobs_wanted(const struct serving_jobs *sj, const char *id)
{
    int count = serving_jobs_count(sj);
    for (int i = 0; i < count; i++)
        if (strcmp(sj->job[i].id, id) == 0)
            return true;
    return false;
}

bool serving_jobs_wanted_any(struct serving_jobs *const *sets, int n_sets, const char *id)
{
    for (int i = 0; i < n_sets; i++)
        if (serving_jobs_wanted(sets[i], id))
            return true;
    return false;
}

bool serving_jobs_token(const char *dir, const char *id, char *out, size_t cap)
{
    char path[EXEC_PATH_MAX];
    if (!ids_valid_name(id, SERVING_ID_MAX) ||
        !text_printf(path, sizeof path, "%s/%s.token", dir, id))
        return false;
    return fs_read_line(path, out, cap) == 0;
}

/* Writes s's token and batch script and submits it. */
static enum alallo_err submit(const struct serving_jobs_env *env, const struct serving_job *s)
{
    struct exec_submit sub;
    memset(&sub, 0, sizeof sub);
    exec_pool_fill_submit(env->pool, &sub);
    char token_path[EXEC_PATH_MAX], node_token[EXEC_PATH_MAX];
    if (!exec_serve_tag_for(s->id, sub.tag) ||
        !text_printf(token_path, sizeof token_path, "%s/%s.token", env->dir, s->id) ||
        !text_printf(node_token, sizeof node_token, "@%s/%s.token", env->node_dir, s->id))
        return exec_fail(env->x, ERR_TOO_LARGE, "the serving job's paths do not fit");
    if (fs_mkdirs(env->dir, 0700) != 0)
        return exec_fail(env->x, ERR_IO, "cannot make %.200s", env->dir);
    char token[KEYS_MAX], line[KEYS_MAX + 2];
    bool written = keys_new_token(token, sizeof token) == 0 &&
                   text_printf(line, sizeof line, "%s\n", token) &&
                   fs_write_durably(token_path, line, strlen(line), 0600) == 0;
    memset(token, 0, sizeof token);
    memset(line, 0, sizeof line);
    if (!written)
        return exec_fail(env->x, ERR_IO, "cannot write %.200s", token_path);
    char script[SCRIPT_MAX] = "", extra[96] = "";
    if (env->memory > 0)
        text_printf(extra, sizeof extra, " --model-memory %lld", env->memory);
    if (env->max_running > 0)
        text_printf(extra + strlen(extra), sizeof extra - strlen(extra), " --max-running %d",
                    env->max_running);
    size_t n = 0;
    bool ok = text_printf(script, sizeof script,
                          "#!/bin/sh\n# serving engine %s on pool %s, written by alallo serve\n"
                          "exec %s%s",
                          s->id, env->pool->name, env->launcher, env->launcher[0] ? " " : "") &&
              exec_script_quote(script, sizeof script, env->bin) &&
              (n = strlen(script), text_printf(script + n, sizeof script - n,
                                               " serving run --server ")) &&
              exec_script_quote(script, sizeof script, env->server_url) &&
              (n = strlen(script),
               text_printf(script + n, sizeof script - n, " --id %s --token ", s->id)) &&
              exec_script_quote(script, sizeof script, node_token) &&
              (n = strlen(script), text_printf(script + n, sizeof script - n, " --work-dir ")) &&
              exec_script_quote(script, sizeof script, env->node_dir) &&
              (n = strlen(script),
               text_printf(script + n, sizeof script - n, " --threads %d%s\n",
                           env->pool->cpus > 0 ? env->pool->cpus : 1, extra));
    if (!ok)
        return exec_fail(env->x, ERR_TOO_LARGE, "the serving job's script does not fit");
    if (!text_printf(sub.script, sizeof sub.script, "%s/%s.sbatch", env->dir, s->id) ||
        !text_printf(sub.output, sizeof sub.output, "%s/%s-%%j.log", env->node_dir, s->id) ||
        !text_copy(sub.workdir, sizeof sub.workdir, env->node_dir))
        return exec_fail(env->x, ERR_TOO_LARGE, "the serving job's paths do not fit");
    if (fs_write_durably(sub.script, script, strlen(script), 0700) != 0)
        return exec_fail(env->x, ERR_IO, "cannot write %.200s", sub.script);
    sub.time_limit_min = env->max_time_min; /* 0: the partition's default */
    struct exec_receipt rc;
    enum alallo_err r = executor_submit(env->x, &sub, &rc);
    if (!r)
        log_line("info", "%s: serving engine %s submitted to pool %s as job %s", env->x->name,
                 s->id, env->pool->name, rc.id);
    return r;
}

/* Whether a job of tag is listed and has not ended. */
static bool listed_live(const struct exec_job *jobs, int n, const char *tag)
{
    for (int i = 0; i < n; i++)
        if (strcmp(jobs[i].tag, tag) == 0 && jobs[i].state != EXEC_ENDED)
            return true;
    return false;
}

void serving_jobs_cancel_unwanted(struct serving_jobs *const *sets, int n_sets,
                                  struct executor *x, struct serving_registry *registry,
                                  const struct exec_job *jobs, int n)
{
    size_t m = strlen(EXEC_SERVE_PREFIX);
    for (int i = 0; i < n; i++) {
        const struct exec_job *j = &jobs[i];
        if (j->state == EXEC_ENDED || strncmp(j->tag, EXEC_SERVE_PREFIX, m) != 0 ||
            serving_jobs_wanted_any(sets, n_sets, j->tag + m))
            continue;
        enum alallo_err r = executor_cancel(x, j->tag);
        log_line(r ? "warn" : "info", "%s: serving engine %s (job %s) is not wanted: cancelled%s%s",
                 x->name, j->tag + m, j->id, r ? ", but: " : "", r ? x->error : "");
        serving_registry_forget(registry, j->tag + m);
    }
}

void serving_jobs_round(struct serving_jobs *sj, const struct serving_jobs_env *env,
                        const struct exec_job *jobs, int n, int64_t now_ms, int64_t listed_ms)
{
    int count = serving_jobs_count(sj);
    for (int i = 0; i < count; i++) {
        struct serving_job *s = &sj->job[i];
        char tag[EXEC_TAG_MAX];
        if (!exec_serve_tag_for(s->id, tag) || listed_live(jobs, n, tag))
            continue;
        /* a submission moments before the list may not be in it yet */
        if (s->submitted && s->since_ms > listed_ms - EXEC_RECONCILE_SLACK_MS)
            continue;
        if (now_ms < s->next_try_ms)
            continue;
        if (s->submitted && s->next_try_ms <= s->since_ms) { /* its end, first seen */
            serving_registry_forget(env->registry, s->id);
            bool quick = now_ms - s->since_ms < QUICK_END_MS;
            s->quick_ends = quick ? s->quick_ends + 1 : 0;
            if (quick) {
                int64_t pause = 5000LL << (s->quick_ends < 6 ? s->quick_ends : 6);
                s->next_try_ms = now_ms + (pause < PAUSE_MAX_MS ? pause : PAUSE_MAX_MS);
                log_line("warn", "%s: serving engine %s ended within a minute; submitted again "
                         "in %lld s", env->x->name, s->id,
                         (long long)(s->next_try_ms - now_ms) / 1000);
                continue;
            }
            log_line("warn", "%s: serving engine %s is no longer listed; submitted again",
                     env->x->name, s->id);
        }
        enum alallo_err r = submit(env, s);
        if (r && r != ERR_UNAVAILABLE) { /* refused: try again in a minute */
            log_line("warn", "%s: serving engine %s not submitted: %s: %s", env->x->name, s->id,
                     err_code(r), env->x->error);
            s->submitted = false;
            s->next_try_ms = now_ms + QUICK_END_MS;
            continue;
        }
        s->submitted = true;
        s->since_ms = clock_now_ms();
    }
}
