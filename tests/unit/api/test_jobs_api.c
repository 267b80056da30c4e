/* test_jobs_api.c - files and jobs through the router: OpenAI shapes,
 * every kind of bad input, paging, isolation between accounts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "api_harness.h"

static char *upload_ok(struct harness *h, const char *key)
{
    struct reply r = h_upload(h, key, "train.jsonl", SAMPLE_JSONL);
    assert_int_equal(r.status, 200);
    char *id = strdup(h_str(r.json, "id"));
    reply_free(&r);
    return id;
}

/* One job event in OpenAI's shape: its level, and a message holding `part`. */
static void assert_event(json_t *ev, const char *level, const char *part)
{
    assert_non_null(ev);
    assert_string_equal(h_str(ev, "object"), "fine_tuning.job.event");
    assert_string_equal(h_str(ev, "level"), level);
    assert_string_equal(h_str(ev, "type"), "message");
    assert_non_null(strstr(h_str(ev, "message"), part));
    assert_true(json_is_integer(json_object_get(ev, "created_at")));
}

static char *create_ok(struct harness *h, const char *key, const char *file, const char *extra)
{
    char body[1024];
    snprintf(body, sizeof body, "{\"model\":\"tiny\",\"training_file\":\"%s\"%s}", file,
             extra ? extra : "");
    struct reply r = h_call(h, "POST", "/v1/fine_tuning/jobs", NULL, key, body);
    if (r.status != 200)
        fprintf(stderr, "create: %d %s\n", r.status, r.body);
    assert_int_equal(r.status, 200);
    char *id = strdup(h_str(r.json, "id"));
    reply_free(&r);
    return id;
}

static void upload_and_file_shapes(void **state)
{
    (void)state;
    struct harness *h = h_new();
    struct reply r = h_upload(h, h->key, "train.jsonl", SAMPLE_JSONL);
    assert_int_equal(r.status, 200);
    assert_string_equal(h_str(r.json, "object"), "file");
    assert_string_equal(h_str(r.json, "purpose"), "fine-tune");
    assert_string_equal(h_str(r.json, "filename"), "train.jsonl");
    assert_int_equal(json_integer_value(json_object_get(r.json, "examples")), 3);
    assert_int_equal(json_integer_value(json_object_get(r.json, "bytes")), strlen(SAMPLE_JSONL));
    assert_true(json_is_integer(json_object_get(r.json, "created_at")));
    char id[64];
    snprintf(id, sizeof id, "%s", h_str(r.json, "id"));
    reply_free(&r);

    r = h_call(h, "GET", "/v1/files", NULL, h->key, NULL);
    assert_string_equal(h_str(r.json, "object"), "list");
    assert_int_equal(json_array_size(json_object_get(r.json, "data")), 1);
    reply_free(&r);
    char path[128];
    snprintf(path, sizeof path, "/v1/files/%s/content", id);
    r = h_call(h, "GET", path, NULL, h->key, NULL);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, SAMPLE_JSONL);
    reply_free(&r);
    /* Another account sees nothing of it. */
    snprintf(path, sizeof path, "/v1/files/%s", id);
    r = h_call(h, "GET", path, NULL, h->other_key, NULL);
    assert_int_equal(r.status, 404);
    reply_free(&r);
    r = h_call(h, "DELETE", path, NULL, h->other_key, NULL);
    assert_int_equal(r.status, 404);
    reply_free(&r);
    r = h_call(h, "GET", "/v1/files", NULL, h->other_key, NULL);
    assert_int_equal(json_array_size(json_object_get(r.json, "data")), 0);
    reply_free(&r);
    r = h_call(h, "DELETE", path, NULL, h->key, NULL);
    assert_int_equal(r.status, 200);
    assert_true(json_is_true(json_object_get(r.json, "deleted")));
    reply_free(&r);
    r = h_call(h, "GET", path, NULL, h->key, NULL);
    assert_int_equal(r.status, 404);
    reply_free(&r);
    h_free(h);
}

static void bad_uploads(void **state)
{
    (void)state;
    struct harness *h = h_new();
    struct reply r = h_upload(h, h->key, "train.jsonl",
                              "{\"prompt\":\"a\",\"completion\":\"b\"}\n{\"prompt\":\"x\"}\n");
    assert_int_equal(r.status, 400);
    assert_string_equal(h_err_param(&r), "file");
    assert_string_equal(h_err_message(&r), "line 2 of train.jsonl: missing field \"completion\"");
    reply_free(&r);
    r = h_upload(h, h->key, "empty.jsonl", "");
    assert_int_equal(r.status, 400);
    reply_free(&r);
    /* A file name that is not UTF-8 is refused, not a 500. */
    r = h_upload(h, h->key, "d\xe9j\xe0.jsonl", SAMPLE_JSONL);
    assert_int_equal(r.status, 400);
    assert_string_equal(h_err_param(&r), "file");
    reply_free(&r);
    /* Multipart with no body at all. */
    r = h_call_ct(h, "POST", "/v1/files", NULL, h->key, "multipart/form-data; boundary=B", NULL, 0);
    assert_int_equal(r.status, 400);
    reply_free(&r);
    /* An id that is not UTF-8 in a path is a 404 whose answer is valid JSON. */
    r = h_call(h, "GET", "/v1/fine_tuning/jobs/ftjob-\xba", NULL, h->key, NULL);
    assert_int_equal(r.status, 404);
    assert_non_null(r.json);
    assert_non_null(strstr(h_err_message(&r), "ftjob-\xef\xbf\xbd"));
    reply_free(&r);
    r = h_call(h, "DELETE", "/v1/files/\xff\xfe", NULL, h->key, NULL);
    assert_int_equal(r.status, 404);
    assert_non_null(r.json);
    reply_free(&r);
    r = h_call_ct(h, "POST", "/v1/files", NULL, h->key, "application/json", "{}", 2);
    assert_int_equal(r.status, 400);
    assert_string_equal(h_err_param(&r), "file");
    reply_free(&r);
    const char *wrong_purpose = "--B\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n"
                                "batch\r\n--B--\r\n";
    r = h_call_ct(h, "POST", "/v1/files", NULL, h->key, "multipart/form-data; boundary=B",
                  wrong_purpose, strlen(wrong_purpose));
    assert_int_equal(r.status, 400);
    assert_string_equal(h_err_param(&r), "purpose");
    reply_free(&r);
    h_free(h);
}

/* "auto" and a missing value are chosen from the data set and the model
 * (sched/hyper.h): 3 examples on the small "tiny" model get 25 epochs of
 * batch 1 at 10x the base learning rate; a given value is kept. */
static void auto_hyperparameters(void **state)
{
    (void)state;
    struct harness *h = h_new();
    char *file = upload_ok(h, h->key);
    const char *asks[] = {"", ",\"hyperparameters\":{\"n_epochs\":\"auto\","
                              "\"batch_size\":\"auto\",\"learning_rate_multiplier\":\"auto\"}"};
    for (int i = 0; i < 2; i++) {
        char body[512];
        snprintf(body, sizeof body, "{\"model\":\"tiny\",\"training_file\":\"%s\"%s}", file,
                 asks[i]);
        struct reply r = h_call(h, "POST", "/v1/fine_tuning/jobs", NULL, h->key, body);
        assert_int_equal(r.status, 200);
        json_t *hp = json_object_get(r.json, "hyperparameters");
        assert_int_equal(json_integer_value(json_object_get(hp, "n_epochs")), 25);
        assert_int_equal(json_integer_value(json_object_get(hp, "batch_size")), 1);
        assert_true(json_number_value(json_object_get(hp, "learning_rate_multiplier")) == 10.0);
        reply_free(&r);
    }
    char body[512];
    snprintf(body, sizeof body,
             "{\"model\":\"tiny\",\"training_file\":\"%s\",\"hyperparameters\":"
             "{\"n_epochs\":30}}",
             file);
    struct reply r = h_call(h, "POST", "/v1/fine_tuning/jobs", NULL, h->key, body);
    json_t *hp = json_object_get(r.json, "hyperparameters");
    assert_int_equal(json_integer_value(json_object_get(hp, "n_epochs")), 30);
    assert_true(json_number_value(json_object_get(hp, "learning_rate_multiplier")) == 10.0);
    reply_free(&r);
    free(file);
    h_free(h);
}

/* A body wrong in several ways is answered with the first check it fails,
 * in one order that mixes the JSON's checks (api/job_request.c) with
 * control's (control/job_draft.c): each pair below has one of each. */
static void several_mistakes_answer_the_first(void **state)
{
    (void)state;
    struct harness *h = h_new();
    char *file = upload_ok(h, h->key);
    struct {
        const char *extra, *param;
        int status;
    } cases[] = {
        /* control's file look-up before the JSON's hyper-parameters */
        {",\"validation_file\":\"file-nope\",\"hyperparameters\":{\"n_epochs\":0}",
         "validation_file", 404},
        /* the JSON's n_epochs before control's max_seq_len */
        {",\"hyperparameters\":{\"n_epochs\":0,\"max_seq_len\":999999}",
         "hyperparameters.n_epochs", 400},
        /* control's max_seq_len before the JSON's packing */
        {",\"hyperparameters\":{\"packing\":3,\"max_seq_len\":999999}",
         "hyperparameters.max_seq_len", 400},
        /* control's file format before the JSON's suffix */
        {",\"method\":{\"type\":\"dpo\"},\"suffix\":\"bad suffix\"", "training_file", 400},
        /* the JSON's metadata before control's W&B key */
        {",\"metadata\":[1],\"integrations\":[{\"type\":\"wandb\",\"wandb\":{\"project\":\"p\"}}]",
         "metadata", 400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[768];
        snprintf(body, sizeof body, "{\"model\":\"tiny\",\"training_file\":\"%s\"%s}", file,
                 cases[i].extra);
        struct reply r = h_call(h, "POST", "/v1/fine_tuning/jobs", NULL, h->key, body);
        assert_int_equal(r.status, cases[i].status);
        json_t *err = json_object_get(r.json, "error");
        assert_string_equal(json_string_value(json_object_get(err, "param")), cases[i].param);
        reply_free(&r);
    }
    free(file);
    h_free(h);
}

static void create_shapes_and_defaults(void **state)
{
    (void)state;
    struct harness *h = h_new();
    char *file = upload_ok(h, h->key);
    char body[512];
    snprintf(body, sizeof body,
             "{\"model\":\"tiny\",\"training_file\":\"%s\",\"suffix\":\"mine\",\"seed\":7,"
             "\"metadata\":{\"team\":\"a\"},\"method\":{\"type\":\"supervised\",\"supervised\":"
             "{\"hyperparameters\":{\"n_epochs\":2,\"batch_size\":2}}}}",
             file);
    struct reply r = h_call(h, "POST", "/v1/fine_tuning/jobs", NULL, h->key, body);
    assert_int_equal(r.status, 200);
    json_t *j = r.json;
    assert_string_equal(h_str(j, "object"), "fine_tuning.job");
    assert_int_equal(strncmp(h_str(j, "id"), "ftjob-", 6), 0);
    assert_string_equal(h_str(j, "status"), "queued");
    /* No worker is known: it waits. */
    assert_string_equal(h_str(j, "message"), "Waiting for capacity");
    assert_string_equal(h_str(j, "training_method"), "Supervised fine-tuning");
    assert_string_equal(h_str(j, "precision"), "16-bit");
    assert_string_equal(h_str(j, "goal"), "lowest_cost");
    assert_string_equal(h_str(j, "user_provided_suffix"), "mine");
    assert_int_equal(json_integer_value(json_object_get(j, "seed")), 7);
    assert_true(json_is_null(json_object_get(j, "fine_tuned_model")));
    assert_true(json_is_null(json_object_get(j, "finished_at")));
    assert_true(json_is_null(json_object_get(j, "error")));
    assert_true(json_is_array(json_object_get(j, "result_files")));
    assert_string_equal(h_str(json_object_get(j, "metadata"), "team"), "a");
    json_t *hp = json_object_get(j, "hyperparameters");
    assert_int_equal(json_integer_value(json_object_get(hp, "n_epochs")), 2);
    assert_int_equal(json_integer_value(json_object_get(hp, "batch_size")), 2);
    /* the further hyper-parameters' defaults: the model's context (no worker
     * is known to cap it), packing on, LoRA 16/32 on all seven projections */
    assert_int_equal(json_integer_value(json_object_get(hp, "max_seq_len")), 512);
    assert_true(json_is_true(json_object_get(hp, "packing")));
    assert_int_equal(json_integer_value(json_object_get(hp, "lora_rank")), 16);
    assert_true(json_number_value(json_object_get(hp, "lora_alpha")) == 32.0);
    assert_true(json_number_value(json_object_get(hp, "lora_dropout")) == 0.0);
    assert_int_equal(json_array_size(json_object_get(hp, "lora_target_modules")), 7);
    assert_string_equal(h_str(hp, "lr_scheduler"), "cosine");
    assert_true(json_number_value(json_object_get(hp, "warmup_ratio")) == 0.05);
    assert_true(json_is_false(json_object_get(hp, "train_on_inputs")));
    assert_null(json_object_get(hp, "beta"));
    json_t *progress = json_object_get(j, "progress");
    /* max_steps = ceil(3 examples * 2 epochs / batch 2) */
    assert_int_equal(json_integer_value(json_object_get(progress, "max_steps")), 3);
    assert_int_equal(json_integer_value(json_object_get(progress, "percent")), 0);
    json_t *price = json_object_get(j, "price");
    assert_string_equal(h_str(price, "currency"), "USD");
    assert_true(json_is_object(json_object_get(j, "estimate")));
    assert_string_equal(h_str(json_object_get(j, "estimate"), "message"),
                        "No capacity is free right now; the job would wait in the queue.");
    assert_true(json_is_array(json_object_get(j, "attempts")));
    char id[64]; /* kept: j is gone with r */
    snprintf(id, sizeof id, "%s", h_str(j, "id"));
    reply_free(&r);

    /* Every further hyper-parameter set reaches the job as given. */
    char body2[1024];
    snprintf(body2, sizeof body2,
             "{\"model\":\"tiny\",\"training_file\":\"%s\",\"hyperparameters\":"
             "{\"max_seq_len\":128,\"packing\":false,\"lora_rank\":8,\"lora_alpha\":16,"
             "\"lora_dropout\":0.05,"
             "\"lora_target_modules\":[\"v_proj\",\"q_proj\"],\"lr_scheduler\":\"linear\","
             "\"warmup_ratio\":0.1,\"weight_decay\":0.01,\"train_on_inputs\":true}}",
             file);
    struct reply r2 = h_call(h, "POST", "/v1/fine_tuning/jobs", NULL, h->key, body2);
    assert_int_equal(r2.status, 200);
    json_t *hp2 = json_object_get(r2.json, "hyperparameters");
    assert_int_equal(json_integer_value(json_object_get(hp2, "max_seq_len")), 128);
    assert_true(json_is_false(json_object_get(hp2, "packing")));
    assert_int_equal(json_integer_value(json_object_get(hp2, "lora_rank")), 8);
    assert_true(json_number_value(json_object_get(hp2, "lora_alpha")) == 16.0);
    assert_true(json_number_value(json_object_get(hp2, "lora_dropout")) == 0.05);
    json_t *tm = json_object_get(hp2, "lora_target_modules");
    assert_int_equal(json_array_size(tm), 2);
    assert_string_equal(json_string_value(json_array_get(tm, 0)), "q_proj");
    assert_string_equal(json_string_value(json_array_get(tm, 1)), "v_proj");
    assert_string_equal(h_str(hp2, "lr_scheduler"), "linear");
    assert_true(json_number_value(json_object_get(hp2, "warmup_ratio")) == 0.1);
    assert_true(json_number_value(json_object_get(hp2, "weight_decay")) == 0.01);
    assert_true(json_is_true(json_object_get(hp2, "train_on_inputs")));
    reply_free(&r2);

    /* Its first event is the creation, in OpenAI's shape. */
    char path[128];
    snprintf(path, sizeof path, "/v1/fine_tuning/jobs/%s/events", id);
    struct reply r3 = h_call(h, "GET", path, NULL, h->key, NULL);
    assert_int_equal(r3.status, 200);
    assert_string_equal(h_str(r3.json, "object"), "list");
    json_t *data = json_object_get(r3.json, "data");
    assert_int_equal(json_array_size(data), 1);
    assert_event(json_array_get(data, 0), "info", "Created fine-tuning job");
    reply_free(&r3);
    free(file);
    h_free(h);
}

static void bad_job_bodies(void **state)
{
    (void)state;
    struct harness *h = h_new();
    char *file = upload_ok(h, h->key);
    char *theirs = upload_ok(h, h->other_key);
    struct {
        const char *body;
        int status;
        const char *param;
    } cases[] = {
        {"{not json", 400, ""},
        {"[1,2]", 400, ""},
        {"{}", 400, "model"},
        {"{\"model\":\"tiny\"}", 400, "training_file"},
        {"{\"model\":7,\"training_file\":\"%s\"}", 400, "model"},
        {"{\"model\":\"nope\",\"training_file\":\"%s\"}", 404, "model"},
        {"{\"model\":\"tiny\",\"training_file\":\"file-nope\"}", 404, "training_file"},
        {"{\"model\":\"tiny\",\"training_file\":\"../../etc/passwd\"}", 404, "training_file"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"hyperparameters\":{\"n_epochs\":0}}", 400,
         "hyperparameters.n_epochs"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"hyperparameters\":{\"batch_size\":1.5}}",
         400, "hyperparameters.batch_size"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"hyperparameters\":"
         "{\"learning_rate_multiplier\":-1}}",
         400, "hyperparameters.learning_rate_multiplier"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"precision\":\"8-bit\"}", 400, "precision"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"goal\":\"cheap\"}", 400, "goal"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"suffix\":\"a:b\"}", 400, "suffix"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"seed\":-3}", 400, "seed"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"method\":{\"type\":\"rl\"}}", 400,
         "method.type"},
        /* DPO needs preference pairs; this file holds prompt/completion pairs */
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"method\":{\"type\":\"dpo\"}}", 400,
         "training_file"},
        /* the further hyper-parameters, each named when out of range */
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"hyperparameters\":{\"max_seq_len\":513}}",
         400, "hyperparameters.max_seq_len"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"hyperparameters\":{\"max_seq_len\":8}}",
         400, "hyperparameters.max_seq_len"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"hyperparameters\":{\"packing\":1}}", 400,
         "hyperparameters.packing"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"hyperparameters\":{\"lora_rank\":0}}", 400,
         "hyperparameters.lora_rank"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"hyperparameters\":{\"lora_alpha\":-1}}",
         400, "hyperparameters.lora_alpha"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"hyperparameters\":{\"lora_dropout\":1}}",
         400, "hyperparameters.lora_dropout"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"hyperparameters\":{\"lora_dropout\":-0.1}}",
         400, "hyperparameters.lora_dropout"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"hyperparameters\":"
         "{\"lora_target_modules\":[\"q_proj\",\"fc1\"]}}",
         400, "hyperparameters.lora_target_modules"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"hyperparameters\":{\"lr_scheduler\":\"step\"}}",
         400, "hyperparameters.lr_scheduler"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"hyperparameters\":{\"warmup_ratio\":0.9}}",
         400, "hyperparameters.warmup_ratio"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"hyperparameters\":{\"weight_decay\":-0.1}}",
         400, "hyperparameters.weight_decay"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"hyperparameters\":{\"train_on_inputs\":\"yes\"}}",
         400, "hyperparameters.train_on_inputs"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"hyperparameters\":{\"beta\":0.1}}", 400,
         "hyperparameters.beta"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"adapter\":\"full\",\"precision\":"
         "\"4-bit\"}",
         400, "adapter"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"validation_file\":\"file-none\"}", 404,
         "validation_file"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"metadata\":{\"a\":1}}", 400, "metadata"},
        /* Terminal escapes in a name would reach every terminal that lists it. */
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"name\":\"a\\u001b[2Jb\"}", 400,
         "name"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"name\":\"a\\nb\"}", 400, "name"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"name\":\"a\\u009b2Jb\"}", 400,
         "name"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[1024];
        snprintf(body, sizeof body, cases[i].body, file);
        struct reply r = h_call(h, "POST", "/v1/fine_tuning/jobs", NULL, h->key, body);
        if (r.status != cases[i].status || strcmp(h_err_param(&r), cases[i].param) != 0)
            fprintf(stderr, "case %zu: %s -> %d %s\n", i, body, r.status, r.body);
        assert_int_equal(r.status, cases[i].status);
        assert_string_equal(h_err_param(&r), cases[i].param);
        assert_non_null(json_object_get(json_object_get(r.json, "error"), "code"));
        reply_free(&r);
    }
    /* Another account's file is as unknown as a missing one. */
    char body[256];
    snprintf(body, sizeof body, "{\"model\":\"tiny\",\"training_file\":\"%s\"}", theirs);
    struct reply r = h_call(h, "POST", "/v1/fine_tuning/jobs", NULL, h->key, body);
    assert_int_equal(r.status, 404);
    assert_string_equal(h_err_param(&r), "training_file");
    reply_free(&r);
    /* Nothing was created by any of these. */
    r = h_call(h, "GET", "/v1/fine_tuning/jobs", NULL, h->key, NULL);
    assert_int_equal(json_array_size(json_object_get(r.json, "data")), 0);
    reply_free(&r);
    free(file);
    free(theirs);
    h_free(h);
}

/* Where a model is expected: an unknown one names the models there are, a
 * job id stands for its model, and a job without one says why. */
static void models_by_name_or_job(void **state)
{
    (void)state;
    struct harness *h = h_new();
    char *file = upload_ok(h, h->key);
    char body[512];
    snprintf(body, sizeof body, "{\"model\":\"nope\",\"training_file\":\"%s\"}", file);
    struct reply r = h_call(h, "POST", "/v1/fine_tuning/jobs", NULL, h->key, body);
    assert_int_equal(r.status, 404);
    assert_string_equal(h_err_message(&r), "No such model: nope. Available: big, tiny.");
    reply_free(&r);

    char *queued = create_ok(h, h->key, file, NULL);
    snprintf(body, sizeof body, "{\"model\":\"%s\",\"training_file\":\"%s\"}", queued, file);
    r = h_call(h, "POST", "/v1/fine_tuning/jobs", NULL, h->key, body);
    assert_int_equal(r.status, 404);
    char want[200];
    snprintf(want, sizeof want, "The job %s is queued: it has no model yet.", queued);
    assert_string_equal(h_err_message(&r), want);
    reply_free(&r);
    /* Another account's job is no job of this one. */
    r = h_call(h, "POST", "/v1/fine_tuning/jobs", NULL, h->other_key, body);
    assert_int_equal(r.status, 404);
    reply_free(&r);
    snprintf(body, sizeof body, "{\"model\":\"%s\",\"prompt\":\"hi\"}", queued);
    r = h_call(h, "POST", "/v1/completions", NULL, h->key, body);
    assert_int_equal(r.status, 404);
    assert_string_equal(h_err_message(&r), want);
    reply_free(&r);
    r = h_call(h, "POST", "/v1/completions", NULL, h->key, "{\"model\":\"nope\",\"prompt\":\"hi\"}");
    assert_int_equal(r.status, 404);
    assert_non_null(strstr(h_err_message(&r), "Available: big, tiny"));
    reply_free(&r);
    char path[128];
    snprintf(path, sizeof path, "/v1/models/%s", queued);
    r = h_call(h, "GET", path, NULL, h->key, NULL);
    assert_int_equal(r.status, 404);
    assert_string_equal(h_err_message(&r), want);
    reply_free(&r);
    free(queued);
    free(file);
    h_free(h);
}

static void list_paging_newest_first(void **state)
{
    (void)state;
    struct harness *h = h_new();
    char *file = upload_ok(h, h->key);
    char *ids[7];
    for (int i = 0; i < 7; i++)
        ids[i] = create_ok(h, h->key, file, NULL);
    char *theirs_file = upload_ok(h, h->other_key);
    char *theirs = create_ok(h, h->other_key, theirs_file, NULL);

    struct reply r = h_call(h, "GET", "/v1/fine_tuning/jobs", "limit=3", h->key, NULL);
    assert_int_equal(r.status, 200);
    json_t *data = json_object_get(r.json, "data");
    assert_int_equal(json_array_size(data), 3);
    assert_true(json_is_true(json_object_get(r.json, "has_more")));
    assert_string_equal(h_str(json_array_get(data, 0), "id"), ids[6]);
    assert_string_equal(h_str(r.json, "first_id"), ids[6]);
    assert_string_equal(h_str(r.json, "last_id"), ids[4]);
    reply_free(&r);
    char q[128];
    snprintf(q, sizeof q, "limit=3&after=%s", ids[4]);
    r = h_call(h, "GET", "/v1/fine_tuning/jobs", q, h->key, NULL);
    data = json_object_get(r.json, "data");
    assert_int_equal(json_array_size(data), 3);
    assert_string_equal(h_str(json_array_get(data, 0), "id"), ids[3]);
    reply_free(&r);
    snprintf(q, sizeof q, "limit=3&after=%s", ids[1]);
    r = h_call(h, "GET", "/v1/fine_tuning/jobs", q, h->key, NULL);
    data = json_object_get(r.json, "data");
    assert_int_equal(json_array_size(data), 1);
    assert_false(json_is_true(json_object_get(r.json, "has_more")));
    reply_free(&r);
    /* Default limit 20; bad limits and cursors are 400; another account's
     * job is not a cursor. */
    r = h_call(h, "GET", "/v1/fine_tuning/jobs", NULL, h->key, NULL);
    assert_int_equal(json_array_size(json_object_get(r.json, "data")), 7);
    reply_free(&r);
    const char *bad[] = {"limit=0", "limit=101", "limit=x", "after=..%2F", NULL};
    for (int i = 0; bad[i]; i++) {
        r = h_call(h, "GET", "/v1/fine_tuning/jobs", bad[i], h->key, NULL);
        assert_int_equal(r.status, 400);
        reply_free(&r);
    }
    snprintf(q, sizeof q, "after=%s", theirs);
    r = h_call(h, "GET", "/v1/fine_tuning/jobs", q, h->key, NULL);
    assert_int_equal(r.status, 400);
    reply_free(&r);

    /* Every job endpoint answers 404 for another account's job. */
    const char *paths[] = {"/v1/fine_tuning/jobs/%s", "/v1/fine_tuning/jobs/%s/events",
                           "/v1/fine_tuning/jobs/%s/checkpoints", "/v1/fine_tuning/jobs/%s/log"};
    for (size_t i = 0; i < 4; i++) {
        char path[160];
        snprintf(path, sizeof path, paths[i], theirs);
        r = h_call(h, "GET", path, NULL, h->key, NULL);
        assert_int_equal(r.status, 404);
        reply_free(&r);
    }
    char path[160];
    snprintf(path, sizeof path, "/v1/fine_tuning/jobs/%s/cancel", theirs);
    r = h_call(h, "POST", path, NULL, h->key, NULL);
    assert_int_equal(r.status, 404);
    reply_free(&r);
    r = h_call(h, "GET", "/v1/fine_tuning/jobs", NULL, h->other_key, NULL);
    assert_int_equal(json_array_size(json_object_get(r.json, "data")), 1);
    reply_free(&r);
    for (int i = 0; i < 7; i++)
        free(ids[i]);
    free(file);
    free(theirs);
    free(theirs_file);
    h_free(h);
}

static void cancel_queued_events_and_log(void **state)
{
    (void)state;
    struct harness *h = h_new();
    char *file = upload_ok(h, h->key);
    char *id = create_ok(h, h->key, file, NULL);
    char path[160];
    snprintf(path, sizeof path, "/v1/fine_tuning/jobs/%s/log", id);
    struct reply r = h_call(h, "GET", path, NULL, h->key, NULL);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "No log yet. It appears once training starts.");
    reply_free(&r);

    snprintf(path, sizeof path, "/v1/fine_tuning/jobs/%s/cancel", id);
    r = h_call(h, "POST", path, NULL, h->key, NULL);
    assert_int_equal(r.status, 200);
    assert_string_equal(h_str(r.json, "status"), "cancelled");
    assert_true(json_is_integer(json_object_get(r.json, "finished_at")));
    assert_true(json_is_null(json_object_get(r.json, "time_left")));
    reply_free(&r);
    r = h_call(h, "POST", path, NULL, h->key, NULL);
    assert_int_equal(r.status, 409);
    reply_free(&r);

    snprintf(path, sizeof path, "/v1/fine_tuning/jobs/%s/events", id);
    r = h_call(h, "GET", path, NULL, h->key, NULL);
    json_t *data = json_object_get(r.json, "data");
    assert_int_equal(json_array_size(data), 2);
    json_t *newest = json_array_get(data, 0);
    assert_event(newest, "info", "The job was cancelled");
    assert_string_equal(h_str(newest, "message"), "The job was cancelled");
    char q[160];
    snprintf(q, sizeof q, "limit=1&after=%s", h_str(newest, "id"));
    reply_free(&r);
    r = h_call(h, "GET", path, q, h->key, NULL);
    data = json_object_get(r.json, "data");
    assert_int_equal(json_array_size(data), 1);
    assert_non_null(strstr(h_str(json_array_get(data, 0), "message"), "Created fine-tuning job"));
    reply_free(&r);
    /* Nothing ran: nothing charged. */
    r = h_call(h, "GET", "/v1/billing/ledger", NULL, h->key, NULL);
    assert_int_equal(json_array_size(json_object_get(r.json, "data")), 0);
    reply_free(&r);
    free(file);
    free(id);
    h_free(h);
}

static void estimates_and_models(void **state)
{
    (void)state;
    struct harness *h = h_new();
    char *file = upload_ok(h, h->key);
    char body[256];
    snprintf(body, sizeof body, "{\"model\":\"tiny\",\"training_file\":\"%s\"}", file);
    struct reply r = h_call(h, "POST", "/v1/fine_tuning/estimates", NULL, h->key, body);
    assert_int_equal(r.status, 200);
    assert_string_equal(h_str(r.json, "message"),
                        "No capacity is free right now; the job would wait in the queue.");
    assert_true(json_integer_value(json_object_get(json_object_get(r.json, "plan"),
                                                   "memory_bytes")) > 0);
    reply_free(&r);
    r = h_call(h, "GET", "/v1/models", NULL, h->key, NULL);
    json_t *data = json_object_get(r.json, "data");
    assert_int_equal(json_array_size(data), 2);
    json_t *big = json_array_get(data, 0);
    assert_string_equal(h_str(big, "id"), "big");
    assert_string_equal(h_str(big, "kind"), "base");
    assert_true(json_integer_value(json_object_get(json_object_get(big, "size"), "parameters")) >
                1000000000);
    reply_free(&r);
    r = h_call(h, "GET", "/v1/models/tiny", NULL, h->key, NULL);
    assert_int_equal(r.status, 200);
    reply_free(&r);
    r = h_call(h, "GET", "/v1/models/nope", NULL, h->key, NULL);
    assert_int_equal(r.status, 404);
    reply_free(&r);
    free(file);
    h_free(h);
}

/* validation_split is checked when the job is made and estimated, against
 * the training file's size: it holds out at least one example and trains on
 * at least one, so a 1-example file cannot take it (the trainer would fail
 * later); a validation_file makes it unused. DPO has no validation loss:
 * the 400 names the field that was sent. */
static void validation_split_checked_at_creation(void **state)
{
    (void)state;
    struct harness *h = h_new();
    struct reply r = h_upload(h, h->key, "one.jsonl",
                              "{\"prompt\":\"I loved it\",\"completion\":\" positive\"}\n");
    assert_int_equal(r.status, 200);
    char one[64];
    snprintf(one, sizeof one, "%s", h_str(r.json, "id"));
    reply_free(&r);
    r = h_upload(h, h->key, "pref.jsonl",
                 "{\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"Capital?\"}]},"
                 "\"preferred_output\":[{\"role\":\"assistant\",\"content\":\"Paris.\"}],"
                 "\"non_preferred_output\":[{\"role\":\"assistant\",\"content\":\"Lyon.\"}]}\n"
                 "{\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"Sky?\"}]},"
                 "\"preferred_output\":[{\"role\":\"assistant\",\"content\":\"Blue.\"}],"
                 "\"non_preferred_output\":[{\"role\":\"assistant\",\"content\":\"Red.\"}]}\n");
    assert_int_equal(r.status, 200);
    char pref[64];
    snprintf(pref, sizeof pref, "%s", h_str(r.json, "id"));
    reply_free(&r);
    char *three = upload_ok(h, h->key);
    struct {
        const char *body;
        const char *file;
        int status;
        const char *param;
    } cases[] = {
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"hyperparameters\":"
         "{\"validation_split\":0.2}}",
         one, 400, "hyperparameters.validation_split"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"hyperparameters\":"
         "{\"validation_split\":0.5,\"early_stopping\":{\"patience\":2}}}",
         one, 400, "hyperparameters.validation_split"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"method\":{\"type\":\"dpo\",\"dpo\":"
         "{\"hyperparameters\":{\"validation_split\":0.1}}}}",
         pref, 400, "hyperparameters.validation_split"},
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"method\":{\"type\":\"dpo\",\"dpo\":"
         "{\"hyperparameters\":{\"early_stopping\":{\"patience\":2}}}}}",
         pref, 400, "hyperparameters.early_stopping"},
        /* three examples: one held out (round(0.1 * 3) is 0, at least 1), two trained */
        {"{\"model\":\"tiny\",\"training_file\":\"%s\",\"hyperparameters\":"
         "{\"validation_split\":0.1}}",
         three, 200, ""},
    };
    const char *paths[] = {"/v1/fine_tuning/estimates", "/v1/fine_tuning/jobs"};
    for (size_t p = 0; p < 2; p++) {
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            char body[1024];
            snprintf(body, sizeof body, cases[i].body, cases[i].file);
            r = h_call(h, "POST", paths[p], NULL, h->key, body);
            if (r.status != cases[i].status || strcmp(h_err_param(&r), cases[i].param) != 0)
                fprintf(stderr, "case %zu: %s %s -> %d %s\n", i, paths[p], body, r.status,
                        r.body);
            assert_int_equal(r.status, cases[i].status);
            assert_string_equal(h_err_param(&r), cases[i].param);
            if (cases[i].status == 400 && strstr(cases[i].param, "validation_split"))
                assert_non_null(strstr(h_err_message(&r), "validation_split"));
            reply_free(&r);
        }
    }
    /* with a validation_file the split is not used: a 1-example file is fine */
    char body[512];
    snprintf(body, sizeof body,
             "{\"model\":\"tiny\",\"training_file\":\"%s\",\"validation_file\":\"%s\","
             "\"hyperparameters\":{\"validation_split\":0.2}}",
             one, three);
    r = h_call(h, "POST", "/v1/fine_tuning/jobs", NULL, h->key, body);
    assert_int_equal(r.status, 200);
    reply_free(&r);
    free(three);
    h_free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(upload_and_file_shapes),
        cmocka_unit_test(bad_uploads),
        cmocka_unit_test(create_shapes_and_defaults),
        cmocka_unit_test(auto_hyperparameters),
        cmocka_unit_test(bad_job_bodies),
        cmocka_unit_test(several_mistakes_answer_the_first),
        cmocka_unit_test(models_by_name_or_job),
        cmocka_unit_test(list_paging_newest_first),
        cmocka_unit_test(cancel_queued_events_and_log),
        cmocka_unit_test(estimates_and_models),
        cmocka_unit_test(validation_split_checked_at_creation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
