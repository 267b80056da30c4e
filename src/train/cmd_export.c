/* cmd_export.c - `alallo export --model-dir DIR ...`: export a local model
 * folder (the client's `alallo export ID` goes through the API instead).
 *
 *   alallo export --model-dir DIR --format hf|peft|gguf --out PATH
 *                 [--dtype f16|bf16|f32] [--adapter-dir DIR]
 *
 * hf copies the checked merged folder; peft copies the adapter folder
 * (--adapter-dir, or DIR/../adapter when DIR is a trainer's out_dir/model);
 * gguf converts the merged folder. Prints one JSON line on success.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "train/train_cmds.h"
#include "train/export.h"

static void usage(FILE *f)
{
    fputs("usage: alallo export --model-dir DIR --format hf|peft|gguf --out PATH"
          " [--dtype f16|bf16|f32] [--adapter-dir DIR]\n",
          f);
}

static int is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

int cmd_export_local(int argc, char **argv)
{
    const char *dir = NULL, *format = NULL, *out = NULL, *dtype = "f16", *adapter = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **slot = strcmp(a, "--model-dir") == 0     ? &dir
                            : strcmp(a, "--format") == 0      ? &format
                            : strcmp(a, "--out") == 0         ? &out
                            : strcmp(a, "--dtype") == 0       ? &dtype
                            : strcmp(a, "--adapter-dir") == 0 ? &adapter
                                                              : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        }
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
    if (strcmp(dtype, "f16") != 0 && strcmp(dtype, "bf16") != 0 && strcmp(dtype, "f32") != 0) {
        fprintf(stderr, "alallo export: --dtype must be f16, bf16 or f32\n");
        return 2;
    }
    char err[600], guess[4200];
    int rc;
    if (strcmp(format, "hf") == 0) {
        rc = export_hf(dir, out, err, sizeof err);
    } else if (strcmp(format, "gguf") == 0) {
        enum export_dtype dt = strcmp(dtype, "bf16") == 0  ? EXPORT_BF16
                               : strcmp(dtype, "f32") == 0 ? EXPORT_F32
                                                           : EXPORT_F16;
        rc = export_gguf(dir, out, dt, err, sizeof err);
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
        fprintf(stderr, "alallo export: --format must be hf, peft or gguf\n");
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
