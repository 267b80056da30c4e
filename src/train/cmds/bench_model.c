/* bench_model.c - the options, model and batch of `alallo bench train`
 * (bench_model.h). */
#include "train/cmds/bench_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/rng.h"
#include "train/cmds/cmd_args.h"
#include "train/formats/modelio.h"

#define WHO "alallo bench train"

int bench_opts_parse(int argc, char **argv, struct bench_opts *o)
{
    memset(o, 0, sizeof *o);
    o->model_dir = cmd_arg_value(argc, argv, "--model");
    o->shape = cmd_arg_value(argc, argv, "--shape");
    o->precision = cmd_arg_value(argc, argv, "--precision");
    o->adapter = cmd_arg_value(argc, argv, "--adapter");
    if (!o->precision)
        o->precision = "16-bit";
    if (!o->adapter)
        o->adapter = "lora";
    if (!o->model_dir && !o->shape)
        o->shape = "124m";
    o->B = 4, o->T = 64, o->steps = 5, o->lora_r = 16, o->vocab = 0;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    o->threads = cpus > 0 ? (int)cpus : 1;
    if (cmd_int_opt(WHO, argc, argv, "--batch", 1, 1024, &o->B) ||
        cmd_int_opt(WHO, argc, argv, "--seq", 2, 65536, &o->T) ||
        cmd_int_opt(WHO, argc, argv, "--steps", 2, 100000, &o->steps) ||
        cmd_int_opt(WHO, argc, argv, "--threads", 1, 1024, &o->threads) ||
        cmd_int_opt(WHO, argc, argv, "--lora-r", 1, 1024, &o->lora_r) ||
        cmd_int_opt(WHO, argc, argv, "--vocab", 2, MODEL_MAX_VOCAB, &o->vocab))
        return 2;
    o->lr = 1e-5f;
    const char *lr_s = cmd_arg_value(argc, argv, "--lr");
    if (lr_s) {
        char *end;
        o->lr = strtof(lr_s, &end);
        if (end == lr_s || *end || !(o->lr > 0.0f && o->lr < 1.0f)) {
            fputs(WHO ": --lr must be a number between 0 and 1\n", stderr);
            return 2;
        }
    }
    /* a list "tiny,base": each a known shape (bench train measures each);
     * no empty name, at either end or between two commas */
    for (const char *p = o->shape; p && *p;) {
        size_t len = strcspn(p, ",");
        char one[32];
        struct model_config shape_c;
        if (len == 0 || len >= sizeof one || (p[len] == ',' && !p[len + 1])) {
            fprintf(stderr, WHO ": --shape is a shape or a list of them, as tiny,base\n");
            return 2;
        }
        memcpy(one, p, len);
        one[len] = '\0';
        if (model_config_shape(one, bench_shape_vocab(one), &shape_c)) {
            fprintf(stderr, WHO ": unknown shape '%s' (" BENCH_SHAPES ")\n", one);
            return 2;
        }
        p += len + (p[len] == ',');
    }
    o->full = strcmp(o->adapter, "full") == 0;
    o->four = strcmp(o->precision, "4-bit") == 0;
    if ((!o->full && strcmp(o->adapter, "lora") != 0) ||
        (!o->four && strcmp(o->precision, "16-bit") != 0) || (o->full && o->four)) {
        fputs(WHO ": --adapter lora|full, --precision 16-bit|4-bit (full needs 16-bit)\n",
              stderr);
        return 2;
    }
    return 0;
}

int bench_shape_vocab(const char *shape)
{
    if (strcmp(shape, "tiny") == 0)
        return 512;
    return strcmp(shape, "base") == 0 || strcmp(shape, "small") == 0 ? 4096 : 0;
}

int bench_setup_make(const struct bench_opts *o, struct bench_setup *s, char *err,
                     size_t errcap)
{
    memset(s, 0, sizeof *s);
    struct model_opts mo = {.full = o->full, .base_kind = o->four ? WK_NF4 : WK_BF16};
    if (!o->full) {
        mo.lora_r = o->lora_r;
        mo.lora_alpha = 2.0f * (float)o->lora_r;
        mo.lora_targets = MODEL_ALL_PROJ;
    }
    if (o->model_dir) {
        s->m = modelio_load(o->model_dir, &mo, err, errcap);
    } else {
        struct model_config c;
        int vocab = o->vocab;
        if (!vocab)
            vocab = bench_shape_vocab(o->shape);
        if (model_config_shape(o->shape, vocab, &c)) {
            snprintf(err, errcap, "unknown shape '%s' (" BENCH_SHAPES ")", o->shape);
            return -1;
        }
        s->m = model_create(&c, &mo, err, errcap);
        if (s->m && model_init_random(s->m, 1)) {
            snprintf(err, errcap, "out of memory");
            model_free(s->m);
            s->m = NULL;
        }
    }
    if (!s->m)
        return -1;
    model_lora_init(s->m, 2);
    size_t n = (size_t)o->B * o->T;
    s->ids = malloc(sizeof *s->ids * n);
    s->mask = malloc(n);
    if (!s->ids || !s->mask || optim_init(&s->opt, s->m->n_train, s->m->n_decay, 0.0f) ||
        model_rope_ensure(s->m, o->T)) {
        snprintf(err, errcap, "out of memory");
        bench_setup_free(s);
        return -1;
    }
    struct rng g;
    rng_seed(&g, 7);
    for (size_t i = 0; i < n; i++) {
        s->ids[i] = (int32_t)rng_below(&g, (uint64_t)s->m->cfg.vocab);
        s->mask[i] = 1;
    }
    s->n_targets = model_count_targets(s->mask, o->B, o->T);
    return 0;
}

void bench_setup_free(struct bench_setup *s)
{
    if (!s)
        return;
    free(s->ids);
    free(s->mask);
    optim_free(&s->opt);
    model_free(s->m);
    memset(s, 0, sizeof *s);
}

double bench_flops_per_token(const struct model *m, const struct bench_opts *o)
{
    const struct model_config *c = &m->cfg;
    /* a mixture of experts computes with its active parameters */
    double n_model = (double)model_config_active_params(c);
    return o->full ? 6.0 * n_model + 6.0 * c->n_layers * c->hidden * (double)o->T
                   : 4.0 * n_model + 6.0 * (double)m->n_train;
}
