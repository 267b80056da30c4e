/* bpe_train.c - placeholder while the trainer is written (see bpe_train.h). */
#include "train/bpe_train.h"

#include <stdio.h>
#include <stdlib.h>

struct bpe_trainer {
    int unused;
};

struct bpe_trainer *bpe_train_new(void)
{
    return calloc(1, sizeof(struct bpe_trainer));
}

void bpe_train_free(struct bpe_trainer *bt)
{
    free(bt);
}

int bpe_train_add_text(struct bpe_trainer *bt, const char *text, size_t len, char *err,
                       size_t errcap)
{
    snprintf(err, errcap, "tokenizer training is not built yet");
    return -1;
}

int bpe_train_run(struct bpe_trainer *bt, int vocab_size, int min_frequency,
                  struct bpe_train_result *out, char *err, size_t errcap)
{
    snprintf(err, errcap, "tokenizer training is not built yet");
    return -1;
}

char *bpe_train_json(const struct bpe_trainer *bt)
{
    return NULL;
}

int bpe_train_write(const struct bpe_trainer *bt, const char *path, char *err, size_t errcap)
{
    snprintf(err, errcap, "tokenizer training is not built yet");
    return -1;
}
