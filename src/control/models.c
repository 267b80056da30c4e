/* models.c - see models.h. */
#include "control/models.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "control/child.h"
#include "control/fleet.h"
#include "control/lifecycle.h"
#include "control/sched_link.h"
#include "core/fs.h"
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

bool control_model_dir(struct control *ctl, const char *account, const char *id, char *dir,
                       size_t cap)
{
    struct catalog_model m;
    if (catalog_find(ctl->catalog, id, &m))
        return text_copy(dir, cap, m.dir);
    struct store_job *j = malloc(sizeof *j);
    bool found = j && store_job_by_model(ctl->store, account, id, j) == ERR_OK &&
                 lifecycle_job_dir(ctl, j->id, "out/model", dir, cap);
    free(j);
    return found;
}

enum alallo_err control_generate(struct control *ctl, const char *dir, const char *model_name,
                                 const struct control_generation *g, int timeout_s,
                                 json_t **out)
{
    *out = NULL;
    char max_tokens[24], temperature[32], seed[24];
    text_printf(max_tokens, sizeof max_tokens, "%ld", g->max_tokens);
    text_printf(temperature, sizeof temperature, "%g", g->temperature);
    text_printf(seed, sizeof seed, "%ld", g->seed);
    char *argv[16] = {ctl->alallo_bin,  "generate",    "--model-dir",    (char *)dir,
                      "--prompt",       (char *)g->prompt, "--max-tokens", max_tokens,
                      "--temperature",  temperature,   "--json"};
    if (g->seed >= 0) {
        argv[11] = "--seed";
        argv[12] = seed;
    }
    struct child_result r;
    int rc = child_run(argv, timeout_s, 4 << 20, &r);
    json_t *o = NULL;
    if (rc == 0 && r.exit_status == 0 && r.out) {
        /* The JSON object is the last line it printed. */
        char *last = r.out + r.out_len;
        while (last > r.out && (last[-1] == '\n' || last[-1] == '\r'))
            *--last = '\0';
        char *nl = strrchr(r.out, '\n');
        o = json_loads(nl ? nl + 1 : r.out, 0, NULL);
    }
    enum alallo_err e = ERR_OK;
    if (!json_is_object(o)) {
        e = r.timed_out ? ERR_UNAVAILABLE : ERR_INTERNAL;
        log_line("error", "generate for %s failed (exit %d, signal %d): %.300s", model_name,
                 r.exit_status, r.signal, r.err);
        json_decref(o);
        o = NULL;
    }
    child_result_free(&r);
    *out = o;
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

/* The child's error for the caller: "PREFIX: " and its stderr (or
 * `fallback`), cut at the first newline when first_line, else without a
 * final newline. */
static void child_reason(const struct child_result *r, const char *prefix, const char *fallback,
                         bool first_line, char *why, size_t whycap)
{
    text_printf(why, whycap, "%s: %.600s", prefix, r->err[0] ? r->err : fallback);
    char *nl = strchr(why, '\n');
    if (nl && (first_line || nl[1] == '\0'))
        *nl = '\0';
}

enum alallo_err control_export(struct control *ctl, const char *dir, const char *format,
                               struct control_artifact *out, char *why, size_t whycap)
{
    why[0] = '\0';
    enum alallo_err e =
        artifact_begin(ctl, "export", strcmp(format, "gguf") == 0 ? "model.gguf" : format, out);
    if (e)
        return e;
    char *argv[] = {ctl->alallo_bin, "export", "--model-dir", (char *)dir, "--format",
                    (char *)format,  "--out",  out->path,     NULL};
    struct child_result r;
    if (child_run(argv, CONTROL_EXPORT_TIMEOUT_S, 1 << 20, &r) != 0 || r.exit_status != 0) {
        child_reason(&r, "Export failed", "the export did not finish", false, why, whycap);
        e = r.exit_status == 2 || r.exit_status == 3 ? ERR_INVALID : ERR_INTERNAL;
        child_result_free(&r);
        control_artifact_free(out);
        return e;
    }
    child_result_free(&r);
    struct stat st;
    if (stat(out->path, &st) != 0) {
        text_copy(why, whycap, "Export produced nothing.");
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
    if (!lifecycle_model_dir(ctl, j, base, sizeof base)) {
        text_copy(why, whycap, "The job's base model is gone.");
        return ERR_NOT_FOUND;
    }
    enum alallo_err e = artifact_begin(ctl, "ckpt", "model", out);
    if (e)
        return e;
    char *argv[] = {ctl->alallo_bin, "train", "--materialize", (char *)ckpt_path, "--base", base,
                    "--out",         out->path, NULL};
    struct child_result r;
    if (child_run(argv, CONTROL_EXPORT_TIMEOUT_S, 1 << 20, &r) != 0 || r.exit_status != 0) {
        child_reason(&r, "The checkpoint could not be made into a model",
                     "the materializer did not finish", true, why, whycap);
        child_result_free(&r);
        control_artifact_free(out);
        return ERR_INTERNAL;
    }
    child_result_free(&r);
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
