/* checkpoint_models.c - see checkpoint_models.h. */
#include "control/checkpoint_models.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "control/catalog.h"
#include "control/paths.h"
#include "core/child.h"
#include "core/fs.h"
#include "core/ids.h"
#include "core/log.h"
#include "core/text.h"

#define CKPT_MARK ":ckpt-step-"
#define MATERIALIZE_TIMEOUT_S 600

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
 * LoRA, adapter/ inside): in a temporary folder beside it, renamed into
 * place. Another request that made it first wins; ours is removed. */
static enum alallo_err materialize(struct control *ctl, const struct store_job *j,
                                   const struct store_checkpoint *ck, const char *kept)
{
    char base[1024], tmp[1100], model[1200], adapter[1200];
    if (!control_job_model_dir(ctl, j, base, sizeof base))
        return ERR_NOT_FOUND;
    const char *slash = strrchr(kept, '/');
    char parent[1024];
    if (!slash || !text_printf(parent, sizeof parent, "%.*s", (int)(slash - kept), kept) ||
        fs_mkdirs(parent, 0755) != 0 || !text_printf(tmp, sizeof tmp, "%s.tmp-XXXXXX", kept) ||
        !mkdtemp(tmp) || !text_printf(model, sizeof model, "%s/model", tmp) ||
        !text_printf(adapter, sizeof adapter, "%s/adapter", tmp)) {
        log_line("error", "job %s: no folder for checkpoint %ld as a model: %s", j->id, ck->step,
                 strerror(errno));
        return ERR_INTERNAL;
    }
    bool lora = strcmp(j->adapter, "lora") == 0;
    char *argv[] = {ctl->alallo_bin, "train",  "--materialize", (char *)ck->path, "--base", base,
                    "--out",         model,    lora ? "--adapter-out" : NULL,       adapter, NULL};
    struct child_result r;
    int rc = child_run(argv, MATERIALIZE_TIMEOUT_S, 1 << 20, &r);
    enum alallo_err e = ERR_OK;
    if (rc != 0 || r.exit_status != 0) {
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
    e = is_dir(kept) ? ERR_OK : materialize(ctl, j, &ck, kept);
    if (e == ERR_NOT_FOUND)
        text_printf(why, whycap, "The base model of %.200s is gone.", name);
    else if (e)
        text_copy(why, whycap, "The checkpoint could not be made into a model.");
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
