/* results_file.c - a job's metrics as a CSV file (results_file.h). */
#include "api/results_file.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/handlers.h"
#include "api/shapes.h"
#include "core/ids.h"
#include "core/job.h"
#include "core/log.h"
#include "core/text.h"
#include "core/trainer_protocol.h"

#define EVENT_PAGE STORE_LIST_MAX

/* OpenAI's column names, in enum tproto_metric order after "step" (the
 * training accuracy is "train_accuracy" there, not the event's name). */
static const char *const columns[TPROTO_METRIC_COUNT] = {
    "train_loss",      "train_accuracy",  "valid_loss",
    "valid_mean_token_accuracy", "full_valid_loss", "full_valid_mean_token_accuracy",
    "train_reward_mean", "valid_reward_mean"};

struct row {
    long step;
    double v[TPROTO_METRIC_COUNT]; /* NAN: not measured at this step */
};

/* The rows in the order their steps first came, and an index from a step
 * to its row: open addressing, linear probing, a power of two of slots at
 * most half full (slot: row number + 1; 0 is empty). */
struct results_csv {
    struct row *rows;
    size_t n, cap;
    uint32_t *slots;
    size_t n_slots;
    bool sorted;  /* rows in step order (after a text or a size) */
    size_t work;  /* slots looked at (results_csv_work) */
};

struct results_csv *results_csv_new(void)
{
    return calloc(1, sizeof(struct results_csv));
}

void results_csv_free(struct results_csv *c)
{
    if (!c)
        return;
    free(c->rows);
    free(c->slots);
    free(c);
}

static size_t slot_of(long step, size_t n_slots)
{
    return (size_t)(((uint64_t)step * 0x9e3779b97f4a7c15ULL) >> 32) & (n_slots - 1);
}

/* The slot of `step`: its row's, or the empty one where it would go. */
static size_t find_slot(struct results_csv *c, long step)
{
    size_t i = slot_of(step, c->n_slots);
    for (;;) {
        c->work++;
        if (!c->slots[i] || c->rows[c->slots[i] - 1].step == step)
            return i;
        i = (i + 1) & (c->n_slots - 1);
    }
}

/* Fills the index anew from the rows (after they moved, or it grew). */
static void reindex(struct results_csv *c)
{
    memset(c->slots, 0, c->n_slots * sizeof *c->slots);
    for (size_t r = 0; r < c->n; r++)
        c->slots[find_slot(c, c->rows[r].step)] = (uint32_t)(r + 1);
}

/* Room for one more row, its slot included; false when out of memory. */
static bool make_room(struct results_csv *c)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        struct row *rows = realloc(c->rows, cap * sizeof *rows);
        if (!rows)
            return false;
        c->rows = rows;
        c->cap = cap;
    }
    if (2 * (c->n + 1) <= c->n_slots)
        return true;
    size_t n_slots = c->n_slots ? 2 * c->n_slots : 128;
    uint32_t *slots = malloc(n_slots * sizeof *slots);
    if (!slots)
        return false;
    free(c->slots);
    c->slots = slots;
    c->n_slots = n_slots;
    reindex(c);
    return true;
}

bool results_csv_add(struct results_csv *c, const char *event_data)
{
    json_t *o = event_data && event_data[0] ? json_loads(event_data, 0, NULL) : NULL;
    json_t *step = json_object_get(o, "step");
    if (!json_is_integer(step) || !json_is_number(json_object_get(o, "train_loss"))) {
        json_decref(o);
        return true; /* not a step's metrics (memory, or a message) */
    }
    struct row r = {.step = (long)json_integer_value(step)};
    for (int i = 0; i < TPROTO_METRIC_COUNT; i++) {
        json_t *v = json_object_get(o, tproto_metric_name((enum tproto_metric)i));
        r.v[i] = json_is_number(v) && isfinite(json_number_value(v)) ? json_number_value(v) : NAN;
    }
    json_decref(o);
    size_t i = c->n_slots ? find_slot(c, r.step) : 0;
    if (c->n_slots && c->slots[i]) {
        struct row *had = &c->rows[c->slots[i] - 1];
        for (int k = 0; k < TPROTO_METRIC_COUNT; k++)
            if (!isnan(r.v[k]))
                had->v[k] = r.v[k];
        return true;
    }
    size_t n_slots = c->n_slots;
    if (c->n == RESULTS_MAX_ROWS || !make_room(c))
        return false;
    if (c->n_slots != n_slots)
        i = find_slot(c, r.step); /* the index grew */
    c->rows[c->n] = r;
    c->slots[i] = (uint32_t)(c->n + 1);
    c->n++;
    c->sorted = false;
    return true;
}

size_t results_csv_work(const struct results_csv *c)
{
    return c->work;
}

static int by_step(const void *a, const void *b)
{
    long x = ((const struct row *)a)->step, y = ((const struct row *)b)->step;
    return (x > y) - (x < y);
}

/* Appends to out at *at, or with out NULL only moves *at on by the length. */
static void put(char *out, size_t cap, size_t *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char *out, size_t cap, size_t *at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = out ? vsnprintf(out + *at, cap - *at, fmt, ap) : vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    *at += n > 0 ? (size_t)n : 0;
}

/* Writes the CSV into out (cap bytes, enough by the widths in
 * results_csv_text), or with out NULL counts its bytes, the rows sorted by
 * step first. Its length. */
static size_t write_csv(struct results_csv *c, char *out, size_t cap)
{
    if (!c->sorted) {
        qsort(c->rows, c->n, sizeof *c->rows, by_step);
        if (c->n_slots)
            reindex(c); /* the rows moved */
        c->sorted = true;
    }
    size_t at = 0;
    bool shown[TPROTO_METRIC_COUNT];
    put(out, cap, &at, "step");
    for (int k = 0; k < TPROTO_METRIC_COUNT; k++) {
        /* the reward columns only for a job that has rewards (reinforcement) */
        shown[k] = k < TPROTO_METRIC_TRAIN_REWARD;
        for (size_t i = 0; i < c->n && !shown[k]; i++)
            shown[k] = !isnan(c->rows[i].v[k]);
        if (shown[k])
            put(out, cap, &at, ",%s", columns[k]);
    }
    put(out, cap, &at, "\n");
    for (size_t i = 0; i < c->n; i++) {
        put(out, cap, &at, "%ld", c->rows[i].step);
        for (int k = 0; k < TPROTO_METRIC_COUNT; k++) {
            if (!shown[k])
                continue;
            if (isnan(c->rows[i].v[k]))
                put(out, cap, &at, ",");
            else
                put(out, cap, &at, ",%.6g", c->rows[i].v[k]);
        }
        put(out, cap, &at, "\n");
    }
    return at;
}

char *results_csv_text(struct results_csv *c, size_t *len)
{
    /* a row: the step and six numbers of at most 16 characters, commas */
    size_t cap = 256 + c->n * (24 + TPROTO_METRIC_COUNT * 18);
    char *out = malloc(cap);
    if (!out)
        return NULL;
    *len = write_csv(c, out, cap);
    return out;
}

size_t results_csv_size(struct results_csv *c)
{
    return write_csv(c, NULL, 0);
}

/* The CSV of job j from its metrics events, oldest page last (the rows are
 * sorted by step at the end), in time linear in the events. ERR_OK with
 * *text malloc'd and *len its length; with text NULL, only *len: the size
 * is counted and no text is written. */
static enum alallo_err build(struct api_server *srv, const struct store_job *j,
                             char **text /* OUT, or NULL */, size_t *len /* OUT */)
{
    struct store_event *ev = calloc(EVENT_PAGE, sizeof *ev);
    struct results_csv *c = results_csv_new();
    enum alallo_err e = ev && c ? ERR_OK : ERR_NOMEM;
    int64_t before = 0;
    bool more = true;
    while (!e && more) {
        int n = 0;
        e = store_event_list(srv->ctl->store, j->id, before, EVENT_PAGE, ev, &n, &more);
        for (int i = 0; !e && i < n; i++)
            if (strcmp(ev[i].type, "metrics") == 0 && !results_csv_add(c, ev[i].data))
                e = ERR_TOO_LARGE;
        if (n == 0)
            more = false;
        else
            before = ev[n - 1].seq;
    }
    if (!e && text) {
        *text = results_csv_text(c, len);
        e = *text ? ERR_OK : ERR_NOMEM;
    } else if (!e) {
        *len = results_csv_size(c);
    }
    results_csv_free(c);
    free(ev);
    return e;
}

void results_file_get(struct api_server *srv, struct http_request *req, struct http_response *res,
                      const char *job_id, bool content)
{
    struct store_job j;
    char id[IDS_MAX];
    enum alallo_err e = store_job_get(srv->ctl->store, req->account.id, job_id, &j);
    if (e == ERR_NOT_FOUND || (!e && !results_file_id(&j, id, sizeof id))) {
        char msg[HTTP_VALUE_MAX + 32];
        text_printf(msg, sizeof msg, "No such file: %s.", req->params[0]);
        api_error(res, ERR_NOT_FOUND, msg, "id");
        return;
    }
    char *text = NULL;
    size_t len = 0;
    if (!e)
        e = build(srv, &j, content ? &text : NULL, &len);
    if (e) {
        api_store_error(res, e);
        return;
    }
    if (content) {
        http_respond(res, 200, "text/csv", text, len);
    } else {
        struct store_file f = {.bytes = (int64_t)len, .created_ms = j.finished_ms};
        text_copy(f.id, sizeof f.id, id);
        text_copy(f.account, sizeof f.account, j.account);
        text_copy(f.filename, sizeof f.filename, RESULTS_FILE_NAME);
        text_copy(f.purpose, sizeof f.purpose, "fine-tune-results");
        api_json(res, 200, shape_file(&f));
    }
    free(text);
}
