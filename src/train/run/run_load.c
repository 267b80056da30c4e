/* run_load.c - a run's tokenizer, chat template and model (run_load.h). */
#include "train/run/run_load.h"

#include <stdio.h>
#include <string.h>

#include "core/rng.h"
#include "train/formats/modelio.h"
#include "train/model/model.h"
#include "train/run/trainer.h"
#include "train/tokenizer/chat_format.h"
#include "train/tokenizer/tokenizer.h"

/* rng_derive's stream of the LoRA adapters' first values */
#define LORA_INIT_STREAM 0x10a

int run_load_text(const struct train_config *c, struct run_text *t, char *err, size_t errcap)
{
    memset(t, 0, sizeof *t);
    char path[TRAIN_MAX_PATH + 64];
    snprintf(path, sizeof path, "%s/tokenizer.json", c->model_dir);
    t->tok = tokenizer_load(path, err, errcap);
    if (!t->tok)
        return TRAIN_USER;
    struct model_config mc;
    snprintf(path, sizeof path, "%s/config.json", c->model_dir);
    if (model_config_load(path, &mc, err, errcap))
        return TRAIN_USER;
    if (tokenizer_vocab_size(t->tok) > mc.vocab) {
        snprintf(err, errcap, "tokenizer.json has %d tokens but config.json's vocab_size is %d",
                 tokenizer_vocab_size(t->tok), mc.vocab);
        return TRAIN_USER;
    }
    t->seq = c->seq_len < mc.max_pos ? c->seq_len : mc.max_pos;
    /* The model's own chat template, when it has one (docs/data.md). */
    t->fmt = chat_format_load(c->model_dir, t->fmt_err, sizeof t->fmt_err);
    if (t->fmt)
        t->fmt_err[0] = '\0';
    return TRAIN_OK;
}

void run_text_free(struct run_text *t)
{
    tokenizer_free(t->tok);
    chat_format_free(t->fmt);
    t->tok = NULL;
    t->fmt = NULL;
}

const char *run_text_why_no_format(const struct run_text *t)
{
    return !t->fmt && t->fmt_err[0] ? t->fmt_err : NULL; /* fails chat lines only */
}

void run_model_opts(const struct train_config *c, struct model_opts *out)
{
    memset(out, 0, sizeof *out);
    out->full = c->full;
    out->base_kind = c->four_bit ? WK_NF4 : WK_BF16;
    if (!c->full) {
        out->lora_r = c->lora_r;
        out->lora_alpha = c->lora_alpha;
        out->lora_targets = c->lora_targets;
    }
}

struct model *run_load_model(const struct train_config *c, int *rc, char *err, size_t errcap)
{
    struct model_opts o;
    run_model_opts(c, &o);
    struct model *m = modelio_load(c->model_dir, &o, err, errcap);
    if (!m) {
        *rc = strstr(err, "out of memory") ? TRAIN_INTERNAL : TRAIN_USER;
        return NULL;
    }
    model_lora_init(m, rng_derive(c->seed, LORA_INIT_STREAM));
    *rc = TRAIN_OK;
    return m;
}
