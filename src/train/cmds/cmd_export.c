/* cmd_export.c - `alallo export --model-dir DIR ...`: export a local model
 * folder (the client's `alallo export ID` goes through the API instead).
 *
 *   alallo export --model-dir DIR --format hf|peft|gguf|ollama --out PATH
 *                 [--dtype f16|bf16|f32|q8_0|q4_0|q4_k_m] [--adapter-dir DIR]
 *
 * hf copies the checked merged folder; peft copies the adapter folder
 * (--adapter-dir, or DIR/../adapter when DIR is a trainer's out_dir/model);
 * gguf converts the merged folder; ollama makes a folder PATH holding
 * model.gguf and an Ollama Modelfile (modelfile.h) beside it, built under
 * PATH.tmp and renamed, so it appears whole or not at all. Prints one JSON
 * line on success.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/cmd_help.h"
#include "train/cmds/train_cmds.h"
#include "core/fs.h"
#include "core/text.h"
#include "train/formats/export.h"
#include "train/formats/modelfile.h"

static void usage(FILE *f)
{
    fputs("usage: alallo export --model-dir DIR --format hf|peft|gguf|ollama --out PATH"
          " [--dtype f16|bf16|f32|q8_0|q4_0|q4_k_m] [--adapter-dir DIR]\n",
          f);
}

static int is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int parse_dtype(const char *s, enum export_dtype *out)
{
    static const struct {
        const char *name;
        enum export_dtype d;
    } names[] = {{"f16", EXPORT_F16},   {"bf16", EXPORT_BF16}, {"f32", EXPORT_F32},
                 {"q8_0", EXPORT_Q8_0}, {"q4_0", EXPORT_Q4_0}, {"q4_k_m", EXPORT_Q4_K_M}};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        if (strcmp(s, names[i].name) == 0) {
            *out = names[i].d;
            return 0;
        }
    }
    return -1;
}

/* The ollama format: PATH/model.gguf and PATH/Modelfile, made in PATH.tmp. */
static int export_ollama(const char *dir, const char *out, enum export_dtype dt, char *err,
                         size_t cap)
{
    char tmp[4200], gguf[4300], mf[4300];
    struct stat st;
    if (lstat(out, &st) == 0) {
        text_error(err, cap, "%s already exists", out);
        return -1;
    }
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", out) >= sizeof tmp) {
        text_error(err, cap, "the output path is too long");
        return -1;
    }
    snprintf(gguf, sizeof gguf, "%s/model.gguf", tmp);
    snprintf(mf, sizeof mf, "%s/Modelfile", tmp);
    fs_remove_tree(tmp); /* a crashed earlier export's leftovers */
    if (fs_mkdirs(tmp, 0755) < 0) {
        text_error(err, cap, "%s cannot be made", tmp);
        return -1;
    }
    int rc = export_gguf(dir, gguf, dt, err, cap);
    if (rc == 0)
        rc = modelfile_write(dir, "model.gguf", mf, err, cap);
    if (rc == 0 && (rename(tmp, out) != 0 || fs_sync_parent(out) < 0)) {
        text_error(err, cap, "%s cannot be renamed to %s", tmp, out);
        rc = -1;
    }
    if (rc < 0)
        fs_remove_tree(tmp);
    return rc;
}

int cmd_export_local(int argc, char **argv)
{
    if (cmd_help_asked(argc, argv)) {
        usage(stdout);
        return 0;
    }
    const char *dir = NULL, *format = NULL, *out = NULL, *dtype = "f16", *adapter = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **slot = strcmp(a, "--model-dir") == 0     ? &dir
                            : strcmp(a, "--format") == 0      ? &format
                            : strcmp(a, "--out") == 0         ? &out
                            : strcmp(a, "--dtype") == 0       ? &dtype
                            : strcmp(a, "--adapter-dir") == 0 ? &adapter
                                                              : NULL;
        if (!slot || i + 1 >= argc) {
            usage(stderr);
            return 2;
        }
        *slot = argv[++i];
    }
    if (!dir || !format || !out) {
        usage(stderr);
        return 2;
    }
    enum export_dtype dt;
    if (parse_dtype(dtype, &dt) < 0) {
        fprintf(stderr, "alallo export: --dtype must be f16, bf16, f32, q8_0, q4_0 or q4_k_m\n");
        return 2;
    }
    char err[600], guess[4200];
    int rc;
    if (strcmp(format, "hf") == 0) {
        rc = export_hf(dir, out, err, sizeof err);
    } else if (strcmp(format, "gguf") == 0) {
        rc = export_gguf(dir, out, dt, err, sizeof err);
    } else if (strcmp(format, "ollama") == 0) {
        rc = export_ollama(dir, out, dt, err, sizeof err);
    } else if (strcmp(format, "peft") == 0) {
        if (!adapter) {
            snprintf(guess, sizeof guess, "%s/../adapter", dir);
            if (!is_dir(guess)) {
                fprintf(stderr, "alallo export: %s has no adapter beside it (%s); "
                                "pass --adapter-dir, or export a LoRA job's model\n",
                        dir, guess);
                return 1;
            }
            adapter = guess;
        }
        rc = export_peft(adapter, out, err, sizeof err);
    } else {
        fprintf(stderr, "alallo export: --format must be hf, peft, gguf or ollama\n");
        return 2;
    }
    if (rc < 0) {
        fprintf(stderr, "alallo export: %s\n", err);
        return 1;
    }
    json_t *o = json_pack("{s:s, s:s}", "format", format, "out", out);
    char *line = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    if (line)
        puts(line);
    free(line);
    json_decref(o);
    return 0;
}
