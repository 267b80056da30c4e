/* webhook_delivery.c - the sender of the webhook outbox
 * (webhook_delivery.h). */
#include "control/webhook_delivery.h"

#include <curl/curl.h>
#include <netinet/in.h>
#include <pthread.h>
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

#define DUE_BATCH 32
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

/* One signed POST of d to url. Fills d's last_status and last_answer. */
static void post_once(const struct webhook_allow *allow, const char *url, const char *secret,
                      struct store_delivery *d, int64_t now_ms)
{
    char sig[WEBHOOK_SIGNATURE_MAX];
    int64_t ts = now_ms / 1000;
    d->last_status = 0;
    if (webhook_sign(secret, d->event_id, ts, d->body, strlen(d->body), sig) != 0) {
        snprintf(d->last_answer, sizeof d->last_answer, "the endpoint's secret is unusable");
        return;
    }
    CURL *h = curl_easy_init();
    if (!h) {
        snprintf(d->last_answer, sizeof d->last_answer, "no HTTP client");
        return;
    }
    char hid[IDS_MAX + 16], hts[48], hsig[WEBHOOK_SIGNATURE_MAX + 24];
    snprintf(hid, sizeof hid, "webhook-id: %s", d->event_id);
    snprintf(hts, sizeof hts, "webhook-timestamp: %lld", (long long)ts);
    snprintf(hsig, sizeof hsig, "webhook-signature: %s", sig);
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    hdr = curl_slist_append(hdr, hid);
    hdr = curl_slist_append(hdr, hts);
    hdr = curl_slist_append(hdr, hsig);
    struct gate gate = {.allow = allow};
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_PROXY, ""); /* never through a proxy of the environment */
    curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, open_checked);
    curl_easy_setopt(h, CURLOPT_OPENSOCKETDATA, &gate);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, d->body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(d->body));
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)WEBHOOK_TIMEOUT_MS);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "alallo-webhooks");
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, drop_body);
    CURLcode rc = curl_easy_perform(h);
    long code = 0;
    if (rc == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    if (code > 0) {
        d->last_status = (int)code;
        snprintf(d->last_answer, sizeof d->last_answer, "answered %ld", code);
    } else {
        no_answer(rc, &gate, d->last_answer, sizeof d->last_answer);
    }
    curl_slist_free_all(hdr);
    curl_easy_cleanup(h);
}

int webhook_send_due(struct control *ctl, int64_t now_ms)
{
    struct store_delivery *due = calloc(DUE_BATCH, sizeof *due);
    int n = 0;
    if (!due)
        return 0;
    if (store_delivery_due(ctl->store, now_ms, due, DUE_BATCH, &n) != ERR_OK) {
        log_line("warn", "webhooks: reading the outbox: %s", store_last_error());
        free(due);
        return 0;
    }
    for (int i = 0; i < n; i++) {
        struct store_delivery *d = &due[i];
        struct store_webhook wh;
        if (store_webhook_get(ctl->store, NULL, d->webhook, &wh) != ERR_OK)
            continue; /* deleted meanwhile: its deliveries went with it */
        int64_t t = clock_now_ms();
        post_once(&ctl->cfg.webhook_allow, wh.url, wh.secret, d, t);
        d->attempts++;
        t = clock_now_ms();
        if (d->last_status >= 200 && d->last_status < 300) {
            d->state = STORE_DELIVERY_DONE;
            d->delivered_ms = t;
        } else {
            int64_t next = webhook_next_try_ms(d->attempts, d->created_ms, t);
            if (next < 0) {
                d->state = STORE_DELIVERY_GAVE_UP;
                log_line("warn", "webhooks: gave up %s to %s after %d tries", d->event_id,
                         wh.id, d->attempts);
            } else {
                d->next_ms = next;
            }
        }
        if (store_delivery_record(ctl->store, d) != ERR_OK)
            log_line("warn", "webhooks: recording %s: %s", d->event_id, store_last_error());
    }
    free(due);
    return n;
}

struct webhook_sender {
    struct control *ctl;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
};

static void *run(void *arg)
{
    struct webhook_sender *ws = arg;
    pthread_mutex_lock(&ws->mu);
    while (!ws->stop) {
        pthread_mutex_unlock(&ws->mu);
        int tried = control_leads(ws->ctl) ? webhook_send_due(ws->ctl, clock_now_ms()) : 0;
        pthread_mutex_lock(&ws->mu);
        if (tried == DUE_BATCH || ws->stop)
            continue;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += POLL_MS * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&ws->cv, &ws->mu, &ts);
    }
    pthread_mutex_unlock(&ws->mu);
    return NULL;
}

struct webhook_sender *webhook_sender_start(struct control *ctl)
{
    struct webhook_sender *ws = calloc(1, sizeof *ws);
    if (!ws)
        return NULL;
    ws->ctl = ctl;
    pthread_mutex_init(&ws->mu, NULL);
    pthread_cond_init(&ws->cv, NULL);
    if (pthread_create(&ws->thread, NULL, run, ws) != 0) {
        pthread_mutex_destroy(&ws->mu);
        pthread_cond_destroy(&ws->cv);
        free(ws);
        return NULL;
    }
    return ws;
}

void webhook_sender_stop(struct webhook_sender *ws)
{
    if (!ws)
        return;
    pthread_mutex_lock(&ws->mu);
    ws->stop = 1;
    pthread_cond_signal(&ws->cv);
    pthread_mutex_unlock(&ws->mu);
    pthread_join(ws->thread, NULL);
    pthread_mutex_destroy(&ws->mu);
    pthread_cond_destroy(&ws->cv);
    free(ws);
}
