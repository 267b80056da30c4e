/* models.c - see models.h. */
#include "control/models.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/child.h"
#include "control/checkpoint_models.h"
#include "control/fleet.h"
#include "control/paths.h"
#include "control/sched_link.h"
#include "core/fs.h"
#include "core/ids.h"
#include "core/text.h"

/* The memory of the largest active worker now; 0 when none. */
static int64_t biggest_worker(struct control *ctl)
{
    struct fleet *f = malloc(sizeof *f);
    int64_t best = 0;
    if (!f)
        return 0;
    fleet_snapshot(ctl, f);
    for (int i = 0; i < f->n; i++)
        if (f->workers[i].state == WORKER_ACTIVE && f->workers[i].mem_bytes > best)
            best = f->workers[i].mem_bytes;
    free(f);
    return best;
}

void control_model_methods(struct control *ctl, const struct catalog_model *m,
                           struct control_method out[CONTROL_METHODS])
{
    static const struct store_job kinds_job[CONTROL_METHODS] = {
        {.precision = "16-bit", .adapter = "lora", .batch_size = 8},
        {.precision = "16-bit", .adapter = "full", .batch_size = 8},
        {.precision = "4-bit", .adapter = "lora", .batch_size = 8},
    };
    static const char *const precisions[CONTROL_METHODS] = {"16-bit", "16-bit", "4-bit"};
    static const char *const adapters[CONTROL_METHODS] = {"lora", "full", "lora"};
    int64_t biggest = biggest_worker(ctl);
    for (int i = 0; i < CONTROL_METHODS; i++) {
        struct plan_job pj, norm;
        struct plan_memory mem = {0};
        char why[200];
        sched_link_plan_job(m, &kinds_job[i], &pj);
        if (planner_normalize(&pj, &norm, why, sizeof why) == ERR_OK)
            planner_memory(&norm, &mem, why, sizeof why);
        out[i] = (struct control_method){.precision = precisions[i],
                                         .adapter = adapters[i],
                                         .memory_bytes = mem.total,
                                         .available = mem.total <= biggest};
    }
}

bool control_model_name(struct control *ctl, const char *account, const char *id, char *out,
                        size_t cap, char *why, size_t whycap)
{
    why[0] = '\0';
    if (strncmp(id, "ftjob-", 6) != 0)
        return text_copy(out, cap, id);
    struct store_job *j = malloc(sizeof *j);
    bool ok = false;
    if (!j || store_job_get(ctl->store, account, id, j) != ERR_OK) {
        text_printf(why, whycap, "No such job: %.100s.", id);
    } else if (j->fine_tuned_model[0]) {
        ok = text_copy(out, cap, j->fine_tuned_model);
    } else if (job_status_is_terminal(j->status)) {
        text_printf(why, whycap, "The job %s %s: it has no model.", j->id,
                    j->status == JOB_FAILED ? "failed" : "was cancelled before it trained");
    } else {
        text_printf(why, whycap, "The job %s is %s: it has no model yet.", j->id,
                    job_status_name(j->status));
    }
    free(j);
    return ok;
}

void control_no_such_model(struct control *ctl, const char *account, const char *id, char *out,
                           size_t cap)
{
    struct catalog_model *ms = calloc(CONTROL_MODELS_NAMED, sizeof *ms);
    struct store_job *js = calloc(CONTROL_MODELS_NAMED, sizeof *js);
    int nm = ms ? catalog_list(ctl->catalog, ms, CONTROL_MODELS_NAMED) : 0, nj = 0;
    if (js && nm < CONTROL_MODELS_NAMED &&
        store_job_list_models(ctl->store, account, CONTROL_MODELS_NAMED - nm, js, &nj) != ERR_OK)
        nj = 0;
    size_t len = 0;
    text_printf(out, cap, "No such model: %.100s.", id);
    len = strlen(out);
    for (int i = 0; i < nm + nj && len + 2 < cap; i++) {
        const char *name = i < nm ? ms[i].id : js[i - nm].fine_tuned_model;
        text_printf(out + len, cap - len, "%s%s", i == 0 ? " Available: " : ", ", name);
        len = strlen(out);
    }
    if (nm + nj > 0 && len + 1 < cap)
        text_printf(out + len, cap - len, ".");
    free(ms);
    free(js);
}

enum alallo_err control_model_dir(struct control *ctl, const char *account, const char *id,
                                  char *dir, size_t cap, char *why, size_t whycap)
{
    why[0] = '\0';
    struct catalog_model m;
    if (catalog_find(ctl->catalog, id, &m))
        return text_copy(dir, cap, m.dir) ? ERR_OK : ERR_INTERNAL;
    struct store_job *j = malloc(sizeof *j);
    if (!j)
        return ERR_NOMEM;
    char adapter[1024], job_id[IDS_MAX];
    long step;
    enum alallo_err e = ERR_NOT_FOUND;
    if (store_job_by_model(ctl->store, account, id, j) == ERR_OK)
        e = control_job_dir(ctl, j->id, "out/model", dir, cap) ? ERR_OK : ERR_INTERNAL;
    else if (control_checkpoint_name_parse(id, job_id, sizeof job_id, &step))
        e = control_checkpoint_model_dir(ctl, account, id, dir, cap, adapter, sizeof adapter, j,
                                         why, whycap);
    else
        control_no_such_model(ctl, account, id, why, whycap);
    free(j);
    return e;
}

/* Makes the artifact's temporary folder, DATA/tmp/PREFIX-XXXXXX, and its
 * path NAME inside it. */
static enum alallo_err artifact_begin(struct control *ctl, const char *prefix, const char *name,
                                      struct control_artifact *a)
{
    memset(a, 0, sizeof *a);
    if (!text_printf(a->tmp, sizeof a->tmp, "%s/tmp/%s-XXXXXX", ctl->cfg.data_dir, prefix) ||
        !mkdtemp(a->tmp) || !text_printf(a->path, sizeof a->path, "%s/%s", a->tmp, name)) {
        log_line("error", "cannot make a folder for a download: %s", strerror(errno));
        a->tmp[0] = '\0';
        return ERR_IO;
    }
    return ERR_OK;
}

/* Runs one child of an export or a checkpoint download. Its stderr may
 * name the data and models folders, so it goes to the operator's log
 * (with `what`) and never to the caller. 0 when it succeeded. */
static int run_child(char **argv, const char *what)
{
    struct child_result r;
    int rc = child_run(argv, CONTROL_EXPORT_TIMEOUT_S, 1 << 20, &r);
    if (rc != 0 || r.exit_status != 0) {
        log_line("error", "%s failed (exit %d, signal %d%s): %.600s", what, r.exit_status,
                 r.signal, r.timed_out ? ", timed out" : "", r.err[0] ? r.err : "no message");
        rc = -1;
    }
    child_result_free(&r);
    return rc;
}

/* The adapter folder of a LoRA job's model, at `adapter` (cap bytes).
 * A finished job has one beside its model (out/adapter); a cancelled job's
 * partial model was made without one, so the adapter is made again from
 * the latest checkpoint into the artifact's folder. ERR_INVALID with a
 * reason when there is none to make. */
static enum alallo_err lora_adapter(struct control *ctl, const struct store_job *j,
                                    struct control_artifact *art, char *adapter, size_t cap,
                                    char *why, size_t whycap)
{
    struct stat st;
    if (control_job_dir(ctl, j->id, "out/adapter", adapter, cap) &&
        stat(adapter, &st) == 0 && S_ISDIR(st.st_mode))
        return ERR_OK;
    struct store_checkpoint ck[1];
    int n = 0;
    char base[1024], merged[1024];
    if (store_checkpoint_list(ctl->store, j->id, ck, 1, &n) != ERR_OK || n == 0 ||
        stat(ck[0].path, &st) != 0 || !control_job_model_dir(ctl, j, base, sizeof base)) {
        text_copy(why, whycap, "This model's adapter is no longer kept; use hf or gguf.");
        return ERR_INVALID;
    }
    if (!text_printf(merged, sizeof merged, "%s/merged", art->tmp) ||
        !text_printf(adapter, cap, "%s/adapter", art->tmp))
        return ERR_INTERNAL;
    char *argv[] = {ctl->alallo_bin, "train",   "--materialize", ck[0].path, "--base", base,
                    "--out",         merged,    "--adapter-out", adapter,    NULL};
    if (run_child(argv, "making the adapter of a partial model") != 0) {
        text_copy(why, whycap, "The export failed.");
        return ERR_INTERNAL;
    }
    return ERR_OK;
}

bool control_export_dtype_valid(const char *dtype)
{
    static const char *const names[] = {"f16", "bf16", "f32", "q8_0", "q4_0", "q4_k_m"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(dtype, names[i]) == 0)
            return true;
    return false;
}

enum alallo_err control_export(struct control *ctl, const char *base_dir,
                               const char *adapter_dir, const struct store_job *j,
                               const char *format, const char *dtype,
                               struct control_artifact *out, char *why, size_t whycap)
{
    why[0] = '\0';
    memset(out, 0, sizeof *out);
    bool peft = strcmp(format, "peft") == 0;
    if (peft && !j) {
        text_copy(why, whycap, "A base model has no adapter; use hf or gguf.");
        return ERR_INVALID;
    }
    if (peft && strcmp(j->adapter, "lora") != 0) {
        text_copy(why, whycap, "A full fine-tune has no adapter; use hf or gguf.");
        return ERR_INVALID;
    }
    char dir[1024], adapter[1024];
    if (base_dir ? !text_copy(dir, sizeof dir, base_dir)
                 : !control_job_dir(ctl, j->id, "out/model", dir, sizeof dir)) {
        text_copy(why, whycap, "The export failed.");
        return ERR_INTERNAL;
    }
    enum alallo_err e =
        artifact_begin(ctl, "export", strcmp(format, "gguf") == 0 ? "model.gguf" : format, out);
    if (e)
        return e;
    if (peft && base_dir && !(adapter_dir && adapter_dir[0])) {
        text_copy(why, whycap, "This model's adapter is no longer kept; use hf or gguf.");
        e = ERR_INVALID;
    } else if (peft) {
        e = base_dir ? (text_copy(adapter, sizeof adapter, adapter_dir) ? ERR_OK : ERR_INTERNAL)
                     : lora_adapter(ctl, j, out, adapter, sizeof adapter, why, whycap);
    }
    if (e) {
        control_artifact_free(out);
        return e;
    }
    char *argv[] = {ctl->alallo_bin, "export",  "--model-dir", dir,     "--format",
                    (char *)format,  "--out",   out->path,     "--dtype", (char *)(dtype ? dtype : "f16"),
                    "--adapter-dir", adapter, NULL};
    if (!peft)
        argv[10] = NULL; /* hf, gguf and ollama export the merged folder only */
    struct stat st;
    if (run_child(argv, "an export") != 0 || stat(out->path, &st) != 0) {
        text_copy(why, whycap, "The export failed.");
        control_artifact_free(out);
        return ERR_INTERNAL;
    }
    out->is_dir = S_ISDIR(st.st_mode);
    return ERR_OK;
}

enum alallo_err control_checkpoint_model(struct control *ctl, const struct store_job *j,
                                         const char *ckpt_path, struct control_artifact *out,
                                         char *why, size_t whycap)
{
    why[0] = '\0';
    memset(out, 0, sizeof *out);
    char base[1024];
    if (!control_job_model_dir(ctl, j, base, sizeof base)) {
        text_copy(why, whycap, "The job's base model is gone.");
        return ERR_NOT_FOUND;
    }
    enum alallo_err e = artifact_begin(ctl, "ckpt", "model", out);
    if (e)
        return e;
    char *argv[] = {ctl->alallo_bin, "train", "--materialize", (char *)ckpt_path, "--base", base,
                    "--out",         out->path, NULL};
    if (run_child(argv, "making a checkpoint into a model") != 0) {
        text_copy(why, whycap, "The checkpoint could not be made into a model.");
        control_artifact_free(out);
        return ERR_INTERNAL;
    }
    out->is_dir = true;
    return ERR_OK;
}

void control_artifact_free(struct control_artifact *a)
{
    if (a && a->tmp[0])
        fs_remove_tree(a->tmp);
    if (a)
        a->tmp[0] = '\0';
}
