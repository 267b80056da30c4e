/* grader.h - reinforcement fine-tuning's graders in OpenAI's shape
 * (docs/rft.md): checked when a job is made or a grader is validated, and
 * run on each sampled answer by the trainer and by
 * POST /v1/fine_tuning/alpha/graders/run. Pure but for the model a
 * score_model grader asks, which the caller supplies (struct grader_model),
 * and a python grader's source, run in the sandbox (grader_python.h).
 *
 * A grader is the JSON object OpenAI's API takes, kept as JSON:
 *   {"type": "string_check", "name", "input", "reference",
 *    "operation": "eq" | "ne" | "like" | "ilike"}
 *   {"type": "text_similarity", "name", "input", "reference",
 *    "evaluation_metric": grader_text.h's names, ["pass_threshold"]}
 *   {"type": "score_model", "name", "model", "input": [messages],
 *    ["range": [lo, hi]], ["sampling_params": {temperature, top_p, seed,
 *    max_completions_tokens}], ["pass_threshold"]}
 *   {"type": "multi", "name", "graders": {NAME: grader, ...},
 *    "calculate_output": formula (grader_formula.h)}
 *   {"type": "python", "name", "source": code defining grade(sample, item),
 *    ["image_tag"] (accepted, unused), ["pass_threshold"]}
 * Templates in input, reference and a score_model's message contents:
 * {{sample.output_text}} (the answer) and {{item.FIELD}} (a field of the
 * data line, dotted for a nested one: {{item.a.b}}), spaces allowed inside
 * the braces. "label_model", and the metrics "cosine" and "meteor" are
 * refused by name (docs/rft.md says why). grader_check checks a python
 * grader's shape only; grader_python_ready whether it can run here.
 */
#ifndef ALALLO_CORE_GRADER_H
#define ALALLO_CORE_GRADER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define GRADER_MAX_DEPTH 2     /* a multi's graders may not be multi themselves */
#define GRADER_MAX_CHILDREN 16 /* graders in one multi */
#define GRADER_MAX_TEXT (64 * 1024) /* bytes of one rendered template */
#define GRADER_MODEL_MAX_TOKENS 1024 /* a score_model's answer, at most */
#define GRADER_MODEL_DEFAULT_TOKENS 256 /* ... and when sampling_params do not say */

/* Checks grader g. `at` is where it sits in the request (e.g.
 * "method.reinforcement.grader"). false with param set to the field at
 * fault (at + ".operation", ...) and a sentence in msg. */
bool grader_check(const json_t *g, const char *at, char *param, size_t paramcap, char *msg,
                  size_t msgcap);

/* What one score_model grader asks of its model for each answer it
 * grades, read from the grader before any template is rendered (the
 * estimate's grading term, docs/estimator.md): */
struct grader_ask {
    const char *model;     /* its "model"                                   */
    const char *param;     /* where that field sits in the request          */
    size_t template_bytes; /* its messages' contents, summed                */
    int messages;          /* how many                                      */
    int answer_reads;      /* {{sample.output_text}} tags among them        */
    int max_tokens;        /* sampling_params.max_completions_tokens, else
                              GRADER_MODEL_DEFAULT_TOKENS                    */
};

/* Calls fn with every score_model grader in g (for the caller to check it
 * names a model it serves, and to count what it costs); a's strings are
 * g's and the walk's, valid during the call. Stops and returns false at
 * fn's first false. g must have passed grader_check. */
bool grader_each_model(const json_t *g, const char *at,
                       bool (*fn)(void *ctx, const struct grader_ask *a), void *ctx);

/* Calls fn with every grader of g that is no multi: g itself, or each of
 * a multi's graders, with where it sits (at, or at + ".graders.NAME").
 * Stops and returns false at fn's first false. g must have passed
 * grader_check. */
bool grader_each_leaf(const json_t *g, const char *at,
                      bool (*fn)(void *ctx, const json_t *leaf, const char *at), void *ctx);

/* Whether data line `item` holds every {{item.FIELD}} that g's templates
 * read. false with the first missing field's name (dotted) in field. */
bool grader_item_has_fields(const json_t *g, const json_t *item, char *field, size_t fieldcap);

/* Renders template t with the answer and the data line. false with a
 * sentence in err (a field the line lacks; too long). *out is malloc'd. */
bool grader_render(const char *t, const char *sample, const json_t *item, char **out /* OUT */,
                   char *err, size_t errcap);

/* The model a score_model grader asks: fn answers the rendered messages
 * (OpenAI's [{role, content}], content a string) with text in *reply
 * (malloc'd, the caller's), sampling as the grader's sampling_params
 * (an object, maybe empty); 0, or -1 with a sentence in err. */
struct grader_model {
    int (*fn)(void *ctx, const char *model, const json_t *messages, const json_t *sampling,
              char **reply /* OUT */, char *err, size_t errcap);
    void *ctx;
};

/* What one run gave: the reward and, for a multi, each named grader's
 * score (an object NAME: score; NULL for the others; the caller's). */
struct grader_result {
    double reward;
    json_t *sub_rewards;
    long model_calls; /* score_model calls made */
};

/* Runs g (passed grader_check) on answer `sample` for data line `item`.
 * string_check gives 1 or 0; text_similarity its metric's score;
 * score_model the first number of the model's reply, clamped to range
 * (the range's low end when the reply holds none); multi its formula;
 * python what its grade returns (sandbox_default_limits()).
 * false with a sentence in err (a field the line lacks, a model that
 * failed, a division by zero). mdl may be NULL when g asks no model. */
bool grader_run(const json_t *g, const char *sample, const json_t *item,
                const struct grader_model *mdl, struct grader_result *out /* OUT */, char *err,
                size_t errcap);

#endif
