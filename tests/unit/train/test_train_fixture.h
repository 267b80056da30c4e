/* test_train_fixture.h - folders for trainer tests (header-only): a
 * byte-level tokenizer.json (id = byte, 256 = <|endoftext|>), a tiny random
 * model folder in Hugging Face layout, and small JSONL data sets. */
#ifndef ALALLO_TEST_TRAIN_FIXTURE_H
#define ALALLO_TEST_TRAIN_FIXTURE_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "train/model/model.h"
#include "train/formats/modelio.h"

/* GPT-2's printable stand-in for byte b, UTF-8 encoded into out. */
static inline void fx_byte_char(int b, char out[4])
{
#define FX_PRINTABLE(i)                                                                    \
    (((i) >= 33 && (i) <= 126) || ((i) >= 161 && (i) <= 172) || ((i) >= 174 && (i) <= 255))
    int cp = b;
    if (!FX_PRINTABLE(b)) {
        int n = 0;
        for (int i = 0; i < b; i++)
            n += !FX_PRINTABLE(i);
        cp = 256 + n;
    }
#undef FX_PRINTABLE
    memset(out, 0, 4);
    if (cp < 0x80) {
        out[0] = (char)cp;
    } else {
        out[0] = (char)(0xc0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3f));
    }
}

static inline int fx_write_tokenizer(const char *path)
{
    json_t *vocab = json_object();
    for (int b = 0; b < 256; b++) {
        char s[4];
        fx_byte_char(b, s);
        json_object_set_new(vocab, s, json_integer(b));
    }
    json_t *root = json_pack("{s:[{s:i,s:s,s:b}], s:{s:s,s:b,s:b}, s:{s:s}, s:{s:s,s:o,s:[]}}",
                             "added_tokens", "id", 256, "content", "<|endoftext|>", "special", 1,
                             "pre_tokenizer", "type", "ByteLevel", "add_prefix_space", 0,
                             "use_regex", 1, "decoder", "type", "ByteLevel", "model", "type",
                             "BPE", "vocab", vocab, "merges");
    int rc = json_dump_file(root, path, 0);
    json_decref(root);
    return rc;
}

/* A tiny model (shape "tiny" or custom) at dir with the byte tokenizer,
 * its matrices' random values times scale (8: answers that vary, for
 * generation tests). */
static inline int fx_make_model_scaled(const char *dir, const struct model_config *cfg_or_null,
                                       uint64_t seed, float scale)
{
    struct model_config c;
    if (cfg_or_null)
        c = *cfg_or_null;
    else if (model_config_shape("tiny", 257, &c))
        return -1;
    c.bos_id = c.eos_id = 256;
    char err[512];
    struct model_opts o = {.full = 1};
    struct model *m = model_create(&c, &o, err, sizeof err);
    int bad = !m || model_init_random(m, seed);
    for (size_t i = 0; !bad && i < m->n_decay; i++)
        m->train[i] *= scale;
    if (bad || modelio_save_merged(m, dir, NULL, err, sizeof err)) {
        fprintf(stderr, "fixture: %s\n", err);
        model_free(m);
        return -1;
    }
    model_free(m);
    char path[1100];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    return fx_write_tokenizer(path);
}

/* A tiny model (shape "tiny" or custom) at dir with the byte tokenizer. */
static inline int fx_make_model(const char *dir, const struct model_config *cfg_or_null,
                                uint64_t seed)
{
    return fx_make_model_scaled(dir, cfg_or_null, seed, 1.0f);
}

/* n prompt/completion lines with a learnable rule: the completion repeats
 * the prompt's first word. */
static inline int fx_write_data(const char *path, int n)
{
    static const char *const words[] = {"apple", "river", "stone", "cloud", "ember", "frost"};
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    for (int i = 0; i < n; i++)
        fprintf(f, "{\"prompt\":\"%s says:\",\"completion\":\" %s\"}\n", words[i % 6],
                words[i % 6]);
    return fclose(f);
}

/* Writes n preference pairs (DPO's data): the word said is preferred to
 * the next word. 0 or -1. */
static inline int fx_write_pairs(const char *path, int n)
{
    static const char *const words[] = {"apple", "river", "stone", "cloud", "ember", "frost"};
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    for (int i = 0; i < n; i++)
        fprintf(f,
                "{\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"%s says:\"}]},"
                "\"preferred_output\":[{\"role\":\"assistant\",\"content\":\"%s\"}],"
                "\"non_preferred_output\":[{\"role\":\"assistant\",\"content\":\"%s\"}]}\n",
                words[i % 6], words[i % 6], words[(i + 1) % 6]);
    return fclose(f);
}

/* Writes an ATTEMPT.json; `extra` is spliced in as more JSON fields ("" for
 * none, else e.g. "\"adapter\":\"full\","). */
static inline int fx_write_attempt(const char *path, const char *root, const char *extra,
                                   int max_steps, int ckpt_every)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f,
            "{%s\"model_dir\":\"%s/model\",\"train_file\":\"%s/train.jsonl\","
            "\"train_file_name\":\"train.jsonl\",\"checkpoint_dir\":\"%s/ck\","
            "\"out_dir\":\"%s/out\",\"batch_size\":4,\"learning_rate\":0.01,\"seed\":3,"
            "\"max_steps\":%d,\"seq_len\":64,\"checkpoint_every_steps\":%d,\"threads\":2}\n",
            extra, root, root, root, root, max_steps, ckpt_every);
    return fclose(f);
}

/* A shell command's exit status (128 when it did not exit). */
static inline int fx_sh(const char *cmd)
{
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* A fresh folder /tmp/alallo-TAG-PID (into dir) holding tokenizer.json,
 * for the PyTorch comparisons. 0 or -1. */
static inline int fx_torch_root(char *dir, size_t cap, const char *tag)
{
    snprintf(dir, cap, "/tmp/alallo-%s-%ld", tag, (long)getpid());
    char cmd[600], p[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (fx_sh(cmd) || mkdir(dir, 0755))
        return -1;
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    return fx_write_tokenizer(p);
}

/* Reads a whole file (malloc'd); NULL on failure. */
static inline char *fx_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        *len = (size_t)n;
    }
    return buf;
}

#endif
