/* test_sched_link.c - the texts the server keeps per job for the
 * scheduler (plan, ledger and time left) survive a round trip exactly, and
 * a broken text is refused rather than read as something else. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "control/sched_link.h"
#include "core/job_hyper.h"
#include "core/text.h"

/* the kind of the rows that teach factors */
#define FACTOR SCHED_LINK_FACTOR_KIND

static void ledger_state_round_trip_is_exact(void **state)
{
    (void)state;
    struct sched_state *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    ledger_job_init(&a->ledger, 1764495000.123, 3600.5, 1800.25, 1234567);
    uint64_t fence;
    assert_int_equal(ledger_attempt_begin(&a->ledger, 1, 0.40, 0, 1764495010.0, &fence), ERR_OK);
    assert_int_equal(ledger_attempt_progress(&a->ledger, fence, 40, 12.345678901234), ERR_OK);
    assert_int_equal(ledger_attempt_checkpoint(&a->ledger, fence, 40), ERR_OK);
    assert_int_equal(ledger_attempt_end(&a->ledger, fence, 1764495030.0, 40), ERR_OK);
    struct ledger_row rows[LEDGER_MAX_ROWS];
    size_t n;
    struct ledger_outcome o = {.status = JOB_RUNNING};
    assert_int_equal(ledger_settle(&a->ledger, &o, 1764495031.0, rows, LEDGER_MAX_ROWS, &n),
                     ERR_OK);
    assert_int_equal(ledger_attempt_begin(&a->ledger, 2, 1.5, 40, 1764495040.0, &fence), ERR_OK);
    tl_begin(&a->tl, 100, 40, 1764495040.0, 3.0, 10.0, 25.0);
    tl_observe(&a->tl, 40, 1764495043.0);
    tl_observe(&a->tl, 50, 1764495045.5);
    a->has_tl = true;
    a->nominal_step_s = 0.1234;
    a->model_factor = 0.375;
    a->worker_class = WORKER_SPOT;
    a->speed_log = -0.0625; /* its worker's own correction */
    /* The time left's margins and the bands the job was shown. */
    a->tl.margin[1][1] = 0.0123456789;
    tl_set_tail(&a->tl, 1.2345678901); /* the work after the last step */
    a->tl.margin[3][0] = -0.004;
    a->tl_shown[0] = (struct tl_shown){.set = true, .t = 1764495020.5, .low_s = 40.25,
                                       .high_s = 44.125};
    a->tl_shown[2] = (struct tl_shown){.set = true, .t = 1764495045.5, .low_s = 12.5,
                                       .high_s = 13.75};
    /* A cancel priced when accepted (its own line, before the time left's). */
    assert_int_equal(ledger_attempt_progress(&a->ledger, fence, 55, 4.5), ERR_OK);
    ledger_fix_cancel(&a->ledger, JOB_RUNNING, 1764495046.25);
    assert_true(a->ledger.cancel_fixed && a->ledger.cancel_step == 55);

    char text[STORE_LEDGER_STATE_MAX];
    assert_true(sched_state_write(a, text, sizeof text));
    assert_true(sched_state_read(text, b));
    assert_memory_equal(&a->ledger, &b->ledger, sizeof a->ledger);
    assert_true(b->has_tl);
    assert_memory_equal(&a->tl, &b->tl, sizeof a->tl);
    for (int c = 0; c < EST_TL_CELLS; c++) {
        assert_int_equal(b->tl_shown[c].set, a->tl_shown[c].set);
        assert_true(b->tl_shown[c].t == a->tl_shown[c].t);
        assert_true(b->tl_shown[c].low_s == a->tl_shown[c].low_s);
        assert_true(b->tl_shown[c].high_s == a->tl_shown[c].high_s);
    }
    assert_true(b->nominal_step_s == a->nominal_step_s);
    assert_int_equal(b->worker_class, WORKER_SPOT);
    assert_true(b->model_factor == 0.375);
    assert_true(b->speed_log == -0.0625);
    /* What was charged survives: the steps of the first attempt. */
    assert_true(b->ledger.charged_micros > 0);
    assert_int_equal(b->ledger.charged_micros, a->ledger.charged_micros);
    free(a);
    free(b);
}

static void broken_state_is_refused(void **state)
{
    (void)state;
    struct sched_state *st = calloc(1, sizeof *st);
    assert_false(sched_state_read("", st));
    assert_false(sched_state_read("S2 1 2 3", st));
    /* Says two attempts, has one. */
    assert_false(sched_state_read("S1 1 2 3 4 2 0 2 0 0 0\nA 1 1 0.4 0 10 10 5 1 2 1 10 100\n",
                                  st));
    /* Too small an output buffer fails instead of cutting the text. */
    ledger_job_init(&st->ledger, 1, 2, 3, 4);
    char small[16];
    assert_false(sched_state_write(st, small, sizeof small));
    free(st);
}

static void job_without_state_reads_from_its_estimate(void **state)
{
    (void)state;
    struct store_job *j = calloc(1, sizeof *j);
    struct sched_state *st = calloc(1, sizeof *st);
    j->created_ms = 1764495000000;
    j->est_high_s = 900;
    j->est_train_high_s = 600;
    j->est_price_high = 0.25;
    sched_state_of_job(j, st);
    assert_true(fabs(st->ledger.created_s - 1764495000.0) < 1e-6);
    assert_true(st->ledger.time_high_s == 900);
    assert_int_equal(st->ledger.price_high_micros, 250000);
    assert_false(st->has_tl);
    free(j);
    free(st);
}

static void plan_round_trip(void **state)
{
    (void)state;
    struct estimate e = {.flops_per_token = 1.5e9, .method = PLAN_METHOD_LORA_4,
                         .worker_class = WORKER_SPOT, .waits = true, .wait_s = 30,
                         .startup_s = 4.5, .train_s = 120.25, .gpu_need_bytes = 6270000000};
    char text[STORE_JSON_SMALL];
    e.range_margin = -0.125;
    e.between_share = 0.375;
    assert_true(sched_plan_write(&e, SCHED_FASTEST_FINISH, 2.5, 1.75, text, sizeof text));
    struct sched_plan p;
    assert_true(sched_plan_read(text, &p));
    assert_true(p.flops_per_token == 1.5e9);
    assert_int_equal(p.method, PLAN_METHOD_LORA_4);
    assert_int_equal(p.class_, WORKER_SPOT);
    assert_true(p.waits);
    assert_int_equal(p.goal, SCHED_FASTEST_FINISH);
    assert_true(p.start_s == 34.5);
    assert_true(p.train_s == 120.25);
    assert_true(p.model_factor == 2.5);
    assert_true(p.startup_factor == 1.75);
    assert_true(p.range_margin == -0.125);
    assert_true(p.between_share == 0.375);
    assert_true(p.python_s == 0);
    e.python_s = 12.5;
    assert_true(sched_plan_write(&e, SCHED_FASTEST_FINISH, 2.5, 1.75, text, sizeof text));
    assert_true(sched_plan_read(text, &p));
    assert_true(p.python_s == 12.5 && p.between_share == 0.375);
    assert_int_equal(p.gpu_need, 6270000000);
    assert_true(p.price_low == 0 && p.price_margin == 0);
    e.price_low_micros = 1250;
    e.price_high_micros = 2500000;
    e.price_margin = -0.25;
    assert_true(sched_plan_write(&e, SCHED_FASTEST_FINISH, 2.5, 1.75, text, sizeof text));
    assert_true(sched_plan_read(text, &p));
    assert_true(p.price_low == 0.00125 && p.price_margin == -0.25);
    assert_true(p.python_s == 12.5 && p.range_margin == -0.125);
    /* the model's parameters, for a worker's speed on it (np) */
    assert_true(p.params == 0);
    e.params = 123712;
    assert_true(sched_plan_write(&e, SCHED_FASTEST_FINISH, 2.5, 1.75, text, sizeof text));
    assert_true(sched_plan_read(text, &p));
    assert_true(p.params == 123712 && p.price_margin == -0.25);
    json_t *slow = json_loads(text, 0, NULL); /* through the JSON parser too */
    json_object_set_new(slow, "zz", json_true());
    char *slow_text = json_dumps(slow, JSON_COMPACT);
    assert_true(sched_plan_read(slow_text, &p));
    assert_true(p.params == 123712);
    free(slow_text);
    json_decref(slow);
    /* A plan written before GPUs reads with no GPU need, on both paths. */
    assert_true(sched_plan_read("{\"fpt\":1,\"method\":0,\"class\":0,\"waits\":0,\"goal\":0,"
                                "\"start_s\":1,\"train_s\":1,\"startup_s\":1,\"mf\":1}",
                                &p));
    assert_int_equal(p.gpu_need, 0);
    /* ... and with no factor of fixed costs, no margin and nothing
     * between steps. */
    assert_true(p.startup_factor == 1.0 && p.range_margin == 0.0 && p.between_share == 0.0 &&
                p.python_s == 0.0 && p.price_low == 0.0 && p.price_margin == 0.0);
    assert_true(sched_plan_read("{ \"fpt\": 1, \"method\": 0, \"class\": 0, \"goal\": 0 }", &p));
    assert_int_equal(p.gpu_need, 0);
    assert_false(sched_plan_read("{\"fpt\":0}", &p));
    assert_false(sched_plan_read("not json", &p));
    /* The same plan written by anything else (spaces, another key order)
     * reads through the JSON parser with the same values. */
    assert_true(sched_plan_read("{ \"method\": 2, \"fpt\": 1.5e9, \"class\": 1, \"waits\": 1,"
                                " \"goal\": 1, \"start_s\": 34.5, \"train_s\": 120.25,"
                                " \"startup_s\": 4.5, \"mf\": 2.5, \"gpu\": 6270000000 }",
                                &p));
    assert_true(p.flops_per_token == 1.5e9 && p.train_s == 120.25 && p.model_factor == 2.5);
    assert_int_equal(p.gpu_need, 6270000000);
    assert_int_equal(p.method, PLAN_METHOD_LORA_4);
    /* Out-of-range numbers in the plan's own format are refused, not cast. */
    assert_false(sched_plan_read("{\"fpt\":1,\"method\":1e300,\"class\":0,\"waits\":0,\"goal\":0,"
                                 "\"start_s\":1,\"train_s\":1,\"startup_s\":1,\"mf\":1}",
                                 &p));
    assert_false(sched_plan_read("{\"fpt\":1,\"method\":0,\"class\":0,\"waits\":0,\"goal\":0,"
                                 "\"start_s\":1,\"train_s\":1,\"startup_s\":1,\"mf\":1}x",
                                 &p));
}

static void a_models_speed_is_learnt_from_its_attempts(void **state)
{
    (void)state;
    struct sched_link *l = sched_link_new();
    assert_true(sched_link_model_factor(l, "small") == 1.0);
    struct store_calibration k = {.kind = FACTOR, .model = "small", .actual_a = 10,
                                  .nominal_a = 100};
    sched_link_calibrate(l, &k);
    assert_true(fabs(sched_link_model_factor(l, "small") - 0.1) < 1e-9);
    k.actual_a = 40; /* then 0.4: the mean of the logs, 0.2 */
    sched_link_calibrate(l, &k);
    assert_true(fabs(sched_link_model_factor(l, "small") - 0.2) < 1e-9);
    /* Other models are not touched; absurd ratios are clamped. */
    assert_true(sched_link_model_factor(l, "tiny") == 1.0);
    struct store_calibration wild = {.kind = FACTOR, .model = "tiny", .actual_a = 1e9,
                                     .nominal_a = 1};
    sched_link_calibrate(l, &wild);
    assert_true(sched_link_model_factor(l, "tiny") == 50.0);
    /* A pair without a model or without both times teaches nothing. */
    struct store_calibration none = {.kind = FACTOR, .actual_a = 1, .nominal_a = 2};
    sched_link_calibrate(l, &none);
    struct store_calibration zero = {.kind = FACTOR, .model = "x", .actual_a = 0, .nominal_a = 2};
    sched_link_calibrate(l, &zero);
    assert_true(sched_link_model_factor(l, "x") == 1.0);
    /* A row of the tiny shape's bench (kind "model", before the built-in
     * model's shape) teaches nothing: its nominal was another scale. */
    struct store_calibration old = {.kind = "model", .model = "y", .actual_a = 1, .nominal_a = 3};
    sched_link_calibrate(l, &old);
    assert_true(sched_link_model_factor(l, "y") == 1.0);
    sched_link_free(l);
}

/* Each shape (model, precision, adapter, method, batch, context) learns
 * its own speed and fixed costs from its attempts; a shape never seen
 * borrows its nearest learnt neighbour's, else its model's speed, else
 * the fleet's. */
static void a_shapes_speed_and_fixed_costs_are_learnt(void **state)
{
    (void)state;
    struct sched_link *l = sched_link_new();
    struct store_job a = {.batch_size = 8}, b;
    strcpy(a.model, "alallo-base");
    strcpy(a.precision, "16-bit");
    strcpy(a.adapter, "lora");
    strcpy(a.method, "sft");
    b = a;
    b.batch_size = 16;
    char key[STORE_NAME_MAX];
    sched_link_shape_key(&a, "speed", key, sizeof key);
    assert_non_null(strstr(key, "speed:alallo-base|16-bit|lora|sft|b8|s"));
    assert_true(sched_link_speed_factor(l, &a) == 1.0);
    assert_true(sched_link_startup_factor(l, &a) == 1.0);
    struct store_calibration model = {.kind = FACTOR, .actual_a = 3, .nominal_a = 1};
    strcpy(model.model, "alallo-base");
    sched_link_calibrate(l, &model);
    struct store_calibration shape = {.kind = FACTOR, .actual_a = 2, .nominal_a = 1};
    text_copy(shape.model, sizeof shape.model, key);
    sched_link_calibrate(l, &shape);
    struct store_calibration start = {.kind = FACTOR, .actual_a = 5, .nominal_a = 2};
    sched_link_shape_key(&a, "start", start.model, sizeof start.model);
    sched_link_calibrate(l, &start);
    assert_true(fabs(sched_link_speed_factor(l, &a) - 2.0) < 1e-9);
    assert_true(fabs(sched_link_startup_factor(l, &a) - 2.5) < 1e-9);
    enum sched_link_basis basis;
    sched_link_speed(l, &a, &basis);
    assert_int_equal(basis, SCHED_SHAPE_OWN);
    /* batch 16 has no history of its own: it borrows its nearest learnt
     * neighbour's (the same model and precision, batch 8), speed and
     * fixed costs alike (issue 32) */
    assert_true(fabs(sched_link_speed(l, &b, &basis) - 2.0) < 1e-9);
    assert_int_equal(basis, SCHED_SHAPE_BORROWED);
    assert_true(fabs(sched_link_startup_factor(l, &b) - 2.5) < 1e-9);
    /* another precision has no neighbour: its model's speed, still
     * borrowed; nominal loading */
    struct store_job c = b;
    strcpy(c.precision, "4-bit");
    assert_true(fabs(sched_link_speed(l, &c, &basis) - 3.0) < 1e-9);
    assert_int_equal(basis, SCHED_SHAPE_BORROWED);
    assert_true(sched_link_startup_factor(l, &c) == 1.0);
    /* another model: the fleet's factor, the mean in logs of its workers'
     * (learnt from every attempt each ran); before any, nothing: 1 */
    strcpy(c.model, "other");
    assert_true(sched_link_speed(l, &c, &basis) == 1.0);
    assert_int_equal(basis, SCHED_SHAPE_NONE);
    struct store_calibration wk = {.kind = FACTOR, .actual_a = 4, .nominal_a = 1};
    strcpy(wk.model, "worker:a");
    sched_link_calibrate(l, &wk);
    wk.actual_a = 1;
    strcpy(wk.model, "worker:b");
    sched_link_calibrate(l, &wk);
    assert_true(fabs(sched_link_speed(l, &c, &basis) - 2.0) < 1e-9);
    assert_int_equal(basis, SCHED_SHAPE_BORROWED);
    sched_link_free(l);
}

/* Succeeded jobs' time-left rows (kind "tl": cell in waited, end in goal)
 * set the margins of the next attempt's time left (issue 32). */
static void time_left_margins_are_learnt_from_tl_rows(void **state)
{
    (void)state;
    struct sched_link *l = sched_link_new();
    struct tl_state t;
    tl_begin(&t, 100, 0, 0, 5, 100, 200);
    sched_link_calibrate_time_left(l, &t);
    /* before any: the prior on both ends */
    assert_true(t.margin[1][1] == EST_TL_MARGIN_PRIOR && t.margin[1][0] == EST_TL_MARGIN_PRIOR);
    /* 35 jobs whose time left ran 10% past the top of the band shown at
     * 20-50%: the margin above there is their quantile, pulled to the
     * prior by 5 against their effective number (each weighs half as much
     * EST_HALF_LIFE rows later: (sum w)^2 / sum w^2). */
    struct store_calibration k = {.kind = "tl", .waited = 1, .goal = 1,
                                  .actual_a = exp(0.1), .nominal_a = 1};
    for (int i = 0; i < 35; i++)
        sched_link_calibrate(l, &k);
    tl_begin(&t, 100, 0, 0, 5, 100, 200);
    sched_link_calibrate_time_left(l, &t);
    double sw = 0, sw2 = 0;
    for (int i = 0; i < 35; i++) {
        double w = exp2(-i / EST_HALF_LIFE);
        sw += w;
        sw2 += w * w;
    }
    double ne = sw * sw / sw2;
    assert_true(ne > 30 && ne < 35);
    assert_true(fabs(t.margin[1][1] - (0.1 * ne + 5.0 * EST_TL_MARGIN_PRIOR) / (ne + 5.0)) < 1e-6);
    /* the other end learnt nothing */
    assert_true(t.margin[1][0] == EST_TL_MARGIN_PRIOR);
    sched_link_free(l);
}

/* Succeeded jobs' price rows (kind "price": how far below the price
 * range's lower end their net price fell, and their price before the cap
 * against the upper end, in half-widths) set the margins of those ends
 * (est_price_margin, est_price_high_margin); rows in logs, of older
 * alallo (`waited` 0 and 1), are not read. */
static void price_margins_are_learnt_from_price_rows(void **state)
{
    (void)state;
    struct sched_link *l = sched_link_new();
    assert_true(sched_link_price_margin(l, 0) == 0);
    struct store_calibration k = {.kind = "price", .actual_a = exp(-0.3), .nominal_a = 1};
    for (int i = 0; i < 40; i++) /* old rows */
        sched_link_calibrate(l, &k);
    k.waited = 1;
    for (int i = 0; i < 40; i++)
        sched_link_calibrate(l, &k);
    assert_true(sched_link_price_margin(l, 0) == 0 && sched_link_price_margin(l, 1) == 0);
    /* 40 jobs that paid well above the lower end: spreads of -0.3 */
    k.waited = SCHED_LINK_PRICE_LOW;
    for (int i = 0; i < 40; i++)
        sched_link_calibrate(l, &k);
    double m = sched_link_price_margin(l, 0);
    assert_true(m < -0.25 && m > -0.3); /* their quantile, pulled a little to 0 */
    assert_true(sched_link_price_margin(l, 1) == 0);
    /* and 40 whose price before the cap was 0.7 half-widths below the
     * upper end: the cap comes down by about that */
    k.waited = SCHED_LINK_PRICE_HIGH;
    k.actual_a = exp(-0.7);
    for (int i = 0; i < 40; i++)
        sched_link_calibrate(l, &k);
    m = sched_link_price_margin(l, 1);
    assert_true(m > 0.6 && m < 0.7);
    assert_true(sched_link_price_margin(l, 0) < -0.25); /* the lower end's stays */
    sched_link_free(l);
}

/* A reinforcement job on model m whose hyper object holds what
 * control/job_draft.c keeps: the hyper-parameters and, when judge_params
 * is positive, the score_model graders' models' weights. */
static void rft_job(struct store_job *j, int64_t judge_params, int64_t judge_bytes)
{
    memset(j, 0, sizeof *j);
    j->batch_size = 4;
    strcpy(j->model, "alallo-base");
    strcpy(j->precision, "16-bit");
    strcpy(j->adapter, "lora");
    strcpy(j->method, "reinforcement");
    struct job_hyper h;
    job_hyper_defaults(&h);
    h.max_seq_len = 512;
    assert_true(job_hyper_rft(&h, 1, NULL));
    assert_true(job_hyper_format(&h, false, j->hyper, sizeof j->hyper));
    if (judge_params > 0)
        assert_true(job_hyper_set(j->hyper, sizeof j->hyper, "grader_weights",
                                  json_pack("{s:I,s:I}", "params", (json_int_t)judge_params,
                                            "bytes", (json_int_t)judge_bytes)));
}

/* rft_job without graders' models, of max_steps steps over 40 examples
 * (40,000 tokens, one epoch), its plan written from e. */
static void rft_job_planned(struct store_job *j, long max_steps, const struct estimate *e)
{
    rft_job(j, 0, 0);
    j->max_steps = max_steps;
    j->examples = 40;
    j->tokens = 40000;
    j->n_epochs = 1;
    assert_true(sched_plan_write(e, SCHED_LOWEST_COST, 1.0, 1.0, j->plan, sizeof j->plan));
}

/* A score_model grader's model is loaded beside the policy: the memory the
 * planner reserves holds its fp32 weights (4 bytes a parameter, and the
 * margin on top) and the nominal loading reads its files; a string_check
 * job's (no model) are those of the policy alone. */
static void a_grader_models_weights_are_reserved_and_loaded(void **state)
{
    (void)state;
    struct catalog_model m = {.params = 500000000, .bytes = 1000000000, .layers = 24,
                              .hidden = 1024, .heads = 16, .kv_heads = 16, .vocab = 32000,
                              .max_positions = 4096};
    struct store_job plain, small, big;
    rft_job(&plain, 0, 0);
    rft_job(&small, 1000000000, 2000000000);
    rft_job(&big, 3000000000, 6000000000);
    int64_t need[3];
    double load[3];
    const struct store_job *jobs[3] = {&plain, &small, &big};
    for (int i = 0; i < 3; i++) {
        struct plan_job pj, norm;
        struct plan_memory mem;
        sched_link_plan_job(&m, jobs[i], &pj);
        assert_int_equal(planner_normalize(&pj, &norm, NULL, 0), ERR_OK);
        assert_int_equal(planner_memory(&norm, &mem, NULL, 0), ERR_OK);
        assert_int_equal(mem.grader, 4 * pj.grader_params);
        need[i] = mem.total;
        load[i] = sched_link_loading_s(&m, jobs[i]);
    }
    /* the string_check job: the policy alone, no grader model */
    struct plan_job pj;
    sched_link_plan_job(&m, &plain, &pj);
    assert_int_equal(pj.grader_params, 0);
    assert_true(fabs(load[0] - est_loading_s(1e9, 0)) < 1e-9);
    assert_true(fabs(load[0] - (EST_LOAD_BASE_S + 1e9 / EST_LOAD_BYTES_PER_S)) < 1e-9);
    /* each grows with the grader's model: 4 bytes a parameter, and 5% */
    assert_true(llabs(need[1] - need[0] - (int64_t)(4e9 * 1.05)) <= 2);
    assert_true(llabs(need[2] - need[0] - (int64_t)(12e9 * 1.05)) <= 2);
    assert_true(fabs(load[1] - load[0] - 2e9 / EST_LOAD_BYTES_PER_S) < 1e-9);
    assert_true(fabs(load[2] - load[0] - 6e9 / EST_LOAD_BYTES_PER_S) < 1e-9);
    /* the same grader weights kept by a job of another method count for
     * nothing in its plan */
    strcpy(small.method, "supervised");
    sched_link_plan_job(&m, &small, &pj);
    assert_int_equal(pj.grader_params, 0);
}

/* A python grader's seconds (one run per answer, whatever the worker's
 * speed) are part of the nominal training of the time left's range, on
 * top of the FLOPs' part; a job without one has none. */
static void a_python_graders_seconds_are_in_the_training_range(void **state)
{
    (void)state;
    struct sched_link *l = sched_link_new();
    struct store_job plain, py;
    struct estimate e = {.flops_per_token = 1e9, .method = PLAN_METHOD_LORA_16,
                         .worker_class = WORKER_ON_DEMAND};
    rft_job_planned(&plain, 10, &e);
    py = plain;
    assert_true(job_hyper_set(py.hyper, sizeof py.hyper, "python_answer_s",
                              json_real(EST_PYTHON_GRADE_S)));
    struct job_hyper h;
    job_hyper_parse(py.hyper, &h);
    assert_int_equal(h.rft_group, 4);
    assert_true(sched_link_python_s(&plain, 10) == 0);
    /* 10 steps of 4 prompts, 4 answers each; 5 steps half of that */
    assert_true(fabs(sched_link_python_s(&py, 10) - 160 * EST_PYTHON_GRADE_S) < 1e-9);
    assert_true(fabs(sched_link_python_s(&py, 5) - 80 * EST_PYTHON_GRADE_S) < 1e-9);
    struct sched_worker w = {.class_ = WORKER_ON_DEMAND, .flops = 1e12};
    double nominal = capacity_train_seconds(sched_link_train_tokens(&plain) * 1e9, 0, &w);
    assert_true(nominal > 0);
    double lo0, hi0, lo1, hi1;
    sched_link_train_range(l, &plain, &w, 10, &lo0, &hi0);
    sched_link_train_range(l, &py, &w, 10, &lo1, &hi1);
    /* the same band around a nominal larger by the python seconds */
    double grow = (nominal + 8.0) / nominal;
    assert_true(fabs(lo1 / lo0 - grow) < 1e-6);
    assert_true(fabs(hi1 / hi0 - grow) < 1e-6);
    /* what runs between steps (the plan's share) grows the steps' time,
     * not the python seconds: (nominal x 1.25 + 8) / (nominal + 8) */
    e.between_share = 0.25;
    assert_true(sched_plan_write(&e, SCHED_LOWEST_COST, 1.0, 1.0, py.plan, sizeof py.plan));
    double lo2, hi2;
    sched_link_train_range(l, &py, &w, 10, &lo2, &hi2);
    grow = (nominal * 1.25 + 8.0) / (nominal + 8.0);
    assert_true(fabs(lo2 / lo1 - grow) < 1e-6);
    assert_true(fabs(hi2 / hi1 - grow) < 1e-6);
    sched_link_free(l);
}

/* A job queued ahead of another is as long, to the scheduler, as its
 * estimate says: what runs between its steps (the plan's between_share)
 * at the worker's speed and its python graders' seconds beside its
 * loading, for the steps it still has. Seen before: a queued python-graded
 * job ahead counted its steps' FLOPs and loading alone, and the job behind
 * two of them was promised 4.8 s of wait for 18 s. */
static void a_queued_jobs_validation_and_python_seconds_are_in_its_length(void **state)
{
    (void)state;
    struct sched_link *l = sched_link_new();
    struct estimate e = {.flops_per_token = 1e9, .method = PLAN_METHOD_LORA_16,
                         .worker_class = WORKER_ON_DEMAND, .startup_s = 2};
    struct store_waiting w = {.max_steps = 10, .examples = 40, .tokens = 40000,
                              .n_epochs = 1, .batch_size = 4};
    strcpy(w.account, "acct");
    strcpy(w.model, "alallo-base");
    assert_true(sched_plan_write(&e, SCHED_LOWEST_COST, 1.0, 1.0, w.plan, sizeof w.plan));
    struct sched_job plain, grown;
    assert_true(sched_link_waiting_job(l, &w, 1, &plain));
    assert_true(plain.work_flops > 1 && plain.startup_s == 2);
    e.between_share = 0.5;
    e.python_s = 8;
    assert_true(sched_plan_write(&e, SCHED_LOWEST_COST, 1.0, 1.0, w.plan, sizeof w.plan));
    assert_true(sched_link_waiting_job(l, &w, 1, &grown));
    assert_true(fabs(grown.work_flops / plain.work_flops - 1.5) < 1e-12);
    assert_true(fabs(grown.startup_s - (2 + 8)) < 1e-12);
    /* half of its steps done: half of each still to run */
    w.steps_done = 5;
    assert_true(sched_link_waiting_job(l, &w, 1, &grown));
    assert_true(fabs(grown.work_flops / plain.work_flops - 0.75) < 1e-12);
    assert_true(fabs(grown.startup_s - (2 + 4)) < 1e-12);
    sched_link_free(l);
}

/* What runs after a reinforcement job's last step (its final validation,
 * time left's tail): the validation's share of the steps' time over the
 * trainer's validation rounds; none for a job of another method or
 * without a share. */
static void a_reinforcement_jobs_tail_is_one_validation_round(void **state)
{
    (void)state;
    struct sched_link *l = sched_link_new();
    struct store_job j;
    struct estimate e = {.flops_per_token = 1e9, .method = PLAN_METHOD_LORA_16,
                         .worker_class = WORKER_ON_DEMAND, .between_share = 0.5};
    rft_job_planned(&j, 4, &e);
    struct sched_worker w = {.class_ = WORKER_ON_DEMAND, .flops = 1e12};
    double steps_s = capacity_train_seconds(sched_link_train_tokens(&j) * 1e9, 0, &w);
    /* 4 steps validated after each (eval_interval auto: 1) and before the
     * first: 5 rounds */
    assert_true(fabs(sched_link_tail_s(l, &j, &w) - steps_s * 0.5 / 5) < 1e-9);
    j.max_steps = 20; /* auto: every 2 steps, 1 + 10 rounds */
    steps_s = capacity_train_seconds(sched_link_train_tokens(&j) * 1e9, 0, &w);
    assert_true(fabs(sched_link_tail_s(l, &j, &w) - steps_s * 0.5 / 11) < 1e-9);
    strcpy(j.method, "supervised");
    j.hyper[0] = '\0'; /* no reinforcement fields */
    assert_true(sched_link_tail_s(l, &j, &w) == 0);
    sched_link_free(l);
}

/* A worker's own speed: its offsets (rows under "wres:NAME") correct it
 * against the other workers read; a worker nothing is known of, or a
 * fleet of one, keeps its bench. */
static void a_workers_own_speed_corrects_its_bench(void **state)
{
    (void)state;
    struct sched_link *l = sched_link_new();
    struct sched_worker w[3] = {{.name = "slow", .flops = 100, .small_flops = 10},
                                {.name = "fast", .flops = 100},
                                {.name = "new", .flops = 100}};
    struct store_calibration k = {.kind = FACTOR, .actual_a = 1};
    for (int i = 0; i < 12; i++) { /* offsets 0.4 and -0.2: 12 of each */
        text_copy(k.model, sizeof k.model, SCHED_LINK_WORKER_SPEED_PREFIX "slow");
        k.nominal_a = exp(-0.4);
        sched_link_calibrate(l, &k);
        text_copy(k.model, sizeof k.model, SCHED_LINK_WORKER_SPEED_PREFIX "fast");
        k.nominal_a = exp(0.2);
        sched_link_calibrate(l, &k);
    }
    sched_link_correct_speeds(l, w, 3);
    double slow = 0.4 * 12 / 16, fast = -0.2 * 12 / 16, fleet = 0.5 * (slow + fast);
    assert_true(fabs(w[0].speed_log - (slow - fleet)) < 1e-9);
    assert_true(fabs(w[0].flops - 100 * exp(-(slow - fleet))) < 1e-6);
    assert_true(fabs(w[0].small_flops - 10 * exp(-(slow - fleet))) < 1e-6);
    assert_true(fabs(w[1].flops - 100 * exp(-(fast - fleet))) < 1e-6);
    assert_true(w[2].flops == 100 && w[2].speed_log == 0.0);
    /* The slow worker alone: nothing to compare with. */
    struct sched_worker alone = {.name = "slow", .flops = 100};
    sched_link_correct_speeds(l, &alone, 1);
    assert_true(alone.flops == 100);
    /* The offset is the error against the band's centre (no history: the
     * default band), with the correction the prediction carried. */
    double off = sched_link_worker_offset(l, PLAN_METHOD_LORA_16, WORKER_ON_DEMAND, false, 30, 10,
                                          -0.1);
    assert_true(fabs(off - (log(3.0) - 0.1 - 0.5 * log(0.6 * 2.0))) < 1e-9);
    assert_true(isnan(sched_link_worker_offset(l, 99, 0, false, 30, 10, 0)));
    sched_link_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ledger_state_round_trip_is_exact),
        cmocka_unit_test(broken_state_is_refused),
        cmocka_unit_test(job_without_state_reads_from_its_estimate),
        cmocka_unit_test(plan_round_trip),
        cmocka_unit_test(a_reinforcement_jobs_tail_is_one_validation_round),
        cmocka_unit_test(a_queued_jobs_validation_and_python_seconds_are_in_its_length),
        cmocka_unit_test(a_models_speed_is_learnt_from_its_attempts),
        cmocka_unit_test(a_shapes_speed_and_fixed_costs_are_learnt),
        cmocka_unit_test(time_left_margins_are_learnt_from_tl_rows),
        cmocka_unit_test(price_margins_are_learnt_from_price_rows),
        cmocka_unit_test(a_workers_own_speed_corrects_its_bench),
        cmocka_unit_test(a_grader_models_weights_are_reserved_and_loaded),
        cmocka_unit_test(a_python_graders_seconds_are_in_the_training_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
