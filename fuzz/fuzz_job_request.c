/* fuzz_job_request.c - libFuzzer driver for job_request_parse()
 * (src/api/job_request.c): the JSON body of POST /v1/fine_tuning/jobs and
 * /v1/fine_tuning/estimates into a struct job_request, with no store and
 * no control, so that it is fuzzed alone, fast, without a fixture (the
 * whole path, control_job_draft included, is fuzz_router_json's).
 *
 * Input: the body, as the handler receives it (parsed by jansson; input
 * that is not a JSON object is dropped, as api_body_object refuses it).
 *
 * Properties: no crash, leak or undefined behaviour; it answers true
 * exactly when no error is set; an error is ERR_INVALID, names a field and
 * says why (NUL-terminated), and lies in one of the JSON checks' places of
 * the order (control/job_draft.h); a request accepted has a model shorter
 * than the store's field and a training file, its strings and sample
 * prompts point into the body, its metadata is NUL-terminated, its
 * max_steps in range; and the same body gives the same request twice.
 */
#include <jansson.h>
#include <stdint.h>
#include <string.h>

#include "api/job_request.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_INPUT (64 * 1024)

static bool json_place(enum job_check_at at)
{
    return at == JOB_AT_FIELDS || at == JOB_AT_HYPER || at == JOB_AT_MORE_HYPER ||
           at == JOB_AT_SETTINGS || at == JOB_AT_INTEGRATIONS || at == JOB_AT_SAMPLE_PROMPTS ||
           at == JOB_AT_MAX_STEPS;
}

static struct job_request a, b; /* large: not on the stack */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > MAX_INPUT)
        return 0;
    json_t *body = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(body)) {
        json_decref(body);
        return 0;
    }
    bool ok = job_request_parse(body, &a);
    FUZZ_CHECK(ok == (a.err.at == JOB_AT_NONE));
    if (!ok) {
        FUZZ_CHECK(json_place(a.err.at));
        FUZZ_CHECK(a.err.code == ERR_INVALID);
        FUZZ_CHECK(memchr(a.err.param, '\0', sizeof a.err.param) && a.err.param[0]);
        FUZZ_CHECK(memchr(a.err.message, '\0', sizeof a.err.message) && a.err.message[0]);
    } else {
        FUZZ_CHECK(a.model && a.training_file);
        FUZZ_CHECK(strlen(a.model) < sizeof ((struct store_job *)0)->model);
        FUZZ_CHECK(a.model == json_string_value(json_object_get(body, "model")));
        FUZZ_CHECK(memchr(a.metadata, '\0', sizeof a.metadata));
        FUZZ_CHECK(!a.max_steps_given || (a.max_steps >= 1 && a.max_steps <= 10000000));
        FUZZ_CHECK(!a.seed_given || (a.seed >= 0 && a.seed <= 2147483647));
        FUZZ_CHECK(a.more.max_seq_len == 0);
        FUZZ_CHECK(!a.sample_prompts || a.sample_prompts == json_object_get(body, "sample_prompts"));
    }
    FUZZ_CHECK(job_request_parse(body, &b) == ok);
    FUZZ_CHECK(memcmp(&a.err, &b.err, sizeof a.err) == 0);
    FUZZ_CHECK(a.model == b.model && a.dpo == b.dpo && a.epochs == b.epochs &&
               a.seq_given == b.seq_given && strcmp(a.metadata, b.metadata) == 0);
    json_decref(body);
    return 0;
}
