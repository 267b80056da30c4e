/* webhook_delivery.c - the sender of the webhook outbox
 * (webhook_delivery.h). */
#include "control/webhook_delivery.h"

#include <curl/curl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "control/leadership.h"
#include "control/webhook_target.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/webhook_sign.h"

/* rows read per look: more than can be in flight, so that the tries in
 * flight (still pending in the store) never hide the others */
#define DUE_BATCH (4 * WEBHOOK_IN_FLIGHT_MAX)
#define POLL_MS 250

int64_t webhook_next_try_ms(int attempts, int64_t created_ms, int64_t now_ms)
{
    if (now_ms - created_ms >= WEBHOOK_GIVE_UP_MS)
        return -1;
    int64_t wait = WEBHOOK_RETRY_BASE_MS;
    for (int i = 1; i < attempts && wait < WEBHOOK_RETRY_MAX_MS; i++)
        wait *= 2;
    if (wait > WEBHOOK_RETRY_MAX_MS)
        wait = WEBHOOK_RETRY_MAX_MS;
    /* the last try is at the day's end, not past it */
    int64_t last = created_ms + WEBHOOK_GIVE_UP_MS;
    return now_ms + wait < last ? now_ms + wait : last;
}

/* A receiver's answer is read and dropped: only its status is kept, so
 * a webhook cannot be used to read what an address answers. */
static size_t drop_body(char *p, size_t size, size_t nmemb, void *ctx)
{
    (void)p;
    (void)ctx;
    return size * nmemb;
}

/* What a try may connect to: the address rule, checked on every address
 * the host resolved to, just before the connection is made. */
struct gate {
    const struct webhook_allow *allow;
    const char *refused; /* the kind of the first address refused, or NULL */
};

static curl_socket_t open_checked(void *ctx, curlsocktype purpose, struct curl_sockaddr *a)
{
    struct gate *g = ctx;
    const unsigned char *addr = NULL;
    if (purpose == CURLSOCKTYPE_IPCXN && a->family == AF_INET)
        addr = (const unsigned char *)&((const struct sockaddr_in *)(void *)&a->addr)->sin_addr;
    else if (purpose == CURLSOCKTYPE_IPCXN && a->family == AF_INET6)
        addr = (const unsigned char *)&((const struct sockaddr_in6 *)(void *)&a->addr)->sin6_addr;
    const char *kind = addr ? webhook_addr_refused(g->allow, a->family, addr) : "reserved";
    if (kind) {
        if (!g->refused)
            g->refused = kind;
        return CURL_SOCKET_BAD;
    }
    return socket(a->family, a->socktype, a->protocol);
}

/* Our own words for a try that got no answer (never the receiver's). */
static void no_answer(CURLcode rc, const struct gate *g, char *out, size_t cap)
{
    if (g->refused)
        snprintf(out, cap, "refused: the host's address is internal (%s); see docs/security.md",
                 g->refused);
    else if (rc == CURLE_OPERATION_TIMEDOUT)
        snprintf(out, cap, "no answer within %d s", WEBHOOK_TIMEOUT_MS / 1000);
    else if (rc == CURLE_COULDNT_RESOLVE_HOST)
        snprintf(out, cap, "the host name did not resolve");
    else if (rc == CURLE_COULDNT_CONNECT)
        snprintf(out, cap, "the connection was refused");
    else if (rc == CURLE_SSL_CONNECT_ERROR || rc == CURLE_PEER_FAILED_VERIFICATION)
        snprintf(out, cap, "the TLS handshake failed");
    else
        snprintf(out, cap, "no answer (the connection failed)");
}

int webhook_pick(const struct store_delivery *due, int n, const struct store_delivery *const *flying,
                 int n_flying, int *pick)
{
    int picked = 0;
    for (int i = 0; i < n && n_flying + picked < WEBHOOK_IN_FLIGHT_MAX; i++) {
        const struct store_delivery *d = &due[i];
        int account = 0, endpoint = 0;
        bool already = false;
        for (int k = 0; k < n_flying + picked; k++) {
            const struct store_delivery *o = k < n_flying ? flying[k] : &due[pick[k - n_flying]];
            already = already || o->seq == d->seq;
            account += strcmp(o->account, d->account) == 0;
            endpoint += strcmp(o->webhook, d->webhook) == 0;
        }
        if (!already && account < WEBHOOK_PER_ACCOUNT && endpoint < WEBHOOK_PER_ENDPOINT)
            pick[picked++] = i;
    }
    return picked;
}

/* One try in flight: its delivery, what curl reads while it runs. */
struct flight {
    CURL *h; /* NULL: this slot is free */
    struct curl_slist *hdr;
    struct gate gate;
    struct store_delivery d;
};

struct webhook_sender {
    struct control *ctl;
    pthread_t thread;
    atomic_int stop;
    CURLM *multi;
    struct flight fl[WEBHOOK_IN_FLIGHT_MAX];
    int n_flying;
    struct store_delivery due[DUE_BATCH];
};

/* Records the try of d that just ended (d's last_status and last_answer
 * set): delivered, tried again later, or given up. */
static void record(struct control *ctl, struct store_delivery *d)
{
    int64_t t = clock_now_ms();
    d->attempts++;
    if (d->last_status >= 200 && d->last_status < 300) {
        d->state = STORE_DELIVERY_DONE;
        d->delivered_ms = t;
    } else {
        int64_t next = webhook_next_try_ms(d->attempts, d->created_ms, t);
        if (next < 0) {
            d->state = STORE_DELIVERY_GAVE_UP;
            log_line("warn", "webhooks: gave up %s to %s after %d tries", d->event_id,
                     d->webhook, d->attempts);
        } else {
            d->next_ms = next;
        }
    }
    if (store_delivery_record(ctl->store, d) != ERR_OK)
        log_line("warn", "webhooks: recording %s: %s", d->event_id, store_last_error());
}

/* Starts a signed POST of f->d to url in a free slot f. false (f stays
 * free, d's last_answer says why) when it could not start. */
static bool start(struct webhook_sender *ws, struct flight *f, const char *url, const char *secret,
                  int64_t now_ms)
{
    struct store_delivery *d = &f->d;
    char sig[WEBHOOK_SIGNATURE_MAX];
    int64_t ts = now_ms / 1000;
    d->last_status = 0;
    if (webhook_sign(secret, d->event_id, ts, d->body, strlen(d->body), sig) != 0) {
        snprintf(d->last_answer, sizeof d->last_answer, "the endpoint's secret is unusable");
        return false;
    }
    f->h = curl_easy_init();
    if (!f->h) {
        snprintf(d->last_answer, sizeof d->last_answer, "no HTTP client");
        return false;
    }
    char hid[IDS_MAX + 16], hts[48], hsig[WEBHOOK_SIGNATURE_MAX + 24];
    snprintf(hid, sizeof hid, "webhook-id: %s", d->event_id);
    snprintf(hts, sizeof hts, "webhook-timestamp: %lld", (long long)ts);
    snprintf(hsig, sizeof hsig, "webhook-signature: %s", sig);
    f->hdr = curl_slist_append(NULL, "Content-Type: application/json");
    f->hdr = curl_slist_append(f->hdr, hid);
    f->hdr = curl_slist_append(f->hdr, hts);
    f->hdr = curl_slist_append(f->hdr, hsig);
    f->gate = (struct gate){.allow = &ws->ctl->cfg.webhook_allow};
    CURL *h = f->h;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_PROXY, ""); /* never through a proxy of the environment */
    curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, open_checked);
    curl_easy_setopt(h, CURLOPT_OPENSOCKETDATA, &f->gate);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, f->hdr);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, d->body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(d->body));
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)WEBHOOK_TIMEOUT_MS);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "alallo-webhooks");
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, drop_body);
    curl_easy_setopt(h, CURLOPT_PRIVATE, f);
    if (curl_multi_add_handle(ws->multi, h) != CURLM_OK) {
        curl_slist_free_all(f->hdr);
        curl_easy_cleanup(h);
        f->h = NULL;
        snprintf(d->last_answer, sizeof d->last_answer, "no HTTP client");
        return false;
    }
    ws->n_flying++;
    return true;
}

static void end_flight(struct webhook_sender *ws, struct flight *f)
{
    curl_multi_remove_handle(ws->multi, f->h);
    curl_slist_free_all(f->hdr);
    curl_easy_cleanup(f->h);
    f->h = NULL;
    ws->n_flying--;
}

/* Starts the due deliveries webhook_pick() chooses, while slots are free. */
static void start_due(struct webhook_sender *ws, int64_t now_ms)
{
    int n = 0;
    if (store_delivery_due(ws->ctl->store, now_ms, ws->due, DUE_BATCH, &n) != ERR_OK) {
        log_line("warn", "webhooks: reading the outbox: %s", store_last_error());
        return;
    }
    const struct store_delivery *flying[WEBHOOK_IN_FLIGHT_MAX];
    int n_flying = 0;
    for (int i = 0; i < WEBHOOK_IN_FLIGHT_MAX; i++)
        if (ws->fl[i].h)
            flying[n_flying++] = &ws->fl[i].d;
    int pick[DUE_BATCH];
    int picked = webhook_pick(ws->due, n, flying, n_flying, pick);
    for (int k = 0, slot = 0; k < picked; k++) {
        while (ws->fl[slot].h)
            slot++; /* picked <= the free slots */
        struct flight *f = &ws->fl[slot];
        f->d = ws->due[pick[k]];
        struct store_webhook wh;
        if (store_webhook_get(ws->ctl->store, NULL, f->d.webhook, &wh) != ERR_OK)
            continue; /* deleted meanwhile: its deliveries went with it */
        if (!start(ws, f, wh.url, wh.secret, clock_now_ms()))
            record(ws->ctl, &f->d);
    }
}

/* Records every try that has ended. Returns how many. */
static int reap(struct webhook_sender *ws)
{
    int ended = 0, left;
    CURLMsg *m;
    while ((m = curl_multi_info_read(ws->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        void *priv = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &priv);
        struct flight *f = priv;
        CURLcode rc = m->data.result;
        long code = 0;
        if (rc == CURLE_OK)
            curl_easy_getinfo(f->h, CURLINFO_RESPONSE_CODE, &code);
        if (code > 0) {
            f->d.last_status = (int)code;
            snprintf(f->d.last_answer, sizeof f->d.last_answer, "answered %ld", code);
        } else {
            no_answer(rc, &f->gate, f->d.last_answer, sizeof f->d.last_answer);
        }
        end_flight(ws, f);
        record(ws->ctl, &f->d);
        ended++;
    }
    return ended;
}

static void *run(void *arg)
{
    struct webhook_sender *ws = arg;
    int64_t looked = 0;
    bool look = true;
    while (!atomic_load(&ws->stop)) {
        int64_t now = clock_now_ms();
        if ((look || now - looked >= POLL_MS) && ws->n_flying < WEBHOOK_IN_FLIGHT_MAX &&
            control_leads(ws->ctl)) {
            start_due(ws, now);
            looked = now;
            look = false;
        }
        int running;
        curl_multi_perform(ws->multi, &running);
        /* a try that ended frees a slot, and its job's next event may be due */
        if (reap(ws))
            look = true;
        else
            curl_multi_poll(ws->multi, NULL, 0, POLL_MS, NULL);
    }
    /* Tries still in flight are dropped unrecorded: they stay pending and
     * are sent again (at least once; receivers deduplicate by webhook-id). */
    for (int i = 0; i < WEBHOOK_IN_FLIGHT_MAX; i++)
        if (ws->fl[i].h)
            end_flight(ws, &ws->fl[i]);
    return NULL;
}

struct webhook_sender *webhook_sender_start(struct control *ctl)
{
    struct webhook_sender *ws = calloc(1, sizeof *ws);
    if (!ws)
        return NULL;
    ws->ctl = ctl;
    atomic_init(&ws->stop, 0);
    ws->multi = curl_multi_init();
    if (!ws->multi) {
        free(ws);
        return NULL;
    }
    if (pthread_create(&ws->thread, NULL, run, ws) != 0) {
        curl_multi_cleanup(ws->multi);
        free(ws);
        return NULL;
    }
    return ws;
}

void webhook_sender_stop(struct webhook_sender *ws)
{
    if (!ws)
        return;
    atomic_store(&ws->stop, 1);
    curl_multi_wakeup(ws->multi);
    pthread_join(ws->thread, NULL);
    curl_multi_cleanup(ws->multi);
    free(ws);
}
