/* cmd_tokenizer.c - `alallo tokenizer train|encode|decode`.
 *
 *   alallo tokenizer train --input FILE... --vocab-size N --out tokenizer.json
 *                          [--min-frequency K]
 *   alallo tokenizer encode --tokenizer FILE (--text TEXT | --file PATH) [--special]
 *   alallo tokenizer decode --tokenizer FILE --ids 1,2,3 [--skip-special]
 *
 * encode prints the ids as one JSON array; decode prints the text as one
 * JSON string. Both exist for tests and for people checking a tokenizer.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/cmd_help.h"
#include "train/cmds/train_cmds.h"
#include "train/tokenizer/bpe_train.h"
#include "train/tokenizer/tokenizer.h"

#define MAX_INPUTS 256
#define MAX_TEXT_FILE ((size_t)64 << 20)

static void usage(FILE *f)
{
    fputs("usage: alallo tokenizer train --input FILE... --vocab-size N --out tokenizer.json"
          " [--min-frequency K]\n"
          "       alallo tokenizer encode --tokenizer FILE (--text TEXT | --file PATH) [--special]\n"
          "       alallo tokenizer decode --tokenizer FILE --ids 1,2,3 [--skip-special]\n",
          f);
}

/* Reads a whole file of at most `cap` bytes; NULL with errno on failure. */
static char *read_file(const char *path, size_t cap, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    size_t n = 0, size = 1 << 16;
    char *buf = malloc(size + 1);
    while (buf) {
        if (n == size) {
            if (size >= cap) {
                free(buf);
                fclose(fp);
                errno = EFBIG;
                return NULL;
            }
            size = size * 2 > cap ? cap : size * 2;
            char *nb = realloc(buf, size + 1);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, size - n, fp);
        n += r;
        if (r == 0)
            break;
    }
    if (buf && ferror(fp)) {
        free(buf);
        buf = NULL;
    }
    fclose(fp);
    if (buf) {
        buf[n] = '\0';
        *len = n;
    }
    return buf;
}

static int cmd_encode(int argc, char **argv)
{
    const char *tok_path = NULL, *text = NULL, *file = NULL;
    int special = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tokenizer") == 0 && i + 1 < argc)
            tok_path = argv[++i];
        else if (strcmp(argv[i], "--text") == 0 && i + 1 < argc)
            text = argv[++i];
        else if (strcmp(argv[i], "--file") == 0 && i + 1 < argc)
            file = argv[++i];
        else if (strcmp(argv[i], "--special") == 0)
            special = 1;
        else {
            usage(stderr);
            return 2;
        }
    }
    if (!tok_path || !!text == !!file) {
        usage(stderr);
        return 2;
    }
    char err[300];
    struct tokenizer *t = tokenizer_load(tok_path, err, sizeof err);
    if (!t) {
        fprintf(stderr, "alallo tokenizer: %s\n", err);
        return 1;
    }
    size_t len = text ? strlen(text) : 0;
    char *buf = NULL;
    if (file) {
        buf = read_file(file, MAX_TEXT_FILE, &len);
        if (!buf) {
            fprintf(stderr, "alallo tokenizer: %s: %s\n", file, strerror(errno));
            tokenizer_free(t);
            return 1;
        }
        text = buf;
    }
    int32_t *ids;
    size_t n;
    int rc = special ? tokenizer_encode_special(t, text, len, &ids, &n)
                     : tokenizer_encode(t, text, len, &ids, &n);
    free(buf);
    tokenizer_free(t);
    if (rc < 0) {
        fprintf(stderr, "alallo tokenizer: cannot encode (out of memory or over 64 MiB)\n");
        return 1;
    }
    putchar('[');
    for (size_t i = 0; i < n; i++)
        printf(i ? ",%d" : "%d", (int)ids[i]);
    puts("]");
    free(ids);
    return 0;
}

static int cmd_decode(int argc, char **argv)
{
    const char *tok_path = NULL, *list = NULL;
    int skip = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tokenizer") == 0 && i + 1 < argc)
            tok_path = argv[++i];
        else if (strcmp(argv[i], "--ids") == 0 && i + 1 < argc)
            list = argv[++i];
        else if (strcmp(argv[i], "--skip-special") == 0)
            skip = 1;
        else {
            usage(stderr);
            return 2;
        }
    }
    if (!tok_path || !list) {
        usage(stderr);
        return 2;
    }
    size_t cap = strlen(list) / 2 + 1, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids)
        return 1;
    for (const char *p = list; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX || n == cap || (*end && *end != ',')) {
            fprintf(stderr, "alallo tokenizer: --ids must be comma-separated non-negative integers\n");
            free(ids);
            return 2;
        }
        ids[n++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    char err[300];
    struct tokenizer *t = tokenizer_load(tok_path, err, sizeof err);
    if (!t) {
        fprintf(stderr, "alallo tokenizer: %s\n", err);
        free(ids);
        return 1;
    }
    char *s = tokenizer_decode(t, ids, n, skip);
    free(ids);
    tokenizer_free(t);
    if (!s)
        return 1;
    json_t *js = json_string(s);
    char *out = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
    free(s);
    json_decref(js);
    if (!out)
        return 1;
    puts(out);
    free(out);
    return 0;
}

static int cmd_train_tok(int argc, char **argv)
{
    const char *inputs[MAX_INPUTS];
    int n_inputs = 0;
    const char *out = NULL;
    long vocab = 0, min_freq = 2;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--input") == 0 && i + 1 < argc) {
            /* --input takes every following argument up to the next option */
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
                if (n_inputs == MAX_INPUTS) {
                    fprintf(stderr, "alallo tokenizer: at most %d input files\n", MAX_INPUTS);
                    return 2;
                }
                inputs[n_inputs++] = argv[++i];
            }
        } else if (strcmp(argv[i], "--vocab-size") == 0 && i + 1 < argc) {
            vocab = strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--min-frequency") == 0 && i + 1 < argc) {
            min_freq = strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            out = argv[++i];
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (n_inputs == 0 || !out || vocab < BPE_TRAIN_MIN_VOCAB || vocab > BPE_TRAIN_MAX_VOCAB ||
        min_freq < 1) {
        if (vocab && (vocab < BPE_TRAIN_MIN_VOCAB || vocab > BPE_TRAIN_MAX_VOCAB))
            fprintf(stderr, "alallo tokenizer: --vocab-size must be %d..%d\n", BPE_TRAIN_MIN_VOCAB,
                    BPE_TRAIN_MAX_VOCAB);
        usage(stderr);
        return 2;
    }
    struct bpe_trainer *bt = bpe_train_new();
    if (!bt)
        return 1;
    char err[300];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < n_inputs; i++) {
        size_t len;
        char *text = read_file(inputs[i], BPE_TRAIN_MAX_INPUT, &len);
        if (!text) {
            fprintf(stderr, "alallo tokenizer: %s: %s\n", inputs[i],
                    errno == EFBIG ? "larger than 1 GiB" : strerror(errno));
            bpe_train_free(bt);
            return 1;
        }
        int rc = bpe_train_add_text(bt, text, len, err, sizeof err);
        free(text);
        if (rc < 0) {
            fprintf(stderr, "alallo tokenizer: %s: %s\n", inputs[i], err);
            bpe_train_free(bt);
            return 1;
        }
    }
    struct bpe_train_result res;
    int rc = bpe_train_run(bt, (int)vocab, (int)min_freq, &res, err, sizeof err);
    if (rc == 0)
        rc = bpe_train_write(bt, out, err, sizeof err);
    bpe_train_free(bt);
    if (rc < 0) {
        fprintf(stderr, "alallo tokenizer: %s\n", err);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    json_t *o = json_pack("{s:s, s:i, s:i, s:I, s:f}", "out", out, "vocab_size", res.vocab_size,
                          "merges", res.n_merges, "words", (json_int_t)res.n_words, "seconds",
                          s);
    char *line = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(3)) : NULL;
    json_decref(o);
    if (line)
        puts(line);
    free(line);
    return 0;
}

int cmd_tokenizer(int argc, char **argv)
{
    if (cmd_help_asked(argc, argv)) {
        usage(stdout);
        return 0;
    }
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "train") == 0)
        return cmd_train_tok(argc - 1, argv + 1);
    if (strcmp(argv[1], "encode") == 0)
        return cmd_encode(argc - 1, argv + 1);
    if (strcmp(argv[1], "decode") == 0)
        return cmd_decode(argc - 1, argv + 1);
    usage(stderr);
    return 2;
}
