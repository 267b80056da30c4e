/* res_job_views.c - what a job shows besides itself: its events (OpenAI
 * shape), its checkpoints, and the training log of its current or last
 * run, whole or followed as it grows. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/handlers.h"
#include "api/paging.h"
#include "api/shapes.h"
#include "core/growbuf.h"
#include "core/ids.h"
#include "core/job.h"
#include "core/text.h"

#define NO_LOG_YET "No log yet. It appears once training starts."
#define LOG_READ_BATCH 256
#define LOG_MAX_BYTES (32 << 20)
#define FOLLOW_POLL_MS 250

static bool load_job(struct api_server *srv, struct http_request *req, struct http_response *res,
                     struct store_job *j)
{
    const char *id = req->params[0];
    enum alallo_err e = ids_valid(id) ? store_job_get(srv->ctl->store, req->account.id, id, j)
                                      : ERR_NOT_FOUND;
    if (e == ERR_NOT_FOUND) {
        char msg[HTTP_VALUE_MAX + 32];
        text_printf(msg, sizeof msg, "No such job: %s.", id);
        api_error(res, ERR_NOT_FOUND, msg, "id");
    } else if (e) {
        api_store_error(res, e);
    }
    return e == ERR_OK;
}

void jobs_events(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    struct store_job *j = malloc(sizeof *j);
    struct store_event *ev = calloc(STORE_LIST_MAX, sizeof *ev);
    if (!j || !ev) {
        api_error(res, ERR_NOMEM, NULL, NULL);
        goto out;
    }
    if (!load_job(srv, req, res, j))
        goto out;
    int limit = paging_limit(req, res, 20);
    if (limit < 0)
        goto out;
    const char *after = http_query(req, "after");
    int64_t before = 0;
    if (after) {
        before = shape_event_seq(j, after);
        if (!before) {
            api_error(res, ERR_INVALID, "after must be the id of one of this job's events.",
                      "after");
            goto out;
        }
    }
    int n;
    bool more;
    enum alallo_err e = store_event_list(srv->ctl->store, j->id, before, limit, ev, &n, &more);
    if (e) {
        api_store_error(res, e);
        goto out;
    }
    json_t *data = json_array();
    for (int i = 0; i < n && data; i++)
        json_array_append_new(data, shape_event(j, &ev[i]));
    api_json(res, 200, shape_list(data, more));
out:
    free(j);
    free(ev);
}

/* Which of a job's checkpoints (newest first, n of them) are listed, kept
 * in place at the front of ck: the newest (a succeeded job's final one, a
 * running job's latest) and the newest CHECKPOINTS_LISTED_EPOCHS that end
 * an epoch. The others were made for recovery only (every so many steps
 * or minutes). Returns how many are kept. */
#define CHECKPOINTS_LISTED_EPOCHS 3
static int listed_checkpoints(const struct store_job *j, struct store_checkpoint *ck, int n)
{
    int kept = 0, epochs = 0;
    for (int i = 0; i < n; i++) {
        bool epoch = job_step_ends_epoch(j->examples, j->batch_size, ck[i].step) &&
                     epochs < CHECKPOINTS_LISTED_EPOCHS;
        if (epoch)
            epochs++;
        if (i == 0 || epoch)
            ck[kept++] = ck[i];
    }
    return kept;
}

void jobs_checkpoints(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    struct store_job *j = malloc(sizeof *j);
    struct store_checkpoint *ck = calloc(STORE_LIST_MAX + 1, sizeof *ck);
    if (!j || !ck) {
        api_error(res, ERR_NOMEM, NULL, NULL);
        goto out;
    }
    if (!load_job(srv, req, res, j))
        goto out;
    int limit = paging_limit(req, res, 10);
    if (limit < 0)
        goto out;
    int n;
    enum alallo_err e = store_checkpoint_list(srv->ctl->store, j->id, ck, STORE_LIST_MAX + 1, &n);
    if (e) {
        api_store_error(res, e);
        goto out;
    }
    n = listed_checkpoints(j, ck, n);
    /* Newest first; `after` is a checkpoint id from an earlier page. */
    int start = 0;
    const char *after = http_query(req, "after");
    if (after) {
        start = -1;
        for (int i = 0; i < n; i++) {
            json_t *c = shape_checkpoint(j, &ck[i]);
            bool same = c && strcmp(json_string_value(json_object_get(c, "id")), after) == 0;
            json_decref(c);
            if (same) {
                start = i + 1;
                break;
            }
        }
        if (start < 0) {
            api_error(res, ERR_INVALID, "after must be the id of one of this job's checkpoints.",
                      "after");
            goto out;
        }
    }
    json_t *data = json_array();
    int i = start;
    for (; i < n && i - start < limit && data; i++)
        json_array_append_new(data, shape_checkpoint(j, &ck[i]));
    api_json(res, 200, shape_list(data, i < n));
out:
    free(j);
    free(ck);
}

/* ---- the training log ------------------------------------------------- */

/* Appends lines of `attempt` (NULL: any) after *seq; advances *seq. */
static enum alallo_err read_lines(struct store *s, const char *job, const char *attempt,
                                  int64_t *seq, struct growbuf *b, struct store_log_line *lines)
{
    for (;;) {
        int n;
        enum alallo_err e = store_log_read(s, job, attempt, *seq, lines, LOG_READ_BATCH, &n);
        if (e)
            return e;
        for (int i = 0; i < n; i++) {
            if (growbuf_puts(b, lines[i].line) || growbuf_append(b, "\n", 1))
                return ERR_TOO_LARGE;
            *seq = lines[i].seq;
        }
        if (n < LOG_READ_BATCH)
            return ERR_OK;
    }
}

struct follow {
    struct api_server *srv;
    char job[IDS_MAX];
    char account[IDS_MAX];
    int64_t seq;
    bool any_line;
    bool done;
    struct growbuf pending; /* at most LOG_MAX_BYTES */
    size_t sent;
    struct store_log_line *lines;
};

static void follow_free(void *vctx)
{
    struct follow *f = vctx;
    growbuf_free(&f->pending);
    free(f->lines);
    free(f);
}

static void nap_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Streams new lines of the job (any attempt) until it has ended and every
 * line is sent; blocks between polls (each connection has its thread). */
static ssize_t follow_read(void *vctx, char *buf, size_t max)
{
    struct follow *f = vctx;
    for (;;) {
        if (f->sent < f->pending.len) {
            size_t n = f->pending.len - f->sent;
            if (n > max)
                n = max;
            memcpy(buf, f->pending.p + f->sent, n);
            f->sent += n;
            return (ssize_t)n;
        }
        growbuf_clear(&f->pending);
        f->sent = 0;
        if (f->done || atomic_load(&f->srv->stopping))
            return -1;
        struct store_job j;
        if (store_job_get(f->srv->ctl->store, f->account, f->job, &j))
            return -1;
        bool ended = job_status_is_terminal(j.status);
        if (read_lines(f->srv->ctl->store, f->job, NULL, &f->seq, &f->pending, f->lines))
            return -1;
        if (f->pending.len) {
            f->any_line = true;
        } else if (ended) {
            f->done = true;
            if (!f->any_line && growbuf_puts(&f->pending, NO_LOG_YET "\n"))
                return -1;
        } else {
            nap_ms(FOLLOW_POLL_MS);
        }
    }
}

void jobs_log(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    struct store_job *j = malloc(sizeof *j);
    struct store_log_line *lines = calloc(LOG_READ_BATCH, sizeof *lines);
    struct growbuf b;
    growbuf_init(&b, LOG_MAX_BYTES);
    if (!j || !lines) {
        api_error(res, ERR_NOMEM, NULL, NULL);
        goto out;
    }
    if (!load_job(srv, req, res, j))
        goto out;
    char attempt[IDS_MAX];
    enum alallo_err e = store_log_last_attempt(srv->ctl->store, j->id, attempt);
    int64_t seq = 0;
    if (!e && attempt[0])
        e = read_lines(srv->ctl->store, j->id, attempt, &seq, &b, lines);
    if (e) {
        api_store_error(res, e);
        goto out;
    }
    const char *follow = http_query(req, "follow");
    if (follow && (strcmp(follow, "1") == 0 || strcmp(follow, "true") == 0)) {
        struct follow *f = calloc(1, sizeof *f);
        if (!f) {
            api_error(res, ERR_NOMEM, NULL, NULL);
            goto out;
        }
        f->srv = srv;
        text_copy(f->job, sizeof f->job, j->id);
        text_copy(f->account, sizeof f->account, req->account.id);
        f->seq = seq;
        f->any_line = b.len > 0;
        f->pending = b; /* the follow owns the text now */
        f->lines = lines;
        growbuf_init(&b, LOG_MAX_BYTES);
        lines = NULL;
        http_response_free(res);
        res->status = 200;
        text_copy(res->content_type, sizeof res->content_type, "text/plain; charset=utf-8");
        res->stream = follow_read;
        res->stream_ctx = f;
        res->stream_free = follow_free;
        goto out;
    }
    if (b.len == 0)
        http_respond(res, 200, "text/plain; charset=utf-8", NO_LOG_YET, strlen(NO_LOG_YET));
    else
        http_respond(res, 200, "text/plain; charset=utf-8", b.p, b.len);
out:
    free(j);
    free(lines);
    growbuf_free(&b);
}
