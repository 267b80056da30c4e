/* wandb_forward.c - the leader's W&B forwarding thread (wandb_forward.h). */
#include "control/wandb_forward.h"

#include <curl/curl.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "control/leadership.h"
#include "control/wandb_batch.h"
#include "core/clock.h"
#include "core/growbuf.h"
#include "core/integrations.h"
#include "core/job.h"
#include "core/log.h"
#include "core/text.h"
#include "store/store.h"

#define KIND "wandb"
#define PENDING_PER_ROUND 128 /* pending jobs read per round, in turns between accounts */
#define POSTS_PER_ROUND 32    /* jobs tried per round (those waiting out a back-off are free) */
#define EVENTS_PER_POST 50
#define TRACKED_MAX 256       /* jobs whose back-off is remembered (> PENDING_PER_ROUND) */
#define RESPONSE_MAX 65536    /* a longer answer is refused */
#define CALL_TIMEOUT_S 15
#define BACKOFF_MAX_MS 60000
#define LAST_TRY_REFUSED 5    /* tries in a row the server refuses (4xx): about 15 s */
#define LAST_TRY_OTHER 30     /* tries in a row failing otherwise: about 25 min */

/* What the thread remembers of a job between rounds (lost on restart:
 * then the run is upserted again, which W&B allows). */
struct tracked {
    char job[IDS_MAX];
    char entity[WANDB_FIELD_MAX]; /* the run's entity, "" until upserted */
    int failures;                 /* tries failed in a row */
    int refusals;                 /* of which the last ones the server refused (4xx) */
    int64_t next_try_ms;
    int64_t seen_ms;              /* when a round last read it (the oldest is forgotten first) */
};

struct wandb_forward {
    struct control *ctl;
    char base[512];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    struct tracked tracked[TRACKED_MAX];
    int n_tracked;
};

/* The answer, up to RESPONSE_MAX bytes with its NUL: past that curl fails
 * the transfer and the reason says "answer too large". */
static size_t on_data(char *ptr, size_t size, size_t nmemb, void *ud)
{
    size_t n = size * nmemb;
    return growbuf_append(ud, ptr, n) ? 0 : n;
}

/* POSTs the JSON `payload` to url as api:KEY. Returns the parsed answer of
 * a 2xx response (NULL otherwise, with the reason in why: never the key;
 * *refused set when the server refused the call itself, a 4xx other than
 * 408 and 429, which trying again will not change). */
static json_t *post_json(const char *url, const char *key, json_t *payload, bool *refused,
                         char *why, size_t whycap)
{
    char *text = json_dumps(payload, JSON_COMPACT);
    CURL *h = curl_easy_init();
    struct growbuf b;
    growbuf_init(&b, RESPONSE_MAX);
    json_t *answer = NULL;
    if (!text || !h) {
        text_copy(why, whycap, "out of memory");
        goto out;
    }
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
    curl_easy_setopt(h, CURLOPT_USERNAME, "api");
    curl_easy_setopt(h, CURLOPT_PASSWORD, key);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, text);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, (long)CALL_TIMEOUT_S);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hdr);
    if (rc != CURLE_OK)
        text_printf(why, whycap, "%s",
                    b.err == GROWBUF_TOO_LARGE ? "answer too large" : curl_easy_strerror(rc));
    else if (status < 200 || status > 299) {
        text_printf(why, whycap, "HTTP %ld", status);
        *refused = status >= 400 && status <= 499 && status != 408 && status != 429;
    } else if (!(answer = json_loads(b.p ? b.p : "{}", 0, NULL)))
        text_copy(why, whycap, "the answer is not JSON");
out:
    curl_easy_cleanup(h);
    growbuf_free(&b);
    free(text);
    return answer;
}

/* The job's entry, seen at now_ms. When the table is full the entry least
 * recently seen is forgotten (it is upserted again if it returns); a round
 * reads fewer jobs than the table holds, so no job of the current round is. */
static struct tracked *tracked_of(struct wandb_forward *f, const char *job, int64_t now_ms)
{
    struct tracked *t = NULL;
    for (int i = 0; i < f->n_tracked && !t; i++)
        if (strcmp(f->tracked[i].job, job) == 0)
            t = &f->tracked[i];
    if (!t) {
        if (f->n_tracked < TRACKED_MAX) {
            t = &f->tracked[f->n_tracked++];
        } else {
            t = &f->tracked[0];
            for (int i = 1; i < f->n_tracked; i++)
                if (f->tracked[i].seen_ms < t->seen_ms)
                    t = &f->tracked[i];
        }
        memset(t, 0, sizeof *t);
        text_copy(t->job, sizeof t->job, job);
    }
    t->seen_ms = now_ms;
    return t;
}

static void tracked_forget(struct wandb_forward *f, struct tracked *t)
{
    *t = f->tracked[--f->n_tracked];
}

static const char UPSERT[] =
    "mutation UpsertBucket($name: String, $project: String, $entity: String, "
    "$displayName: String, $tags: [String!]) { upsertBucket(input: {name: $name, "
    "modelName: $project, entityName: $entity, displayName: $displayName, tags: $tags}) "
    "{ bucket { id name displayName project { name entity { name } } } inserted } }";

/* Makes or finds the job's run; sets t->entity. */
static bool upsert_run(struct wandb_forward *f, const struct store_job *j,
                       const struct job_wandb *w, const char *key, struct tracked *t,
                       bool *refused, char *why, size_t whycap)
{
    char url[600];
    text_printf(url, sizeof url, "%s/graphql", f->base);
    json_t *vars = json_pack("{ss ss ss}", "name", j->id, "project", w->project, "displayName",
                             w->name[0] ? w->name : j->id);
    if (w->entity[0])
        json_object_set_new(vars, "entity", json_string(w->entity));
    json_t *tags = json_array();
    for (int i = 0; i < w->n_tags; i++)
        json_array_append_new(tags, json_string(w->tags[i]));
    json_object_set_new(vars, "tags", tags);
    json_t *q = json_pack("{ss so}", "query", UPSERT, "variables", vars);
    json_t *a = post_json(url, key, q, refused, why, whycap);
    json_decref(q);
    if (!a)
        return false;
    const char *entity = NULL;
    json_t *err = json_object_get(a, "errors");
    if (json_array_size(err) > 0) {
        text_copy(why, whycap, "the server refused the run (GraphQL errors)");
        *refused = true;
    } else if (json_unpack(a, "{s:{s:{s:{s:{s:{s:s}}}}}}", "data", "upsertBucket", "bucket",
                         "project", "entity", "name", &entity) != 0 || !entity[0])
        text_copy(why, whycap, "the server's upsertBucket answer has no entity");
    else
        text_copy(t->entity, sizeof t->entity, entity);
    json_decref(a);
    return t->entity[0] != 0;
}

/* Sends the events after the cursor (at most EVENTS_PER_POST) and moves it.
 * On failure sets *refused when the account's own call was refused (its key,
 * its run) rather than the server or the store failing. */
static bool forward_job(struct wandb_forward *f, const struct store_cursor *c, struct tracked *t,
                        bool *refused, char *why, size_t whycap)
{
    struct store *st = f->ctl->store;
    struct store_job *j = malloc(sizeof *j);
    struct store_event *ev = malloc(sizeof *ev * EVENTS_PER_POST);
    char key[STORE_SETTING_MAX] = "";
    bool ok = false;
    if (!j || !ev) {
        text_copy(why, whycap, "out of memory");
        goto out;
    }
    enum alallo_err e = store_job_get(st, NULL, c->job, j);
    if (e) {
        text_printf(why, whycap, "cannot read the job (%s)", err_code(e));
        goto out;
    }
    struct job_wandb w;
    integrations_from_hyper(j->hyper, &w);
    if (!w.on) { /* nothing to send to: move past it */
        ok = store_cursor_put(st, c->job, KIND, c->event_seq, c->sent_lines) == ERR_OK;
        goto out;
    }
    if (store_account_setting_get(st, j->account, "wandb_api_key", key, sizeof key) != ERR_OK) {
        text_copy(why, whycap, "the account has no W&B API key");
        *refused = true;
        goto out;
    }
    if (!t->entity[0] && !upsert_run(f, j, &w, key, t, refused, why, whycap))
        goto out;

    int n = 0;
    bool more = false;
    e = store_event_list(st, c->job, c->sent_seq + 1 + EVENTS_PER_POST, EVENTS_PER_POST, ev, &n,
                         &more);
    if (e) {
        text_printf(why, whycap, "cannot read the job's events (%s)", err_code(e));
        goto out;
    }
    struct wandb_batch plan;
    if (!wandb_batch_plan(j, c->sent_seq, ev, n, &plan)) {
        json_decref(plan.lines);
        text_copy(why, whycap, "out of memory");
        goto out;
    }
    int64_t lines = (int64_t)json_array_size(plan.lines);
    if (lines == 0 && !plan.complete) {
        json_decref(plan.lines);
        ok = store_cursor_put(st, c->job, KIND, plan.last_seq, c->sent_lines) == ERR_OK;
        goto out;
    }
    json_t *body = json_pack("{s:{s:{s:I s:o}}}", "files", "wandb-history.jsonl", "offset",
                             (json_int_t)c->sent_lines, "content", plan.lines);
    if (plan.complete) {
        json_object_set_new(body, "complete", json_true());
        json_object_set_new(body, "exitcode", json_integer(j->status == JOB_SUCCEEDED ? 0 : 1));
    }
    char url[1200];
    if (!wandb_stream_url(f->base, t->entity, w.project, j->id, url, sizeof url)) {
        json_decref(body);
        text_copy(why, whycap, "the run's entity or project cannot name a URL path segment");
        goto out;
    }
    json_t *a = post_json(url, key, body, refused, why, whycap);
    json_decref(body);
    if (!a)
        goto out;
    json_decref(a);
    e = store_cursor_put(st, c->job, KIND, plan.last_seq, c->sent_lines + lines);
    if (e) {
        text_printf(why, whycap, "cannot move the cursor (%s)", err_code(e));
        goto out;
    }
    ok = true;
out:
    explicit_bzero(key, sizeof key);
    free(ev);
    free(j);
    return ok;
}

struct stop_note {
    char message[400];
    int64_t now_ms;
};

static enum alallo_err stop_note_cb(struct store_job *j, struct store_attempt *unused,
                                    struct store_writes *w, void *vctx)
{
    const struct stop_note *n = vctx;
    (void)j;
    (void)unused;
    return store_writes_event(w, n->now_ms, "warn", "message", n->message, NULL);
}

/* The job's last try failed: an event on the job says why, and its cursor
 * stops for good (STORE_CURSOR_STOPPED), so that it is not tried again. The
 * event is written first: a crash between the two means one more round of
 * tries after the restart, not a stop nobody was told of. */
static void stop_job(struct wandb_forward *f, const struct store_cursor *c, struct tracked *t,
                     const char *why)
{
    struct stop_note n = {.now_ms = clock_now_ms()};
    text_printf(n.message, sizeof n.message,
                "Metrics are no longer sent to W&B: %d tries in a row failed (last: %s).",
                t->failures, why);
    enum alallo_err e = store_job_update(f->ctl->store, c->job, NULL, stop_note_cb, &n);
    if (!e)
        e = store_cursor_put(f->ctl->store, c->job, KIND, STORE_CURSOR_STOPPED, c->sent_lines);
    if (e) {
        log_line("warn", "wandb: job %s: cannot stop its forwarding (%s); tried again later",
                 c->job, err_code(e));
        return;
    }
    log_line("warn", "wandb: job %s: forwarding stopped after %d tries (last: %s)", c->job,
             t->failures, why);
    tracked_forget(f, t);
}

static void round_once(struct wandb_forward *f)
{
    struct store_cursor *c = malloc(sizeof *c * PENDING_PER_ROUND);
    int n = 0;
    if (!c || store_cursor_pending(f->ctl->store, KIND, c, PENDING_PER_ROUND, &n) != ERR_OK)
        n = 0;
    int posts = 0;
    for (int i = 0; i < n && posts < POSTS_PER_ROUND; i++) {
        int64_t now = clock_mono_ms();
        struct tracked *t = tracked_of(f, c[i].job, now);
        if (now < t->next_try_ms)
            continue;
        posts++;
        char why[256] = "";
        bool refused = false;
        if (forward_job(f, &c[i], t, &refused, why, sizeof why)) {
            t->failures = 0;
            t->refusals = 0;
            t->next_try_ms = 0;
            continue;
        }
        t->failures++;
        t->refusals = refused ? t->refusals + 1 : 0;
        t->entity[0] = 0; /* upsert again next time: the server may have lost it */
        if (t->refusals >= LAST_TRY_REFUSED || t->failures >= LAST_TRY_OTHER) {
            stop_job(f, &c[i], t, why);
            continue;
        }
        int64_t wait = 1000;
        for (int k = 1; k < t->failures && wait < BACKOFF_MAX_MS; k++)
            wait *= 2;
        if (wait > BACKOFF_MAX_MS)
            wait = BACKOFF_MAX_MS;
        t->next_try_ms = now + wait;
        log_line("warn", "wandb: job %s: %s (try %d; next in %" PRId64 " ms)", c[i].job, why,
                 t->failures, wait);
    }
    free(c);
}

static void *forward_main(void *arg)
{
    struct wandb_forward *f = arg;
    pthread_mutex_lock(&f->mu);
    while (!f->stop) {
        pthread_mutex_unlock(&f->mu);
        if (control_leads(f->ctl))
            round_once(f);
        pthread_mutex_lock(&f->mu);
        if (f->stop)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 500 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&f->cv, &f->mu, &ts);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

int wandb_forward_start(struct control *ctl, const char *base_url, struct wandb_forward **out,
                        char *err, size_t errcap)
{
    *out = NULL;
    struct wandb_forward *f = calloc(1, sizeof *f);
    if (!f) {
        text_copy(err, errcap, "out of memory");
        return -1;
    }
    f->ctl = ctl;
    if (!text_copy(f->base, sizeof f->base, base_url)) {
        free(f);
        text_copy(err, errcap, "--wandb-url is too long");
        return -1;
    }
    size_t n = strlen(f->base);
    while (n > 0 && f->base[n - 1] == '/')
        f->base[--n] = 0;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    if (pthread_create(&f->thread, NULL, forward_main, f) != 0) {
        pthread_mutex_destroy(&f->mu);
        pthread_cond_destroy(&f->cv);
        free(f);
        text_copy(err, errcap, "cannot start the W&B forwarding thread");
        return -1;
    }
    *out = f;
    return 0;
}

void wandb_forward_stop(struct wandb_forward *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->mu);
    f->stop = 1;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->thread, NULL);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    free(f);
}
