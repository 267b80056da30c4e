/* res_webhooks.c - /v1/webhooks: an account's webhook endpoints.
 *   POST   /v1/webhooks {url, events}   register one; the answer holds its
 *                                       secret, shown this once
 *   GET    /v1/webhooks                 the account's endpoints (no secrets)
 *   DELETE /v1/webhooks/{id}            remove one (and its pending deliveries)
 *   GET    /v1/webhooks/{id}/deliveries its newest deliveries and their answers
 * Events and delivery: docs/api.md, control/webhook_events.h and
 * control/webhook_delivery.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/handlers.h"
#include "control/webhook_events.h"
#include "control/webhooks.h"
#include "core/ids.h"
#include "core/text.h"

#define DELIVERIES_SHOWN 100
/* Listed at most; more than the cap only where an older alallo let more
 * in (has_more then says so). */
#define WEBHOOKS_LISTED 100

static json_t *shape_webhook(const struct store_webhook *w, bool with_secret)
{
    json_t *events = json_array();
    const char *p = w->events;
    while (*p) {
        size_t n = strcspn(p, ",");
        json_array_append_new(events, json_stringn(p, n));
        p += n + (p[n] == ',');
    }
    json_t *o = json_pack("{s:s,s:s,s:s,s:o,s:I}", "id", w->id, "object", "webhook", "url",
                          w->url, "events", events, "created_at",
                          (json_int_t)(w->created_ms / 1000));
    if (o && with_secret)
        json_object_set_new(o, "secret", json_string(w->secret));
    return o;
}

/* "http://" or "https://" then a host; no spaces or control bytes. */
static bool url_ok(const char *url)
{
    size_t skip = strncasecmp(url, "http://", 7) == 0    ? 7
                  : strncasecmp(url, "https://", 8) == 0 ? 8
                                                         : 0;
    if (!skip || !url[skip] || url[skip] == '/')
        return false;
    for (const unsigned char *c = (const unsigned char *)url; *c; c++)
        if (*c <= 0x20 || *c >= 0x7f)
            return false;
    return true;
}

/* The events array into w->events ("a,b"); false with res set. */
static bool parse_events(json_t *events, struct store_webhook *w, struct http_response *res)
{
    w->events[0] = '\0';
    if (!events)
        return true; /* every event */
    if (!json_is_array(events)) {
        api_error(res, ERR_INVALID, "events must be an array of event types.", "events");
        return false;
    }
    size_t i, used = 0;
    json_t *v;
    json_array_foreach(events, i, v)
    {
        const char *t = json_string_value(v);
        if (!t || !webhook_event_type_known(t)) {
            char msg[160];
            text_printf(msg, sizeof msg,
                        "events[%zu] is not an event type: fine_tuning.job.succeeded, "
                        "fine_tuning.job.failed, fine_tuning.job.cancelled, "
                        "alallo.fine_tuning.job.status or alallo.fine_tuning.job.checkpoint.",
                        i);
            api_error(res, ERR_INVALID, msg, "events");
            return false;
        }
        int n = snprintf(w->events + used, sizeof w->events - used, "%s%s", used ? "," : "", t);
        if (n < 0 || (size_t)n >= sizeof w->events - used) {
            api_error(res, ERR_INVALID, "events lists too many types.", "events");
            return false;
        }
        used += (size_t)n;
    }
    return true;
}

void webhooks_create(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    json_t *body = api_body_object(req, res);
    if (!body)
        return;
    struct store_webhook w = {0};
    const char *url = json_string_value(json_object_get(body, "url"));
    if (!url || strlen(url) >= sizeof w.url || !url_ok(url)) {
        api_error(res, ERR_INVALID, "url must be an http:// or https:// URL (under 1024 bytes).",
                  "url");
        goto out;
    }
    if (!parse_events(json_object_get(body, "events"), &w, res))
        goto out;
    snprintf(w.url, sizeof w.url, "%s", url);
    snprintf(w.account, sizeof w.account, "%s", req->account.id);
    char why[200] = "";
    enum alallo_err e = control_webhook_create(srv->ctl, &w, why, sizeof why);
    if (e == ERR_INVALID && why[0])
        api_error(res, e, why, "url");
    else if (e)
        api_store_error(res, e);
    else
        api_json(res, 200, shape_webhook(&w, true));
out:
    json_decref(body);
}

void webhooks_list(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    struct store_webhook *rows = calloc(WEBHOOKS_LISTED + 1, sizeof *rows);
    int n = 0;
    enum alallo_err e = rows ? store_webhook_list(srv->ctl->store, req->account.id, rows,
                                                  WEBHOOKS_LISTED + 1, &n)
                             : ERR_NOMEM;
    if (e) {
        api_store_error(res, e);
    } else {
        json_t *data = json_array();
        for (int i = 0; i < n && i < WEBHOOKS_LISTED; i++)
            json_array_append_new(data, shape_webhook(&rows[i], false));
        api_json(res, 200, json_pack("{s:s,s:o,s:b}", "object", "list", "data", data,
                                     "has_more", n > WEBHOOKS_LISTED));
    }
    free(rows);
}

static void not_found(struct http_response *res, const char *id)
{
    char msg[HTTP_VALUE_MAX + 32];
    text_printf(msg, sizeof msg, "No such webhook: %s.", id);
    api_error(res, ERR_NOT_FOUND, msg, "id");
}

void webhooks_delete(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    const char *id = req->params[0];
    enum alallo_err e = control_webhook_delete(srv->ctl, req->account.id, id);
    if (e == ERR_NOT_FOUND)
        not_found(res, id);
    else if (e)
        api_store_error(res, e);
    else
        api_json(res, 200, json_pack("{s:s,s:s,s:b}", "id", id, "object", "webhook", "deleted", 1));
}

static const char *state_name(enum store_delivery_state s)
{
    return s == STORE_DELIVERY_DONE ? "delivered" : s == STORE_DELIVERY_GAVE_UP ? "failed"
                                                                                 : "pending";
}

void webhooks_deliveries(struct api_server *srv, struct http_request *req,
                         struct http_response *res)
{
    const char *id = req->params[0];
    struct store_webhook w;
    enum alallo_err e = ids_valid(id) ? store_webhook_get(srv->ctl->store, req->account.id, id, &w)
                                      : ERR_NOT_FOUND;
    if (e == ERR_NOT_FOUND) {
        not_found(res, id);
        return;
    }
    struct store_delivery *rows = NULL;
    int n = 0;
    if (!e) {
        rows = calloc(DELIVERIES_SHOWN, sizeof *rows);
        e = rows ? store_delivery_list(srv->ctl->store, w.id, rows, DELIVERIES_SHOWN, &n)
                 : ERR_NOMEM;
    }
    if (e) {
        api_store_error(res, e);
        free(rows);
        return;
    }
    json_t *data = json_array();
    for (int i = 0; i < n; i++) {
        const struct store_delivery *d = &rows[i];
        json_t *o = json_pack(
            "{s:s,s:s,s:s,s:s,s:s,s:i,s:I,s:s,s:I,s:I}", "id", d->event_id, "object",
            "webhook.delivery", "job", d->job, "type", d->type, "status", state_name(d->state),
            "attempts", d->attempts, "last_status", (json_int_t)d->last_status, "last_answer",
            d->last_answer, "created_at", (json_int_t)(d->created_ms / 1000), "delivered_at",
            (json_int_t)(d->delivered_ms / 1000));
        json_object_set_new(o, "event", json_loads(d->body, 0, NULL));
        json_array_append_new(data, o);
    }
    api_json(res, 200, json_pack("{s:s,s:o,s:b}", "object", "list", "data", data, "has_more",
                                 n == DELIVERIES_SHOWN));
    free(rows);
}
