/* test_cuda_resume.c - a checkpoint crosses devices: a GPU attempt's
 * checkpoint resumed on the CPU, and a CPU attempt's resumed on the GPU,
 * through the real `alallo train` and the trainer protocol (ATTEMPT.json
 * with "device" and "resume_from", events on stdout, checkpoints on disk),
 * for LoRA on a 16-bit base, QLoRA (4-bit base) and full fine-tuning,
 * and DPO (QLoRA; its reference log-probabilities computed on the device
 * of the attempt, its training loss watched in place of validation).
 *
 * Per mode, four attempts of 8 steps on the same model, data and seed,
 * each with a checkpoint every 4 steps and a validation loss on one fixed
 * batch (valid.jsonl, 4 examples: the batch size) after every step (so
 * every step has a `step` event):
 *   cpu        the CPU from the start
 *   gpu        the GPU from the start
 *   gpu>cpu    the CPU, resuming from gpu's step-00000004
 *   cpu>gpu    the GPU, resuming from cpu's step-00000004
 * and it checks:
 *  - each resumed attempt says it resumed at step 4 and finishes at 8;
 *  - its first step (5) reads the very weights, moments and data cursor the
 *    other device saved: its loss, a pass over step 5's batch on those
 *    weights, agrees with the saving device's own step 5 within TOL_PASS;
 *  - its steps 5..8 (training loss and validation loss) follow the
 *    saving device's unbroken run within TOL_RUN;
 *  - the check can fail: over the 8 steps the validation loss moves by
 *    more than MOVE_OVER_TOL x TOL_RUN, so a resume that lost the
 *    checkpoint's state (started over, or from other weights) would fall
 *    outside TOL_RUN.
 * Same-device resume on the GPU is bit for bit (test_cuda_model.c); across
 * devices it cannot be: the GPU rounds every product's inputs to bf16.
 *
 * Without a GPU it prints one `skip:` line and exits 77. `--cpu-twin`
 * runs the same four attempts with "cpu" in place of "cuda" (every one on
 * the CPU, so the resumed runs must match to the bit): a check of this
 * file's own harness (settings, events, checkpoints, tolerances) on any
 * machine, never a stand-in for the GPU.
 */
#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "../unit/train/test_train_fixture.h"
#include "gpu_test.h"

/* Relative difference of one pass's loss on the same weights and batch,
 * CPU against GPU: test_cuda_model.c's TOL_LOSS (measured 7e-5 on the
 * CPU with the GPU's bf16 rounding emulated; 3x and more kept for the
 * GPU's summation orders). */
#define TOL_PASS 2e-3
/* Relative difference of the losses over the 4 steps after the resume,
 * where each device has run its own AdamW steps on its own gradients
 * (gradients within 3% relative L2, test_cuda_model.c's TOL_GRAD). At
 * learning rate 1e-3 the emulated GPU followed the CPU trainer's loss
 * within 3e-4 over 40 steps of full fine-tuning (docs/trainer.md, "GPU");
 * 8 steps here, and this keeps a factor of 15 over that. */
#define TOL_RUN 5e-3
/* The validation loss must move by more than this many TOL_RUN over the
 * run, or the continuation check could not tell a resume from a restart. */
#define MOVE_OVER_TOL 3.0

enum { STEPS = 8, AT = 4 };

struct mode {
    const char *name;
    const char *fields; /* spliced into ATTEMPT.json */
    int dpo;            /* preference pairs, and no validation (DPO has none) */
};
static const struct mode modes[] = {
    {"lora-16bit", "\"precision\":\"16-bit\",\"adapter\":\"lora\",", 0},
    {"qlora-4bit", "\"precision\":\"4-bit\",\"adapter\":\"lora\",", 0},
    {"full", "\"precision\":\"16-bit\",\"adapter\":\"full\",", 0},
    {"dpo-qlora-4bit",
     "\"method\":\"dpo\",\"dpo_beta\":0.5,\"precision\":\"4-bit\",\"adapter\":\"lora\",", 1},
};

static const char *gpu_device = "cuda"; /* "cpu" with --cpu-twin */
static char root[256];

/* What one attempt reported: the exit status, the step it resumed from
 * (-1: none), its last step, and per step 1..STEPS the training loss and
 * the validation loss (NAN where no step event said). */
struct attempt {
    int status;
    long resumed_from, last_step;
    double loss[STEPS + 1], valid[STEPS + 1];
};

static void make_root(void)
{
    snprintf(root, sizeof root, "/tmp/alallo-gpu-resume-%d", (int)getpid());
    char p[512];
    snprintf(p, sizeof p, "rm -rf %s", root);
    assert_int_equal(system(p), 0);
    assert_int_equal(mkdir(root, 0755), 0);
    snprintf(p, sizeof p, "%s/model", root);
    assert_int_equal(fx_make_model(p, NULL, 11), 0);
    snprintf(p, sizeof p, "%s/train.jsonl", root);
    assert_int_equal(fx_write_data(p, 48), 0);
    snprintf(p, sizeof p, "%s/pairs.jsonl", root);
    assert_int_equal(fx_write_pairs(p, 48), 0);
    /* one batch's worth: every step validates on the same 4 examples */
    snprintf(p, sizeof p, "%s/valid.jsonl", root);
    assert_int_equal(fx_write_data(p, 4), 0);
}

/* Writes root/NAME.json for an attempt of mode md on device dev, its
 * checkpoints in root/NAME-ck, resuming from `from` (NULL: the start). */
static void write_attempt(const char *name, const struct mode *md, const char *dev,
                          const char *from, char *path, size_t cap)
{
    char resume[600] = "";
    if (from)
        snprintf(resume, sizeof resume, "\"resume_from\":\"%s\",\"resume_step\":%d,", from,
                 AT); /* as the server writes them: that folder, that step */
    char valid[400] = "";
    if (!md->dpo)
        snprintf(valid, sizeof valid,
                 "\"validation_file\":\"%s/valid.jsonl\",\"valid_every_steps\":1,", root);
    snprintf(path, cap, "%s/%s.json", root, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "{%s%s%s\"device\":\"%s\",\"model_dir\":\"%s/model\","
            "\"train_file\":\"%s/%s\",\"train_file_name\":\"%s\","
            "\"checkpoint_dir\":\"%s/%s-ck\",\"out_dir\":\"%s/%s-out\",\"batch_size\":4,"
            "\"learning_rate\":0.001,\"lr_schedule\":\"constant\",\"warmup_steps\":1,"
            "\"seed\":3,\"max_steps\":%d,\"seq_len\":64,\"checkpoint_every_steps\":%d,"
            "\"lora_r\":4,\"lora_alpha\":8,\"threads\":2}\n",
            md->fields, resume, valid, dev, root, root, md->dpo ? "pairs.jsonl" : "train.jsonl",
            md->dpo ? "pairs.jsonl" : "train.jsonl", root, name, root, name, STEPS, AT);
    assert_int_equal(fclose(f), 0);
}

static double num_or_nan(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* Runs `alallo train --config PATH` and reads its events. */
static void run_attempt(const char *config, struct attempt *a)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s train --config %s 2>>%s/stderr.log", ALALLO_BINARY, config,
             root);
    for (int s = 0; s <= STEPS; s++)
        a->loss[s] = a->valid[s] = NAN;
    a->resumed_from = -2; /* no started event */
    a->last_step = -1;
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[65536];
    while (fgets(line, sizeof line, p)) {
        json_t *e = json_loads(line, 0, NULL);
        assert_non_null(e); /* only event lines on stdout */
        const char *ev = json_string_value(json_object_get(e, "event"));
        assert_non_null(ev);
        long step = (long)json_integer_value(json_object_get(e, "step"));
        if (strcmp(ev, "started") == 0) {
            json_t *r = json_object_get(e, "resumed_from");
            a->resumed_from = json_is_integer(r) ? (long)json_integer_value(r) : -1;
        } else if (strcmp(ev, "step") == 0 && step >= 1 && step <= STEPS) {
            a->loss[step] = num_or_nan(e, "loss");
            a->valid[step] = num_or_nan(e, "valid_loss");
        } else if (strcmp(ev, "done") == 0) {
            a->last_step = step;
        } else if (strcmp(ev, "error") == 0) {
            fprintf(stderr, "%s: error event: %s\n", config,
                    json_string_value(json_object_get(e, "line")));
        }
        json_decref(e);
    }
    int st = pclose(p);
    a->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    if (a->status) { /* what it said, for ctest --output-on-failure */
        fprintf(stderr, "%s: exit %d; the end of its stderr:\n", config, a->status);
        snprintf(cmd, sizeof cmd, "tail -n 8 %s/stderr.log >&2", root);
        (void)!system(cmd);
    }
}

static double rel(double got, double want)
{
    return fabs(got - want) / fmax(fabs(want), 1e-12);
}

/* The resumed attempt r against the unbroken run u of the device that
 * saved the checkpoint: step AT+1 within TOL_PASS, AT+1..STEPS within
 * TOL_RUN (tol_run 0 in --cpu-twin: the same bits). */
static void check_continues(const char *tag, const struct attempt *r, const struct attempt *u,
                            double tol_pass, double tol_run, int dpo)
{
    assert_int_equal(r->status, 0);
    assert_int_equal(r->resumed_from, AT);
    assert_int_equal(r->last_step, STEPS);
    for (int s = 1; s <= AT; s++)
        assert_true(isnan(r->loss[s])); /* nothing before the checkpoint ran again */
    double worst = 0.0;
    for (int s = AT + 1; s <= STEPS; s++) {
        if (dpo && s < STEPS) /* its step events: every REPORT_EVERY steps and the last */
            continue;
        assert_true(isfinite(r->loss[s]) && isfinite(u->loss[s]));
        assert_true(dpo || (isfinite(r->valid[s]) && isfinite(u->valid[s])));
        double el = rel(r->loss[s], u->loss[s]), ev = dpo ? 0.0 : rel(r->valid[s], u->valid[s]);
        printf("  %s step %d: loss %.6f against %.6f (rel %.1e), validation %.6f against "
               "%.6f (rel %.1e)\n",
               tag, s, r->loss[s], u->loss[s], el, r->valid[s], u->valid[s], ev);
        if (s == AT + 1 && !dpo && el > tol_pass)
            fail_msg("%s: step %d's loss on the checkpoint's weights is %.2e apart (tolerance "
                     "%.0e)", tag, s, el, tol_pass);
        if (el > tol_run || ev > tol_run)
            fail_msg("%s: step %d is %.2e / %.2e apart (tolerance %.0e)", tag, s, el, ev,
                     tol_run);
        worst = fmax(worst, fmax(el, ev));
    }
    printf("  %s: worst relative difference %.2e over steps %d..%d\n", tag, worst, AT + 1,
           STEPS);
}

/* dpo: the training loss of the last step stands in for the validation
 * loss (DPO has none, and reports a step event every REPORT_EVERY steps
 * and at the last); it starts at log 2, where the policy is the
 * reference. */
static void fresh_run_ok(const char *tag, const struct attempt *a, int dpo)
{
    assert_int_equal(a->status, 0);
    assert_int_equal(a->resumed_from, -1);
    assert_int_equal(a->last_step, STEPS);
    for (int s = dpo ? STEPS : 1; s <= STEPS; s++)
        if (!isfinite(a->loss[s]) || (!dpo && !isfinite(a->valid[s])))
            fail_msg("%s: no losses at step %d", tag, s);
    double start = dpo ? log(2.0) : a->valid[1], end = dpo ? a->loss[STEPS] : a->valid[STEPS];
    double move = rel(end, start);
    printf("  %s: %s loss %.6f at step 1, %.6f at step %d (moved %.1e)\n", tag,
           dpo ? "DPO" : "validation", start, end, STEPS, move);
    if (move <= MOVE_OVER_TOL * TOL_RUN)
        fail_msg("%s: the validation loss moved only %.2e over %d steps: TOL_RUN %.0e could not "
                 "tell a resume from a restart", tag, move, STEPS, TOL_RUN);
}

static void run_mode(const struct mode *md)
{
    make_root();
    char cfg[700], from[700];
    struct attempt cpu, gpu, g2c, c2g;
    printf("%s (the second device: %s)\n", md->name, gpu_device);
    write_attempt("cpu", md, "cpu", NULL, cfg, sizeof cfg);
    run_attempt(cfg, &cpu);
    fresh_run_ok("cpu", &cpu, md->dpo);
    write_attempt("gpu", md, gpu_device, NULL, cfg, sizeof cfg);
    run_attempt(cfg, &gpu);
    fresh_run_ok("gpu", &gpu, md->dpo);

    struct stat st;
    snprintf(from, sizeof from, "%s/gpu-ck/step-%08d", root, AT);
    assert_int_equal(stat(from, &st), 0);
    write_attempt("gpu2cpu", md, "cpu", from, cfg, sizeof cfg);
    run_attempt(cfg, &g2c);
    snprintf(from, sizeof from, "%s/cpu-ck/step-%08d", root, AT);
    assert_int_equal(stat(from, &st), 0);
    write_attempt("cpu2gpu", md, gpu_device, from, cfg, sizeof cfg);
    run_attempt(cfg, &c2g);

    int twin = strcmp(gpu_device, "cpu") == 0;
    check_continues("gpu>cpu", &g2c, &gpu, twin ? 0.0 : TOL_PASS, twin ? 0.0 : TOL_RUN,
                    md->dpo);
    check_continues("cpu>gpu", &c2g, &cpu, twin ? 0.0 : TOL_PASS, twin ? 0.0 : TOL_RUN,
                    md->dpo);
    /* where the two devices stand after all 8 steps, for the record */
    printf("  cpu against gpu from the start, step %d: loss rel %.1e, validation rel %.1e\n",
           STEPS, rel(gpu.loss[STEPS], cpu.loss[STEPS]),
           rel(gpu.valid[STEPS], cpu.valid[STEPS]));
    snprintf(cfg, sizeof cfg, "rm -rf %s", root);
    assert_int_equal(system(cfg), 0);
}

static void lora_16bit(void **s) { (void)s; run_mode(&modes[0]); }
static void qlora_4bit(void **s) { (void)s; run_mode(&modes[1]); }
static void full_ft(void **s) { (void)s; run_mode(&modes[2]); }
static void dpo_qlora_4bit(void **s) { (void)s; run_mode(&modes[3]); }

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--cpu-twin") == 0) {
        gpu_device = "cpu";
        printf("test_cuda_resume --cpu-twin: every attempt on the CPU (the harness's check)\n");
    } else {
        int rc = gpu_test_open("test_cuda_resume");
        if (rc)
            return rc;
        cuda_ctx_close(); /* the GPU is the trainer processes' */
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lora_16bit),
        cmocka_unit_test(qlora_4bit),
        cmocka_unit_test(full_ft),
        cmocka_unit_test(dpo_qlora_4bit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
