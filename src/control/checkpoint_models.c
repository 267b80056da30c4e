/* checkpoint_models.c - see checkpoint_models.h. */
#include "control/checkpoint_models.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "control/catalog.h"
#include "control/paths.h"
#include "core/child.h"
#include "core/fs.h"
#include "core/ids.h"
#include "core/log.h"
#include "core/text.h"

#define CKPT_MARK ":ckpt-step-"
#define MATERIALIZE_TIMEOUT_S 600
/* Builds kept per job (a listed checkpoint's, docs/api.md: the newest and
 * the newest three that end an epoch), and how long one must have gone
 * unused before it may be removed for a new one (a generation's time
 * limit and an export's copy take less). */
#define BUILDS_KEPT 4
/* Builds running at once in one process, all jobs together: each is a
 * child process on the server's CPU and a model's worth of disk writes. */
#define BUILDS_AT_ONCE 2
#define BUILD_IDLE_S 300
/* Jobs of an account looked through for one that trains from a build. */
#define JOBS_SCANNED 10000

bool control_checkpoint_name_parse(const char *name, char *job_id, size_t cap, long *step)
{
    /* The last mark: a job trained from a checkpoint has one in its name too. */
    const char *mark = NULL;
    for (const char *p = strstr(name, CKPT_MARK); p; p = strstr(p + 1, CKPT_MARK))
        mark = p;
    if (strncmp(name, "ft:", 3) != 0 || !mark)
        return false;
    const char *digits = mark + strlen(CKPT_MARK);
    char *end;
    errno = 0;
    long n = strtol(digits, &end, 10);
    if (digits[0] < '1' || digits[0] > '9' || *end || errno || n <= 0)
        return false;
    const char *id = mark;
    while (id > name && id[-1] != ':')
        id--;
    if (id == mark || !text_printf(job_id, cap, "ftjob-%.*s", (int)(mark - id), id) ||
        !ids_valid(job_id))
        return false;
    *step = n;
    return true;
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Makes checkpoint ck of job j into the folder `kept` (model/ and, for
 * LoRA, adapter/ inside), from the base model's folder `base`: in a
 * temporary folder beside it, renamed into place. ERR_NOT_FOUND when the
 * trainer pruned the checkpoint meanwhile (not an internal failure). */
static enum alallo_err materialize(struct control *ctl, const struct store_job *j,
                                   const struct store_checkpoint *ck, const char *base,
                                   const char *kept)
{
    char tmp[1100], model[1200], adapter[1200];
    if (!text_printf(tmp, sizeof tmp, "%s.tmp-XXXXXX", kept) ||
        !mkdtemp(tmp) || !text_printf(model, sizeof model, "%s/model", tmp) ||
        !text_printf(adapter, sizeof adapter, "%s/adapter", tmp)) {
        log_line("error", "job %s: no folder for checkpoint %ld as a model: %s", j->id, ck->step,
                 strerror(errno));
        return ERR_INTERNAL;
    }
    bool lora = strcmp(j->adapter, "lora") == 0;
    char *argv[] = {ctl->alallo_bin, "train",  "--materialize", (char *)ck->path, "--base", (char *)base,
                    "--out",         model,    lora ? "--adapter-out" : NULL,       adapter, NULL};
    struct child_result r;
    int rc = child_run(argv, MATERIALIZE_TIMEOUT_S, 1 << 20, &r);
    enum alallo_err e = ERR_OK;
    struct stat st;
    if ((rc != 0 || r.exit_status != 0) && stat(ck->path, &st) != 0) {
        log_line("info", "job %s: checkpoint %ld was pruned while it was made into a model", j->id,
                 ck->step);
        e = ERR_NOT_FOUND;
    } else if (rc != 0 || r.exit_status != 0) {
        log_line("error", "job %s: checkpoint %ld could not be made into a model (exit %d%s): %.600s",
                 j->id, ck->step, r.exit_status, r.timed_out ? ", timed out" : "",
                 r.err[0] ? r.err : "no message");
        e = ERR_INTERNAL;
    } else if (rename(tmp, kept) != 0 && !is_dir(kept)) {
        log_line("error", "job %s: cannot keep checkpoint %ld as a model: %s", j->id, ck->step,
                 strerror(errno));
        e = ERR_INTERNAL;
    }
    child_result_free(&r);
    if (is_dir(tmp))
        fs_remove_tree(tmp); /* failed, or another request kept its own first */
    return e;
}

/* Whether a job of `account` trains from model `name` (then the build is
 * its base and stays). True too when the store cannot say, or the account
 * has more jobs than are looked through. */
static bool a_job_trains_from(struct control *ctl, const char *account, const char *name)
{
    struct store_job *jobs = calloc(STORE_LIST_MAX, sizeof *jobs);
    if (!jobs)
        return true;
    char after[IDS_MAX] = "";
    bool found = false, more = true;
    for (int seen = 0; more && !found; seen += STORE_LIST_MAX) {
        int n = 0;
        if (seen >= JOBS_SCANNED ||
            store_job_list(ctl->store, account, after[0] ? after : NULL, STORE_LIST_MAX, jobs, &n,
                           &more) != ERR_OK) {
            found = true;
            break;
        }
        for (int i = 0; i < n && !found; i++)
            found = strcmp(jobs[i].model, name) == 0;
        if (n > 0)
            text_copy(after, sizeof after, jobs[n - 1].id);
        else
            more = false;
    }
    free(jobs);
    return found;
}

/* Makes room for one more build in `parent` (job j's checkpoint-models):
 * while BUILDS_KEPT or more are there, removes the least recently used
 * one (its folder's time, renewed at each use) that went unused for
 * BUILD_IDLE_S and is no job's base. When none may go, keeps them all. */
static void evict_builds(struct control *ctl, const struct store_job *j, const char *parent)
{
    char ft[300];
    control_fine_tuned_model_name(j, ft, sizeof ft);
    for (;;) {
        DIR *d = opendir(parent);
        if (!d)
            return;
        int count = 0;
        long oldest_step = -1;
        time_t oldest = 0, idle_before = time(NULL) - BUILD_IDLE_S;
        struct dirent *e;
        while ((e = readdir(d))) {
            char path[1200], name[600], *end;
            long step = strncmp(e->d_name, "step-", 5) == 0 ? strtol(e->d_name + 5, &end, 10) : 0;
            struct stat st;
            if (step <= 0 || *end ||
                !text_printf(path, sizeof path, "%s/%s", parent, e->d_name) ||
                stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
                continue;
            count++;
            if (st.st_mtime >= idle_before || (oldest_step > 0 && st.st_mtime >= oldest) ||
                !text_printf(name, sizeof name, "%s%s%ld", ft, CKPT_MARK, step) ||
                a_job_trains_from(ctl, j->account, name))
                continue;
            oldest_step = step;
            oldest = st.st_mtime;
        }
        closedir(d);
        char victim[1200];
        if (count < BUILDS_KEPT || oldest_step <= 0 ||
            !text_printf(victim, sizeof victim, "%s/step-%ld", parent, oldest_step))
            return;
        log_line("info", "job %s: checkpoint %ld as a model removed (unused; %d kept at most)",
                 j->id, oldest_step, BUILDS_KEPT);
        if (fs_remove_tree(victim) != 0)
            return;
    }
}

/* Makes the folder `kept` of checkpoint ck unless it is there: one build
 * per job at a time, in this process and any other on the same data (a
 * standby answers reads too), behind an flock on the job's
 * checkpoint-models/build.lock; a caller that waited finds the folder its
 * predecessor made. ERR_NOT_FOUND with why set when the checkpoint or the
 * base model is gone. */
static enum alallo_err build_once(struct control *ctl, const struct store_job *j,
                                  const struct store_checkpoint *ck, const char *name,
                                  const char *kept, char *why, size_t whycap)
{
    char parent[1024], lock[1100], base[1024];
    const char *slash = strrchr(kept, '/');
    if (!slash || !text_printf(parent, sizeof parent, "%.*s", (int)(slash - kept), kept) ||
        fs_mkdirs(parent, 0755) != 0 ||
        !text_printf(lock, sizeof lock, "%s/build.lock", parent)) {
        log_line("error", "job %s: no folder for its checkpoints as models: %s", j->id,
                 strerror(errno));
        return ERR_INTERNAL;
    }
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || flock(fd, LOCK_EX) != 0) {
        log_line("error", "job %s: cannot lock %s: %s", j->id, lock, strerror(errno));
        if (fd >= 0)
            close(fd);
        return ERR_INTERNAL;
    }
    enum alallo_err e = ERR_OK;
    struct stat st;
    if (is_dir(kept)) {
        e = ERR_OK; /* made while this one waited */
    } else if (stat(ck->path, &st) != 0) {
        e = ERR_NOT_FOUND;
    } else if (!control_job_model_dir(ctl, j, base, sizeof base)) {
        text_printf(why, whycap, "The base model of %.200s is gone.", name);
        e = ERR_NOT_FOUND;
    } else {
        evict_builds(ctl, j, parent);
        /* A place among BUILDS_AT_ONCE: waited for however long, since a
         * job's attempt may need the build (each ends within its time). */
        while (atomic_fetch_add(&ctl->checkpoint_builds, 1) >= BUILDS_AT_ONCE) {
            atomic_fetch_sub(&ctl->checkpoint_builds, 1);
            nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
        }
        e = materialize(ctl, j, ck, base, kept);
        atomic_fetch_sub(&ctl->checkpoint_builds, 1);
    }
    if (e == ERR_NOT_FOUND && !why[0])
        text_printf(why, whycap, "The checkpoint %.200s is no longer kept.", name);
    else if (e && e != ERR_NOT_FOUND)
        text_copy(why, whycap, "The checkpoint could not be made into a model.");
    flock(fd, LOCK_UN);
    close(fd);
    return e;
}

enum alallo_err control_checkpoint_model_dir(struct control *ctl, const char *account,
                                             const char *name, char *dir, size_t cap,
                                             char *adapter, size_t acap, struct store_job *job,
                                             char *why, size_t whycap)
{
    why[0] = '\0';
    char job_id[IDS_MAX], sub[64], kept[1024], ft[300];
    long step;
    struct store_job *j = job ? job : malloc(sizeof *j);
    struct store_checkpoint ck;
    enum alallo_err e = ERR_NOT_FOUND;
    if (!j)
        return ERR_NOMEM;
    if (!control_checkpoint_name_parse(name, job_id, sizeof job_id, &step) ||
        store_job_get(ctl->store, account, job_id, j) != ERR_OK ||
        (control_fine_tuned_model_name(j, ft, sizeof ft), strncmp(name, ft, strlen(ft)) != 0) ||
        strncmp(name + strlen(ft), CKPT_MARK, strlen(CKPT_MARK)) != 0 ||
        store_checkpoint_get(ctl->store, j->id, step, &ck) != ERR_OK) {
        text_printf(why, whycap, "No such model: %.200s (no such checkpoint).", name);
        goto out;
    }
    text_printf(sub, sizeof sub, "checkpoint-models/step-%ld", step);
    if (!control_job_dir(ctl, j->id, sub, kept, sizeof kept)) {
        e = ERR_INTERNAL;
        goto out;
    }
    struct stat st;
    if (!is_dir(kept) && stat(ck.path, &st) != 0) {
        text_printf(why, whycap, "The checkpoint %.200s is no longer kept.", name);
        goto out;
    }
    /* Used now: its time renewed makes it the last to be removed (a build
     * removed meanwhile is made again). */
    e = is_dir(kept) && utimensat(AT_FDCWD, kept, NULL, 0) == 0
            ? ERR_OK
            : build_once(ctl, j, &ck, name, kept, why, whycap);
    if (!e && (!text_printf(dir, cap, "%s/model", kept) ||
               !text_printf(adapter, acap, "%s/adapter", kept)))
        e = ERR_INTERNAL;
    if (!e && !is_dir(adapter))
        adapter[0] = '\0';
out:
    if (!job)
        free(j);
    return e;
}

bool control_job_model_dir(struct control *ctl, const struct store_job *j, char *out, size_t cap)
{
    struct catalog_model m;
    if (catalog_find(ctl->catalog, j->model, &m))
        return text_copy(out, cap, m.dir);
    struct store_job base;
    if (store_job_by_model(ctl->store, j->account, j->model, &base) == ERR_OK)
        return control_job_dir(ctl, base.id, "out/model", out, cap);
    char adapter[1024], why[300];
    return control_checkpoint_model_dir(ctl, j->account, j->model, out, cap, adapter,
                                        sizeof adapter, &base, why, sizeof why) == ERR_OK;
}
