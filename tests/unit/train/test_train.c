/* test_train.c - `alallo train` end to end on a tiny model, as a worker
 * runs it: the loss goes down, events and exit statuses follow
 * docs/trainer-protocol.md, a resumed run is bit-exact with one that never
 * stopped (LoRA 16-bit, LoRA 4-bit, full), SIGUSR1/SIGTERM checkpoint, and
 * data and settings errors are user errors naming the line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test_child.h"
#include "core/fs.h"
#include "test_train_fixture.h"
#include "train/kernels/cpu_path.h"
#include "train/kernels/onednn.h"
#include "train/formats/checkpoint.h"
#include "train/data/data.h"
#include "train/tokenizer/tokenizer.h"
#include "train/run/trainer.h"

static char base[256];

static int setup(void **state)
{
    (void)state;
    snprintf(base, sizeof base, "/tmp/alallo-test-train-%ld", (long)getpid());
    fs_remove_tree(base);
    return mkdir(base, 0755);
}

static int teardown(void **state)
{
    (void)state;
    return fs_remove_tree(base);
}

/* A run's root folder with model/ and train.jsonl (preference pairs when
 * the folder's name starts with "dpo"). */
static void make_root(const char *root, int n_lines)
{
    char p[512];
    assert_int_equal(mkdir(root, 0755), 0);
    snprintf(p, sizeof p, "%s/model", root);
    assert_int_equal(fx_make_model(p, NULL, 11), 0);
    snprintf(p, sizeof p, "%s/train.jsonl", root);
    const char *name = strrchr(root, '/') ? strrchr(root, '/') + 1 : root;
    int pairs = strncmp(name, "dpo", 3) == 0;
    assert_int_equal(pairs ? fx_write_pairs(p, n_lines) : fx_write_data(p, n_lines), 0);
}

struct result {
    int status;          /* exit status, or 128+signal */
    json_t *events;      /* array of event objects */
};

/* Runs `alallo train --config PATH`. When sig is set, sends it after the
 * first "step" event whose step is >= at_step (then, for SIGUSR1, sends
 * SIGTERM after the following checkpoint event). */
static struct result run_train(const char *config, int sig, int at_step)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t me = getpid();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* an assert below that ends the test leaves it training */
        test_child_dies_with_parent(me);
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0 && !getenv("ALALLO_TEST_VERBOSE"))
            dup2(null, 2);
        execl(ALALLO_BINARY, ALALLO_BINARY, "train", "--config", config, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    struct result r = {0, json_array()};
    char line[65536];
    int sent = 0;
    while (fgets(line, sizeof line, f)) {
        json_error_t je;
        json_t *e = json_loads(line, 0, &je);
        assert_non_null(e); /* stdout holds only JSON event lines */
        assert_non_null(json_object_get(e, "t"));
        const char *name = json_string_value(json_object_get(e, "event"));
        assert_non_null(name);
        json_array_append_new(r.events, e);
        int step = (int)json_integer_value(json_object_get(e, "step"));
        if (sig && !sent && strcmp(name, "step") == 0 && step >= at_step) {
            kill(pid, sig);
            sent = 1;
        } else if (sig == SIGUSR1 && sent == 1 && strcmp(name, "checkpoint") == 0) {
            kill(pid, SIGTERM);
            sent = 2;
        }
    }
    fclose(f);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return r;
}

/* The i-th event called `name` (i < 0 counts from the end), or NULL. */
static json_t *find_event(const struct result *r, const char *name, int i)
{
    int n = (int)json_array_size(r->events), seen = 0;
    for (int k = 0; k < n; k++) {
        int idx = i >= 0 ? k : n - 1 - k;
        json_t *e = json_array_get(r->events, (size_t)idx);
        if (strcmp(json_string_value(json_object_get(e, "event")), name) == 0) {
            if (seen == (i >= 0 ? i : -i - 1))
                return e;
            seen++;
        }
    }
    return NULL;
}

static void loss_goes_down_full(void **state)
{
    (void)state;
    char root[300], cfg[320], p[400];
    snprintf(root, sizeof root, "%s/full", base);
    make_root(root, 48);
    snprintf(cfg, sizeof cfg, "%s/attempt.json", root);
    assert_int_equal(fx_write_attempt(cfg, root, "\"adapter\":\"full\",", 40, 0), 0);
    struct result r = run_train(cfg, 0, 0);
    assert_int_equal(r.status, 0);
    json_t *started = find_event(&r, "started", 0);
    assert_non_null(started);
    assert_int_equal(json_integer_value(json_object_get(started, "step")), 0);
    assert_true(json_is_null(json_object_get(started, "resumed_from")));
    assert_int_equal(json_integer_value(json_object_get(started, "examples")), 48);
    json_t *mem = find_event(&r, "memory", 0);
    assert_non_null(mem);
    assert_true(json_integer_value(json_object_get(mem, "peak_rss_bytes")) > 1000000);
    assert_null(json_object_get(mem, "gpu_peak_bytes")); /* on the CPU: left out */
    json_t *s1 = find_event(&r, "step", 0), *s4 = find_event(&r, "step", -1);
    assert_int_equal(json_integer_value(json_object_get(s1, "step")), 10);
    assert_int_equal(json_integer_value(json_object_get(s4, "step")), 40);
    double l1 = json_real_value(json_object_get(s1, "loss"));
    double l4 = json_real_value(json_object_get(s4, "loss"));
    fprintf(stderr, "full: loss at step 10 %.4f, at step 40 %.4f\n", l1, l4);
    /* from log(257) = 5.55 at the start */
    assert_true(l1 < 5.0);
    assert_true(l4 < 0.8 * l1);
    assert_true(json_real_value(json_object_get(s4, "tokens_per_s")) > 0.0);
    /* the log names the CPU path first, then says what it trains, then steps */
    json_t *log = find_event(&r, "log", 0);
    const char *line = json_string_value(json_object_get(log, "line"));
    assert_true(strncmp(line, "matrix products on the ", 23) == 0);
    log = find_event(&r, "log", 2);
    line = json_string_value(json_object_get(log, "line"));
    assert_true(strncmp(line, "step 10/40: loss ", 17) == 0);
    json_t *done = find_event(&r, "done", 0);
    assert_non_null(done);
    assert_true(json_is_null(json_object_get(done, "adapter_dir")));
    snprintf(p, sizeof p, "%s/out/model", root);
    assert_string_equal(json_string_value(json_object_get(done, "model_dir")), p);
    /* the output folder loads back as a model */
    char err[512];
    struct model_opts o = {0};
    struct model *m = modelio_load(p, &o, err, sizeof err);
    assert_non_null(m);
    model_free(m);
    snprintf(p, sizeof p, "%s/out/model/tokenizer.json", root);
    assert_int_equal(access(p, R_OK), 0);
    json_decref(r.events);
}

static int files_equal(const char *a, const char *b)
{
    size_t na = 0, nb = 0;
    char *x = fx_slurp(a, &na), *y = fx_slurp(b, &nb);
    int eq = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return eq;
}

/* Straight run of 12 steps vs a run that checkpoints every 5, loses its
 * step-10 checkpoint (as if killed after step 9) and resumes from step 5. */
static void resume_exact(const char *name, const char *extra, const char *file)
{
    char ra[300], rb[300], cfg[320], pa[400], pb[400];
    snprintf(ra, sizeof ra, "%s/%s-a", base, name);
    snprintf(rb, sizeof rb, "%s/%s-b", base, name);
    make_root(ra, 30);
    make_root(rb, 30);
    snprintf(cfg, sizeof cfg, "%s/attempt.json", ra);
    assert_int_equal(fx_write_attempt(cfg, ra, extra, 12, 0), 0);
    struct result a = run_train(cfg, 0, 0);
    assert_int_equal(a.status, 0);
    snprintf(cfg, sizeof cfg, "%s/attempt.json", rb);
    assert_int_equal(fx_write_attempt(cfg, rb, extra, 12, 5), 0);
    struct result b1 = run_train(cfg, 0, 0);
    assert_int_equal(b1.status, 0);
    snprintf(pb, sizeof pb, "%s/ck/step-00000010", rb);
    assert_int_equal(fs_remove_tree(pb), 0);
    snprintf(pb, sizeof pb, "%s/out", rb);
    assert_int_equal(fs_remove_tree(pb), 0);
    struct result b2 = run_train(cfg, 0, 0);
    assert_int_equal(b2.status, 0);
    json_t *st = find_event(&b2, "started", 0);
    assert_int_equal(json_integer_value(json_object_get(st, "step")), 5);
    assert_int_equal(json_integer_value(json_object_get(st, "resumed_from")), 5);
    double la = json_real_value(json_object_get(find_event(&a, "done", 0), "train_loss"));
    double lb = json_real_value(json_object_get(find_event(&b2, "done", 0), "train_loss"));
    fprintf(stderr, "%s: final loss straight %.9g, resumed %.9g\n", name, la, lb);
    assert_true(la == lb);
    snprintf(pa, sizeof pa, "%s/out/%s", ra, file);
    snprintf(pb, sizeof pb, "%s/out/%s", rb, file);
    assert_true(files_equal(pa, pb));
    json_decref(a.events);
    json_decref(b1.events);
    json_decref(b2.events);
}

/* The server names the checkpoint to resume from (resume_step): a newer
 * one in the folder (written by an attempt that died before reporting it)
 * is ignored and removed, and the run from the named one is bit-exact
 * with a straight run. */
static void resume_exact_from_the_named_step(void **state)
{
    (void)state;
    char ra[300], rb[300], cfg[320], pa[400], pb[400], extra[64];
    snprintf(ra, sizeof ra, "%s/named-a", base);
    snprintf(rb, sizeof rb, "%s/named-b", base);
    make_root(ra, 30);
    make_root(rb, 30);
    snprintf(cfg, sizeof cfg, "%s/attempt.json", ra);
    assert_int_equal(fx_write_attempt(cfg, ra, "", 12, 0), 0);
    struct result a = run_train(cfg, 0, 0);
    assert_int_equal(a.status, 0);
    snprintf(cfg, sizeof cfg, "%s/attempt.json", rb);
    assert_int_equal(fx_write_attempt(cfg, rb, "", 12, 5), 0);
    struct result b1 = run_train(cfg, 0, 0);
    assert_int_equal(b1.status, 0);
    snprintf(pb, sizeof pb, "%s/out", rb);
    assert_int_equal(fs_remove_tree(pb), 0);
    snprintf(extra, sizeof extra, "\"resume_step\":5,");
    assert_int_equal(fx_write_attempt(cfg, rb, extra, 12, 0), 0);
    struct result b2 = run_train(cfg, 0, 0);
    assert_int_equal(b2.status, 0);
    json_t *st = find_event(&b2, "started", 0);
    assert_int_equal(json_integer_value(json_object_get(st, "step")), 5);
    assert_int_equal(json_integer_value(json_object_get(st, "resumed_from")), 5);
    struct stat sb;
    snprintf(pb, sizeof pb, "%s/ck/step-00000010", rb);
    assert_int_not_equal(stat(pb, &sb), 0); /* the newer one is gone */
    snprintf(pb, sizeof pb, "%s/ck/step-00000005", rb);
    assert_int_equal(stat(pb, &sb), 0); /* the named one stays */
    snprintf(pa, sizeof pa, "%s/out/adapter/adapter_model.safetensors", ra);
    snprintf(pb, sizeof pb, "%s/out/adapter/adapter_model.safetensors", rb);
    assert_true(files_equal(pa, pb));
    /* resume_step 0: from the start, whatever the folder holds */
    snprintf(pb, sizeof pb, "%s/out", rb);
    assert_int_equal(fs_remove_tree(pb), 0);
    assert_int_equal(fx_write_attempt(cfg, rb, "\"resume_step\":0,", 12, 0), 0);
    struct result b3 = run_train(cfg, 0, 0);
    assert_int_equal(b3.status, 0);
    st = find_event(&b3, "started", 0);
    assert_int_equal(json_integer_value(json_object_get(st, "step")), 0);
    assert_true(json_is_null(json_object_get(st, "resumed_from")));
    snprintf(pb, sizeof pb, "%s/out/adapter/adapter_model.safetensors", rb);
    assert_true(files_equal(pa, pb));
    json_decref(a.events);
    json_decref(b1.events);
    json_decref(b2.events);
    json_decref(b3.events);
}

static void resume_exact_lora16(void **state)
{
    (void)state;
    resume_exact("lora16", "", "adapter/adapter_model.safetensors");
}

static void resume_exact_lora4(void **state)
{
    (void)state;
    resume_exact("lora4", "\"precision\":\"4-bit\",", "model/model.safetensors");
}

static void resume_exact_full(void **state)
{
    (void)state;
    resume_exact("full", "\"adapter\":\"full\",\"learning_rate\":0.001,",
                 "model/model.safetensors");
}

/* Every CPU path this machine has: the started event names it, and a run
 * resumed on the same path is bit-exact with one that never stopped. */
static void resume_exact_every_path(void **state)
{
    (void)state;
    for (int p = 0; p < CPU_PATH_COUNT; p++) {
        const char *name = cpu_path_name((enum cpu_path)p);
        if (!cpu_path_supported((enum cpu_path)p)) {
            printf("path %s: skipped, this CPU lacks it (it has: %s)\n", name,
                   cpu_path_flags());
            continue;
        }
        char run[64];
        snprintf(run, sizeof run, "path-%s", name);
        setenv("ALALLO_CPU_PATH", name, 1);
        resume_exact(run, "", "adapter/adapter_model.safetensors");
        unsetenv("ALALLO_CPU_PATH");
    }
}

/* A checkpoint written on one path resumes on another: allowed, and the
 * log says so. An unknown or missing path is refused with a sentence. */
static void resume_on_another_path(void **state)
{
    (void)state;
    enum cpu_path best = cpu_path_best();
    if (best == CPU_PATH_AVX2) {
        printf("resume on another path: skipped, this CPU has only the avx2 path (%s)\n",
               cpu_path_flags());
        skip();
    }
    char root[300], cfg[320], p[400];
    snprintf(root, sizeof root, "%s/otherpath", base);
    make_root(root, 30);
    snprintf(cfg, sizeof cfg, "%s/attempt.json", root);
    assert_int_equal(fx_write_attempt(cfg, root, "", 12, 5), 0);
    setenv("ALALLO_CPU_PATH", "avx2", 1);
    struct result a = run_train(cfg, 0, 0);
    assert_int_equal(a.status, 0);
    assert_string_equal(
        json_string_value(json_object_get(find_event(&a, "started", 0), "cpu_path")), "avx2");
    snprintf(p, sizeof p, "%s/ck/step-00000010", root);
    assert_int_equal(fs_remove_tree(p), 0);
    snprintf(p, sizeof p, "%s/out", root);
    assert_int_equal(fs_remove_tree(p), 0);
    setenv("ALALLO_CPU_PATH", cpu_path_name(best), 1);
    struct result b = run_train(cfg, 0, 0);
    assert_int_equal(b.status, 0);
    json_t *st = find_event(&b, "started", 0);
    assert_int_equal(json_integer_value(json_object_get(st, "resumed_from")), 5);
    assert_string_equal(json_string_value(json_object_get(st, "cpu_path")), cpu_path_name(best));
    int noted = 0;
    for (size_t i = 0; i < json_array_size(b.events); i++) {
        const char *line = json_string_value(json_object_get(json_array_get(b.events, i), "line"));
        if (line && strstr(line, "the checkpoint was written on the avx2 path"))
            noted = 1;
    }
    assert_true(noted);
    /* a path this CPU cannot run, or no such path: the run fails at once */
    setenv("ALALLO_CPU_PATH", "avx1024", 1);
    struct result c = run_train(cfg, 0, 0);
    assert_int_not_equal(c.status, 0);
    json_t *f = find_event(&c, "error", 0);
    assert_non_null(f);
    assert_string_equal(json_string_value(json_object_get(f, "kind")), "internal");
    assert_non_null(strstr(json_string_value(json_object_get(f, "line")), "unknown CPU path"));
    unsetenv("ALALLO_CPU_PATH");
    json_decref(a.events);
    json_decref(b.events);
    json_decref(c.events);
}

/* With LoRA dropout the masks come from the seed and the step: a resumed
 * run drops what the straight one dropped, bit for bit. */
static void resume_exact_lora_dropout(void **state)
{
    (void)state;
    resume_exact("dropout", "\"lora\":{\"dropout\":0.2},", "adapter/adapter_model.safetensors");
}

/* lora.dropout 0 trains exactly what a run without the setting does (as
 * before dropout existed); 0.2 trains something else, and still learns. */
static void lora_dropout_zero_is_unchanged(void **state)
{
    (void)state;
    const char *extra[3] = {"", "\"lora\":{\"dropout\":0},", "\"lora\":{\"dropout\":0.2},"};
    char root[3][300], cfg[1024], p[3][1024];
    double loss[3];
    for (int i = 0; i < 3; i++) {
        snprintf(root[i], sizeof root[i], "%s/drop%d", base, i);
        make_root(root[i], 30);
        snprintf(cfg, sizeof cfg, "%s/attempt.json", root[i]);
        assert_int_equal(fx_write_attempt(cfg, root[i], extra[i], 12, 0), 0);
        struct result r = run_train(cfg, 0, 0);
        assert_int_equal(r.status, 0);
        loss[i] = json_real_value(json_object_get(find_event(&r, "done", 0), "train_loss"));
        snprintf(p[i], sizeof p[i], "%s/out/adapter/adapter_model.safetensors", root[i]);
        json_decref(r.events);
    }
    fprintf(stderr, "dropout: final loss none %.9g, 0 %.9g, 0.2 %.9g\n", loss[0], loss[1],
            loss[2]);
    assert_true(loss[0] == loss[1]);
    assert_true(files_equal(p[0], p[1]));
    assert_true(loss[2] != loss[0] && isfinite(loss[2]) && loss[2] < 5.0);
    assert_false(files_equal(p[0], p[2]));
}

/* DPO resumes bit-exactly too (the pairs' order is the checkpoint's). */
static void resume_exact_dpo(void **state)
{
    (void)state;
    resume_exact("dpo", "\"method\":\"dpo\",\"dpo_beta\":0.5,", "adapter/adapter_model.safetensors");
}

/* DPO learns the preference: the reward margin grows from 0 (the policy
 * starts as the reference) and the pairs end up mostly right; the step
 * events carry the margin and the accuracy. */
static void dpo_learns_the_preference(void **state)
{
    (void)state;
    char root[300], cfg[320];
    snprintf(root, sizeof root, "%s/dpo-learn", base);
    make_root(root, 24);
    snprintf(cfg, sizeof cfg, "%s/attempt.json", root);
    assert_int_equal(fx_write_attempt(cfg, root, "\"method\":\"dpo\",\"dpo_beta\":0.5,", 30, 0),
                     0);
    struct result r = run_train(cfg, 0, 0);
    assert_int_equal(r.status, 0);
    json_t *s1 = find_event(&r, "step", 0), *sl = find_event(&r, "step", -1);
    double m1 = json_number_value(json_object_get(s1, "reward_margin"));
    double ml = json_number_value(json_object_get(sl, "reward_margin"));
    double acc = json_number_value(json_object_get(sl, "reward_accuracy"));
    double loss = json_number_value(json_object_get(sl, "loss"));
    fprintf(stderr, "dpo: margin %.4f -> %.4f, accuracy %.2f, loss %.4f\n", m1, ml, acc, loss);
    assert_non_null(json_object_get(s1, "reward_accuracy"));
    assert_true(ml > m1);
    assert_true(ml > 0.2);
    assert_true(acc >= 0.75);
    assert_true(loss < 0.6931); /* below log 2, where it starts */
    json_decref(r.events);
}

/* SFT data handed to DPO is a user error naming the file (and the other way). */
static void dpo_needs_pairs(void **state)
{
    (void)state;
    char root[300], cfg[320];
    snprintf(root, sizeof root, "%s/sft-for-dpo", base);
    make_root(root, 8);
    snprintf(cfg, sizeof cfg, "%s/attempt.json", root);
    assert_int_equal(fx_write_attempt(cfg, root, "\"method\":\"dpo\",", 3, 0), 0);
    struct result r = run_train(cfg, 0, 0);
    assert_int_equal(r.status, 3);
    json_t *e = find_event(&r, "error", 0);
    assert_non_null(strstr(json_string_value(json_object_get(e, "line")), "preference pairs"));
    json_decref(r.events);
}

/* Packing changes how a step's examples lie in rows, not what they compute:
 * the same run with and without it ends at the same loss, and the step
 * events report how much of what was computed was real tokens. */
static void packing_same_loss_less_padding(void **state)
{
    (void)state;
    double loss[2], eff[2];
    for (int packing = 0; packing < 2; packing++) {
        char root[300], cfg[320], extra[64];
        snprintf(root, sizeof root, "%s/pack%d", base, packing);
        make_root(root, 30);
        /* examples of mixed lengths: a completion of 1 to 8 words */
        char p[400];
        snprintf(p, sizeof p, "%s/train.jsonl", root);
        FILE *f = fopen(p, "w");
        assert_non_null(f);
        for (int i = 0; i < 30; i++) {
            fprintf(f, "{\"prompt\":\"count %d:\",\"completion\":\"", i % 8 + 1);
            for (int w = 0; w <= i % 8; w++)
                fprintf(f, " tick");
            fprintf(f, "\"}\n");
        }
        assert_int_equal(fclose(f), 0);
        snprintf(cfg, sizeof cfg, "%s/attempt.json", root);
        snprintf(extra, sizeof extra, "\"packing\":%d,\"adapter\":\"full\",", packing);
        assert_int_equal(fx_write_attempt(cfg, root, extra, 10, 0), 0);
        struct result r = run_train(cfg, 0, 0);
        assert_int_equal(r.status, 0);
        json_t *st = find_event(&r, "step", -1);
        loss[packing] = json_number_value(json_object_get(st, "loss"));
        eff[packing] = json_number_value(json_object_get(st, "packing_efficiency"));
        json_decref(r.events);
    }
    fprintf(stderr, "packing: loss %.6f / %.6f, efficiency %.3f / %.3f\n", loss[0], loss[1],
            eff[0], eff[1]);
    assert_true(fabs(loss[0] - loss[1]) < 1e-3 * loss[0]);
    assert_true(eff[1] > eff[0]);
    assert_true(eff[1] <= 1.0 && eff[0] > 0.0);
}

static void signals_checkpoint(void **state)
{
    (void)state;
    char root[300], cfg[320];
    snprintf(root, sizeof root, "%s/sig", base);
    make_root(root, 30);
    snprintf(cfg, sizeof cfg, "%s/attempt.json", root);
    assert_int_equal(fx_write_attempt(cfg, root, "", 100000, 0), 0);
    /* SIGUSR1 after step 10: a checkpoint, and training goes on; SIGTERM
     * once that checkpoint is reported: exit 4 with the last step saved
     * (a second checkpoint only if a step ran in between) */
    struct result r = run_train(cfg, SIGUSR1, 10);
    assert_int_equal(r.status, 4);
    json_t *c1 = find_event(&r, "checkpoint", 0), *c2 = find_event(&r, "checkpoint", -1);
    assert_non_null(c1);
    json_int_t s1 = json_integer_value(json_object_get(c1, "step"));
    json_int_t s2 = json_integer_value(json_object_get(c2, "step"));
    assert_true(s1 >= 10);
    assert_true(s2 >= s1);
    assert_null(find_event(&r, "done", 0));
    /* the last log line names the step it stopped at: the saved one */
    char want[64];
    snprintf(want, sizeof want, "stopped at step %lld on request", (long long)s2);
    json_t *last = find_event(&r, "log", -1);
    assert_string_equal(json_string_value(json_object_get(last, "line")), want);
    char path[CKPT_MAX_PATH], err[512];
    uint64_t step;
    snprintf(cfg, sizeof cfg, "%s/ck", root);
    assert_int_equal(ckpt_latest(cfg, path, sizeof path, &step, err, sizeof err), 1);
    assert_int_equal(step, (uint64_t)s2);
    /* the next attempt resumes there */
    snprintf(cfg, sizeof cfg, "%s/attempt.json", root);
    struct result r2 = run_train(cfg, SIGTERM, 0);
    assert_int_equal(r2.status, 4);
    json_t *st = find_event(&r2, "started", 0);
    assert_int_equal(json_integer_value(json_object_get(st, "resumed_from")), s2);
    json_decref(r.events);
    json_decref(r2.events);
}

/* checkpoint_each_epoch: 30 examples in batches of 4 over 2 epochs (15
 * steps) end an epoch at step 8 (its batch takes example 30) and at step 15,
 * the last; each is a checkpoint, with no other rule asking for one. */
static void a_checkpoint_each_epoch(void **state)
{
    (void)state;
    char root[300], cfg[320];
    snprintf(root, sizeof root, "%s/epochs", base);
    make_root(root, 30);
    snprintf(cfg, sizeof cfg, "%s/attempt.json", root);
    assert_int_equal(
        fx_write_attempt(cfg, root, "\"checkpoint_each_epoch\":1,\"n_epochs\":2,", 15, 0), 0);
    struct result r = run_train(cfg, 0, 0);
    assert_int_equal(r.status, 0);
    json_int_t steps[4];
    int n = 0;
    size_t i;
    json_t *ev;
    json_array_foreach(r.events, i, ev)
    {
        if (strcmp(json_string_value(json_object_get(ev, "event")), "checkpoint") == 0 && n < 4) {
            steps[n++] = json_integer_value(json_object_get(ev, "step"));
            assert_true(json_real_value(json_object_get(ev, "train_loss")) > 0.0);
        }
    }
    assert_int_equal(n, 2);
    assert_int_equal(steps[0], 8);
    assert_int_equal(steps[1], 15);
    assert_non_null(find_event(&r, "done", 0));
    json_decref(r.events);
}

static void data_error_is_user_error(void **state)
{
    (void)state;
    char root[300], cfg[320], p[400];
    snprintf(root, sizeof root, "%s/bad", base);
    make_root(root, 5);
    snprintf(p, sizeof p, "%s/train.jsonl", root);
    FILE *f = fopen(p, "w");
    fputs("{\"prompt\":\"a\",\"completion\":\"b\"}\n{\"prompt\":\"a\",\"completion\":\"b\"}\n"
          "{\"prompt\":\"a\"}\n",
          f);
    fclose(f);
    snprintf(cfg, sizeof cfg, "%s/attempt.json", root);
    assert_int_equal(fx_write_attempt(cfg, root, "", 10, 0), 0);
    struct result r = run_train(cfg, 0, 0);
    assert_int_equal(r.status, 3);
    json_t *e = find_event(&r, "error", 0);
    assert_non_null(e);
    assert_string_equal(json_string_value(json_object_get(e, "kind")), "user");
    assert_string_equal(json_string_value(json_object_get(e, "line")),
                        "line 3 of train.jsonl: missing field \"completion\"");
    json_decref(r.events);
    /* a settings error */
    f = fopen(cfg, "w");
    fprintf(f, "{\"model_dir\":\"%s/model\",\"train_file\":\"%s\",\"checkpoint_dir\":\"x\","
               "\"out_dir\":\"y\"}", root, p);
    fclose(f);
    r = run_train(cfg, 0, 0);
    assert_int_equal(r.status, 3);
    e = find_event(&r, "error", 0);
    assert_string_equal(json_string_value(json_object_get(e, "line")),
                        "settings: missing field \"max_steps\"");
    json_decref(r.events);
}

static void chat_data_and_validation(void **state)
{
    (void)state;
    char root[300], cfg[320], p[400];
    snprintf(root, sizeof root, "%s/chat", base);
    make_root(root, 4);
    snprintf(p, sizeof p, "%s/train.jsonl", root);
    FILE *f = fopen(p, "w");
    for (int i = 0; i < 12; i++)
        fprintf(f, "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                   "{\"role\":\"user\",\"content\":\"Say %d\"},"
                   "{\"role\":\"assistant\",\"content\":\"%d\"}]}\n", i, i);
    fclose(f);
    snprintf(p, sizeof p, "%s/valid.jsonl", root);
    f = fopen(p, "w");
    fputs("{\"prompt\":\"Say 3\",\"completion\":\" 3\"}\n", f);
    fclose(f);
    char extra[600];
    snprintf(extra, sizeof extra, "\"validation_file\":\"%s\",\"lr_schedule\":\"linear\","
             "\"warmup_steps\":2,\"lora\":{\"r\":4,\"alpha\":8,\"targets\":[\"q_proj\","
             "\"v_proj\"]},", p);
    snprintf(cfg, sizeof cfg, "%s/attempt.json", root);
    assert_int_equal(fx_write_attempt(cfg, root, extra, 10, 0), 0);
    struct result r = run_train(cfg, 0, 0);
    assert_int_equal(r.status, 0);
    /* a validation loss line before the end */
    int found = 0;
    for (size_t i = 0; i < json_array_size(r.events); i++) {
        const char *line = json_string_value(json_object_get(json_array_get(r.events, i), "line"));
        if (line && strncmp(line, "validation loss ", 16) == 0)
            found = 1;
    }
    assert_true(found);
    json_t *step = find_event(&r, "step", -1);
    /* linear decay: the last step's rate is peak * 1/(10-2) */
    assert_float_equal(json_real_value(json_object_get(step, "lr")), 0.01 / 8.0, 1e-7);
    /* the adapter holds only the chosen targets, at rank 4 */
    snprintf(p, sizeof p, "%s/out/adapter/adapter_config.json", root);
    json_error_t je;
    json_t *ac = json_load_file(p, 0, &je);
    assert_non_null(ac);
    assert_int_equal(json_integer_value(json_object_get(ac, "r")), 4);
    assert_int_equal(json_array_size(json_object_get(ac, "target_modules")), 2);
    json_decref(ac);
    json_decref(r.events);
}

/* Writes n prompt/completion lines where the completion is the word
 * `shift` places after the prompt's (shift 0: the training rule). */
static void write_words(const char *path, int n, int shift)
{
    static const char *const words[] = {"apple", "river", "stone", "cloud", "ember", "frost"};
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < n; i++)
        fprintf(f, "{\"prompt\":\"%s says:\",\"completion\":\" %s\"}\n", words[i % 6],
                words[(i + shift) % 6]);
    assert_int_equal(fclose(f), 0);
}

/* The mean loss over every target of a data set, and the share predicted,
 * computed here one example at a time (no batches, no packing) with the
 * model folder at model_dir. */
static void whole_set_loss(const char *model_dir, const char *data, double *loss, double *acc)
{
    char err[512], p[600];
    snprintf(p, sizeof p, "%s/tokenizer.json", model_dir);
    struct tokenizer *tok = tokenizer_load(p, err, sizeof err);
    assert_non_null(tok);
    struct dataset *d = dataset_load_chat(data, "valid.jsonl", tok, NULL, NULL, 64, err,
                                          sizeof err);
    assert_non_null(d);
    struct model_opts o = {.full = 1, .base_kind = WK_F32};
    struct model *m = modelio_load(model_dir, &o, err, sizeof err);
    assert_non_null(m);
    struct model_acts *a = model_acts_create(m, 1, 64);
    assert_non_null(a);
    assert_int_equal(model_rope_ensure(m, 64), 0);
    double sum = 0;
    size_t targets = 0, hits = 0;
    for (size_t i = 0; i < d->n; i++) {
        uint8_t mask[64];
        memcpy(mask, d->ex[i].mask, d->ex[i].len);
        mask[0] = 0;
        size_t nt;
        sum += model_forward_backward(m, a, d->ex[i].ids, mask, 1, (int)d->ex[i].len, 0.0f, 0,
                                      &nt);
        targets += nt;
        hits += model_last_hits(a);
    }
    *loss = sum / (double)targets;
    *acc = (double)hits / (double)targets;
    model_acts_free(a);
    model_free(m);
    dataset_free(d);
    tokenizer_free(tok);
}

/* A validation file: every step event has the training metrics, every
 * valid_every_steps one a batch's validation metrics, each epoch's end the
 * full ones; checkpoints carry them; the full validation loss at the end is
 * the mean over every target of the set (not of batch means). */
static void validation_metrics_by_name(void **state)
{
    (void)state;
    char root[300], cfg[320], p[400], extra[700];
    snprintf(root, sizeof root, "%s/valm", base);
    make_root(root, 24);
    snprintf(p, sizeof p, "%s/valid.jsonl", root);
    write_words(p, 7, 1); /* 7: the last batch of 4 is short */
    snprintf(extra, sizeof extra,
             "\"adapter\":\"full\",\"validation_file\":\"%s\",\"valid_every_steps\":5,"
             "\"checkpoint_each_epoch\":1,",
             p);
    snprintf(cfg, sizeof cfg, "%s/attempt.json", root);
    assert_int_equal(fx_write_attempt(cfg, root, extra, 12, 0), 0); /* 6 steps an epoch */
    struct result r = run_train(cfg, 0, 0);
    assert_int_equal(r.status, 0);
    int valid_seen = 0, full_seen = 0;
    double full_at_6 = -1;
    for (size_t i = 0; i < json_array_size(r.events); i++) {
        json_t *e = json_array_get(r.events, i);
        if (strcmp(json_string_value(json_object_get(e, "event")), "step") != 0)
            continue;
        int step = (int)json_integer_value(json_object_get(e, "step"));
        json_t *tl = json_object_get(e, "train_loss");
        json_t *ta = json_object_get(e, "train_mean_token_accuracy");
        assert_true(json_is_number(tl) && json_is_number(ta));
        assert_float_equal(json_number_value(tl), json_number_value(json_object_get(e, "loss")),
                           1e-9);
        assert_true(json_number_value(ta) >= 0 && json_number_value(ta) <= 1);
        json_t *vl = json_object_get(e, "valid_loss");
        json_t *va = json_object_get(e, "valid_mean_token_accuracy");
        assert_int_equal(vl != NULL, step % 5 == 0);
        assert_int_equal(va != NULL, step % 5 == 0);
        valid_seen += vl != NULL;
        json_t *fl = json_object_get(e, "full_valid_loss");
        json_t *fa = json_object_get(e, "full_valid_mean_token_accuracy");
        assert_int_equal(fl != NULL, step == 6 || step == 12);
        assert_int_equal(fa != NULL, step == 6 || step == 12);
        full_seen += fl != NULL;
        if (step == 6)
            full_at_6 = json_number_value(fl);
    }
    assert_int_equal(valid_seen, 2);
    assert_int_equal(full_seen, 2);
    /* sample answers: the first 3 validation prompts, by the base model
     * before any step and at each epoch's end */
    json_t *first = find_event(&r, "sample", 0);
    assert_non_null(first);
    assert_string_equal(json_string_value(json_object_get(first, "prompt")), "apple says:");
    int base_samples = 0, samples_6 = 0, samples_12 = 0;
    for (size_t i = 0; i < json_array_size(r.events); i++) {
        json_t *e = json_array_get(r.events, i);
        if (strcmp(json_string_value(json_object_get(e, "event")), "sample") != 0)
            continue;
        assert_non_null(json_string_value(json_object_get(e, "answer")));
        int step = (int)json_integer_value(json_object_get(e, "step"));
        int by_base = json_is_true(json_object_get(e, "base"));
        assert_int_equal(by_base, step == 0);
        base_samples += by_base;
        samples_6 += step == 6;
        samples_12 += step == 12;
    }
    assert_int_equal(base_samples, 3);
    assert_int_equal(samples_6, 3);
    assert_int_equal(samples_12, 3);
    /* the epoch's checkpoint carries what was measured by then */
    json_t *ck = find_event(&r, "checkpoint", 0);
    assert_int_equal(json_integer_value(json_object_get(ck, "step")), 6);
    json_t *m = json_object_get(ck, "metrics");
    assert_float_equal(json_number_value(json_object_get(m, "full_valid_loss")), full_at_6,
                       1e-6);
    assert_non_null(json_object_get(m, "valid_loss"));
    assert_non_null(json_object_get(m, "train_mean_token_accuracy"));
    /* the last full validation loss is the whole set's mean, computed
     * again here from the final model */
    json_t *last = find_event(&r, "step", -1);
    double full = json_number_value(json_object_get(last, "full_valid_loss"));
    double acc = json_number_value(json_object_get(last, "full_valid_mean_token_accuracy"));
    double want, want_acc;
    snprintf(p, sizeof p, "%s/out/model", root);
    char vpath[400];
    snprintf(vpath, sizeof vpath, "%s/valid.jsonl", root);
    whole_set_loss(p, vpath, &want, &want_acc);
    assert_true(fabs(full - want) <= 1e-3 * (want > 1 ? want : 1));
    assert_float_equal(acc, want_acc, 1e-9);
    json_decref(r.events);
}

/* validation_split holds a share of the training file out. */
static void validation_split_holds_out(void **state)
{
    (void)state;
    char root[300], cfg[320];
    snprintf(root, sizeof root, "%s/vsplit", base);
    make_root(root, 20);
    snprintf(cfg, sizeof cfg, "%s/attempt.json", root);
    assert_int_equal(fx_write_attempt(cfg, root, "\"validation_split\":0.25,", 5, 0), 0);
    struct result r = run_train(cfg, 0, 0);
    assert_int_equal(r.status, 0);
    json_t *st = find_event(&r, "started", 0);
    assert_int_equal(json_integer_value(json_object_get(st, "examples")), 15);
    json_t *last = find_event(&r, "step", -1);
    assert_non_null(json_object_get(last, "full_valid_loss"));
    json_decref(r.events);
    /* more than half is refused, as a settings error */
    assert_int_equal(fx_write_attempt(cfg, root, "\"validation_split\":0.6,", 5, 0), 0);
    r = run_train(cfg, 0, 0);
    assert_int_equal(r.status, 3);
    json_decref(r.events);
}

/* The job's own sample prompts, without validation data: a string and a
 * conversation, answered by the base model before any step and at each
 * epoch's end; a bad value is a settings error. */
static void own_sample_prompts(void **state)
{
    (void)state;
    char root[300], cfg[320];
    snprintf(root, sizeof root, "%s/ownsamples", base);
    make_root(root, 24);
    snprintf(cfg, sizeof cfg, "%s/attempt.json", root);
    assert_int_equal(fx_write_attempt(cfg, root,
                                      "\"sample_prompts\":[\"apple says:\",[{\"role\":\"system\","
                                      "\"content\":\"Be brief.\"},{\"role\":\"user\","
                                      "\"content\":\"pear?\"}]],\"checkpoint_each_epoch\":1,",
                                      12, 0),
                     0); /* 6 steps an epoch */
    struct result r = run_train(cfg, 0, 0);
    assert_int_equal(r.status, 0);
    int seen[13][2] = {{0}};
    for (size_t i = 0; i < json_array_size(r.events); i++) {
        json_t *e = json_array_get(r.events, i);
        if (strcmp(json_string_value(json_object_get(e, "event")), "sample") != 0)
            continue;
        assert_non_null(json_string_value(json_object_get(e, "answer")));
        int step = (int)json_integer_value(json_object_get(e, "step"));
        assert_int_equal(json_is_true(json_object_get(e, "base")), step == 0);
        assert_true(step == 0 || step == 6 || step == 12);
        const char *prompt = json_string_value(json_object_get(e, "prompt"));
        assert_non_null(prompt);
        int which = strcmp(prompt, "apple says:") == 0 ? 0 : strcmp(prompt, "pear?") == 0 ? 1 : -1;
        assert_true(which >= 0);
        seen[step][which]++;
    }
    for (int k = 0; k < 2; k++) {
        assert_int_equal(seen[0][k], 1);
        assert_int_equal(seen[6][k], 1);
        assert_int_equal(seen[12][k], 1);
    }
    json_decref(r.events);
    /* six prompts are refused, as a settings error */
    assert_int_equal(fx_write_attempt(cfg, root,
                                      "\"sample_prompts\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\"],",
                                      12, 0),
                     0);
    r = run_train(cfg, 0, 0);
    assert_int_equal(r.status, 3);
    json_decref(r.events);
}

/* Early stopping on a validation set that contradicts the training rule:
 * the run ends before max_steps once the full validation loss has not
 * improved for `patience` epochs, and the model is the best checkpoint. */
/* A run of 20 epochs of 6 steps, full fine-tuning, patience 2, whose
 * validation set contradicts the training rule (learning it makes these
 * worse), in base/name; its settings in cfg. */
static void early_stopping_root(const char *name, char *root, size_t rcap, char *cfg,
                                size_t ccap)
{
    char p[400], extra[700];
    snprintf(root, rcap, "%s/%s", base, name);
    make_root(root, 24);
    snprintf(p, sizeof p, "%s/valid.jsonl", root);
    write_words(p, 6, 2);
    snprintf(extra, sizeof extra,
             "\"adapter\":\"full\",\"validation_file\":\"%s\",\"early_stopping_patience\":2,",
             p);
    snprintf(cfg, ccap, "%s/attempt.json", root);
    assert_int_equal(fx_write_attempt(cfg, root, extra, 120, 0), 0);
}

static void early_stopping_keeps_the_best(void **state)
{
    (void)state;
    char root[300], cfg[320];
    early_stopping_root("early", root, sizeof root, cfg, sizeof cfg);
    struct result r = run_train(cfg, 0, 0);
    assert_int_equal(r.status, 0);
    json_t *done = find_event(&r, "done", 0);
    assert_non_null(done);
    assert_true(json_is_true(json_object_get(done, "early_stopped")));
    long step = (long)json_integer_value(json_object_get(done, "step"));
    long best = (long)json_integer_value(json_object_get(done, "best_step"));
    assert_true(step < 120);
    assert_int_equal(step - best, 2 * 6); /* two epochs without a better loss */
    /* the model is the best checkpoint, made into a model the same way */
    char ck[400], mat[400], a[500], b[500];
    snprintf(ck, sizeof ck, "%s/ck/step-%08ld", root, best);
    snprintf(mat, sizeof mat, "%s/best", root);
    char err[512];
    snprintf(a, sizeof a, "%s/model", root);
    assert_int_equal(trainer_materialize(ck, a, mat, NULL, err, sizeof err), 0);
    snprintf(a, sizeof a, "%s/out/model/model.safetensors", root);
    snprintf(b, sizeof b, "%s/best/model.safetensors", root);
    size_t la, lb;
    char *fa = fx_slurp(a, &la), *fb = fx_slurp(b, &lb);
    assert_non_null(fa);
    assert_non_null(fb);
    assert_int_equal(la, lb);
    assert_memory_equal(fa, fb, la);
    free(fa);
    free(fb);
    json_decref(r.events);
}

/* A moved job: the next attempt resumes, in a folder of its own, from a
 * checkpoint of the earlier attempt's folder (resume_from, as the server
 * names it) taken after the best epoch, one epoch into patience. Early
 * stopping goes on counting from there: it stops at the same step as the
 * unbroken run, and the model is the same best checkpoint, read from the
 * earlier attempt's folder. */
static void early_stopping_survives_a_move(void **state)
{
    (void)state;
    char root[300], cfg[320], p[400];
    early_stopping_root("early-move", root, sizeof root, cfg, sizeof cfg);
    struct result a = run_train(cfg, 0, 0);
    assert_int_equal(a.status, 0);
    json_t *done = find_event(&a, "done", 0);
    assert_true(json_is_true(json_object_get(done, "early_stopped")));
    long stop = (long)json_integer_value(json_object_get(done, "step"));
    long best = (long)json_integer_value(json_object_get(done, "best_step"));
    assert_int_equal(stop - best, 12);
    /* the second attempt: its own folders, resuming one epoch after the best */
    long from = best + 6;
    json_error_t je;
    json_t *c = json_load_file(cfg, 0, &je);
    assert_non_null(c);
    snprintf(p, sizeof p, "%s/ck2", root);
    json_object_set_new(c, "checkpoint_dir", json_string(p));
    snprintf(p, sizeof p, "%s/out2", root);
    json_object_set_new(c, "out_dir", json_string(p));
    snprintf(p, sizeof p, "%s/ck/step-%08ld", root, from);
    json_object_set_new(c, "resume_from", json_string(p));
    json_object_set_new(c, "resume_step", json_integer(from));
    snprintf(cfg, sizeof cfg, "%s/attempt2.json", root);
    assert_int_equal(json_dump_file(c, cfg, 0), 0);
    json_decref(c);
    struct result b = run_train(cfg, 0, 0);
    assert_int_equal(b.status, 0);
    json_t *st = find_event(&b, "started", 0);
    assert_int_equal(json_integer_value(json_object_get(st, "resumed_from")), from);
    json_t *done2 = find_event(&b, "done", 0);
    assert_non_null(done2);
    assert_true(json_is_true(json_object_get(done2, "early_stopped")));
    assert_int_equal(json_integer_value(json_object_get(done2, "step")), stop);
    assert_int_equal(json_integer_value(json_object_get(done2, "best_step")), best);
    /* the same model: the best checkpoint, in the first attempt's folder */
    char ma[500], mb[500];
    snprintf(ma, sizeof ma, "%s/out/model/model.safetensors", root);
    snprintf(mb, sizeof mb, "%s/out2/model/model.safetensors", root);
    assert_true(files_equal(ma, mb));
    /* the first attempt's folder is read, never changed: the best is still there */
    snprintf(p, sizeof p, "%s/ck/step-%08ld", root, best);
    char err[256];
    assert_int_equal(ckpt_verify(p, err, sizeof err), 0);
    json_decref(a.events);
    json_decref(b.events);
}

static void materialize_checkpoint(void **state)
{
    (void)state;
    char root[300], cfg[320], ck[400], out[400];
    snprintf(root, sizeof root, "%s/mat", base);
    make_root(root, 20);
    snprintf(cfg, sizeof cfg, "%s/attempt.json", root);
    assert_int_equal(fx_write_attempt(cfg, root, "", 6, 3), 0);
    struct result r = run_train(cfg, 0, 0);
    assert_int_equal(r.status, 0);
    json_decref(r.events);
    snprintf(ck, sizeof ck, "%s/ck/step-00000006", root);
    snprintf(out, sizeof out, "%s/partial", root);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "%s train --materialize %s --base %s/model --out %s 2>/dev/null",
             ALALLO_BINARY, ck, root, out);
    assert_int_equal(system(cmd), 0);
    /* the checkpoint at the last step merges to the same weights as the
     * final model */
    char a[500], b[500];
    snprintf(a, sizeof a, "%s/model.safetensors", out);
    snprintf(b, sizeof b, "%s/out/model/model.safetensors", root);
    assert_true(files_equal(a, b));
    snprintf(a, sizeof a, "%s/tokenizer.json", out);
    assert_int_equal(access(a, R_OK), 0);
}

/* Runs `alallo ARGS` (stderr dropped), which must exit 0, and parses the
 * JSON object it prints. */
static json_t *command_json(const char *args)
{
    char cmd[800];
    snprintf(cmd, sizeof cmd, "%s %s 2>/dev/null", ALALLO_BINARY, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, p);
    buf[n] = '\0';
    assert_int_equal(pclose(p), 0);
    json_t *o = json_loads(buf, 0, NULL);
    assert_non_null(o);
    return o;
}

/* `alallo bench train` prints one JSON object with the fields the worker's
 * speed measurement and the docs rely on. */
static void bench_prints_json(void **state)
{
    (void)state;
    json_t *o = command_json("bench train --shape tiny --steps 3 --threads 2");
    assert_true(json_real_value(json_object_get(o, "tokens_per_s")) > 0.0);
    /* against the fp32 peak: bf16 products may run up to twice as fast */
    double mfu = json_real_value(json_object_get(o, "mfu"));
    assert_true(mfu > 0.0 && mfu < 2.0);
    assert_non_null(json_string_value(json_object_get(o, "cpu_path")));
    assert_true(json_integer_value(json_object_get(o, "peak_rss_bytes")) > 1000000);
    assert_true(json_real_value(json_object_get(o, "peak_fp32_flops")) > 1e9);
    json_t *ph = json_object_get(o, "phase_s");
    assert_non_null(json_object_get(ph, "forward"));
    assert_non_null(json_object_get(ph, "backward"));
    assert_non_null(json_object_get(ph, "optimizer"));
    json_decref(o);
    /* a bad option is a usage error */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "%s bench train --adapter full --precision 4-bit 2>/dev/null",
             ALALLO_BINARY);
    int st = system(cmd);
    assert_int_equal(WEXITSTATUS(st), 2);
}

/* `alallo bench gemm` times the step's products of a shape: three for
 * each linear (forward, input gradient, weight gradient), each with its
 * efficiency, and the trunk's and the head's together. */
static void bench_gemm_prints_json(void **state)
{
    (void)state;
    json_t *o = command_json("bench gemm --shape tiny --reps 1 --threads 2");
    assert_true(json_real_value(json_object_get(o, "peak_fp32_flops")) > 1e9);
    assert_true(json_real_value(json_object_get(o, "peak_flops")) > 1e9);
    /* the products the trainer runs on this path: bf16 ones on avx512bf16
     * and onednn; on onednn, oneDNN's own rate and what it ran on */
    const char *path = json_string_value(json_object_get(o, "cpu_path"));
    int bf16 = strcmp(path, "avx512bf16") == 0 || strcmp(path, "onednn") == 0;
    if (strcmp(path, "onednn") == 0) {
        assert_true(json_real_value(json_object_get(o, "peak_onednn_flops")) > 1e9);
        assert_non_null(strstr(json_string_value(json_object_get(o, "cpu_path_detail")),
                               "oneDNN"));
    }
    assert_string_equal(json_string_value(json_object_get(o, "products_precision")),
                        bf16 ? "bf16 inputs, fp32 accumulation" : "fp32");
    assert_true(json_real_value(json_object_get(o, "trunk_efficiency")) > 0.0);
    assert_true(json_real_value(json_object_get(o, "head_efficiency")) > 0.0);
    json_t *ps = json_object_get(o, "products");
    assert_int_equal(json_array_size(ps), 21); /* q k v o gate_up down head, x3 */
    json_t *dw = json_array_get(ps, 20);
    assert_string_equal(json_string_value(json_object_get(dw, "linear")), "head");
    assert_string_equal(json_string_value(json_object_get(dw, "product")), "weight_grad");
    assert_int_equal(json_integer_value(json_object_get(dw, "K")), 256); /* 4 x 64 tokens */
    assert_int_equal(json_integer_value(json_object_get(dw, "M")), 512); /* tiny's vocab */
    json_decref(o);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "%s bench gemm --shape huge 2>/dev/null", ALALLO_BINARY);
    int st = system(cmd);
    assert_int_equal(WEXITSTATUS(st), 2);
}

/* `bench train --losses` on one path: the loss of every step. */
static json_t *bench_losses(const char *path, const char *adapter, const char *lr)
{
    char args[300];
    snprintf(args, sizeof args,
             "bench train --shape tiny --adapter %s --steps 200 --lr %s --threads 2 "
             "--losses --path %s",
             adapter, lr, path);
    json_t *o = command_json(args);
    assert_string_equal(json_string_value(json_object_get(o, "cpu_path")), path);
    json_t *l = json_incref(json_object_get(o, "losses"));
    json_decref(o);
    assert_int_equal(json_array_size(l), 200);
    return l;
}

/* 200 steps with bf16 products follow the fp32 products' loss curve: the
 * gap stays within 2% of the first loss at every step, and both learn.
 * 16-bit LoRA (a bf16 base) and full fine-tuning (fp32 master weights,
 * rounded to bf16 for their products; docs/trainer.md, "CPU paths"). */
static void bf16_curve(const char *path, const char *adapter, const char *lr)
{
    json_t *a = bench_losses("avx512", adapter, lr), *b = bench_losses(path, adapter, lr);
    double first = json_real_value(json_array_get(a, 0)), worst = 0.0;
    for (size_t i = 0; i < 200; i++) {
        double d = fabs(json_real_value(json_array_get(a, i)) -
                        json_real_value(json_array_get(b, i)));
        worst = d > worst ? d : worst;
    }
    double last_a = json_real_value(json_array_get(a, 199));
    double last_b = json_real_value(json_array_get(b, 199));
    fprintf(stderr, "%s curve (%s): first %.4f, last fp32 %.4f bf16 %.4f, largest gap %.5f\n",
            path, adapter, first, last_a, last_b, worst);
    assert_true(worst <= 0.02 * first);
    assert_true(last_a < 0.9 * first && last_b < 0.9 * first);
    json_decref(a);
    json_decref(b);
}

static void bf16_loss_curve_follows_fp32(void **state)
{
    (void)state;
    if (!cpu_path_supported(CPU_PATH_AVX512BF16)) {
        printf("bf16 loss curve: skipped, this CPU lacks avx512bf16 (it has: %s)\n",
               cpu_path_flags());
        skip();
    }
    bf16_curve("avx512bf16", "lora", "1e-3");
    bf16_curve("avx512bf16", "full", "3e-4");
}

/* The same on the onednn path (oneDNN's bf16 products). */
static void onednn_loss_curve_follows_fp32(void **state)
{
    (void)state;
    char why[256];
    if (!cpu_path_supported(CPU_PATH_AVX512BF16) || !onednn_available(why, sizeof why)) {
        printf("onednn loss curve: skipped, %s\n",
               cpu_path_supported(CPU_PATH_AVX512BF16) ? why : "this CPU lacks avx512bf16");
        skip();
    }
    bf16_curve("onednn", "lora", "1e-3");
    bf16_curve("onednn", "full", "3e-4");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(loss_goes_down_full),
        cmocka_unit_test(resume_exact_lora16),
        cmocka_unit_test(resume_exact_from_the_named_step),
        cmocka_unit_test(resume_exact_lora4),
        cmocka_unit_test(resume_exact_full),
        cmocka_unit_test(resume_exact_dpo),
        cmocka_unit_test(resume_exact_lora_dropout),
        cmocka_unit_test(resume_exact_every_path),
        cmocka_unit_test(resume_on_another_path),
        cmocka_unit_test(bf16_loss_curve_follows_fp32),
        cmocka_unit_test(onednn_loss_curve_follows_fp32),
        cmocka_unit_test(lora_dropout_zero_is_unchanged),
        cmocka_unit_test(dpo_learns_the_preference),
        cmocka_unit_test(dpo_needs_pairs),
        cmocka_unit_test(packing_same_loss_less_padding),
        cmocka_unit_test(signals_checkpoint),
        cmocka_unit_test(a_checkpoint_each_epoch),
        cmocka_unit_test(data_error_is_user_error),
        cmocka_unit_test(chat_data_and_validation),
        cmocka_unit_test(materialize_checkpoint),
        cmocka_unit_test(validation_metrics_by_name),
        cmocka_unit_test(validation_split_holds_out),
        cmocka_unit_test(own_sample_prompts),
        cmocka_unit_test(early_stopping_survives_a_move),
        cmocka_unit_test(early_stopping_keeps_the_best),
        cmocka_unit_test(bench_prints_json),
        cmocka_unit_test(bench_gemm_prints_json),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
