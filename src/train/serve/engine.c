/* engine.c - the inference engine's loop: a local socket, one connection
 * per request, one batch step per turn of the loop (see engine.h). */
#include "train/serve/engine.h"

#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/keys.h"

#include "train/run/batcher.h"
#include "train/serve/logprobs.h"
#include "train/serve/model_lru.h"
#include "train/tokenizer/tokenizer.h"

#define REQUEST_MAX (4 << 20) /* bytes of one request line */

enum req_state { READING, QUEUED, RUNNING };

struct request {
    int fd;
    enum req_state state;
    char account[64];
    char *buf;
    size_t len, cap;
    bool stream;
    bool gone; /* done with: the client left, or the request failed */
    bool left; /* the client closed its end, or a write to it failed */
    bool stepped; /* this turn of the loop */
    struct lru_entry *base, *adapter;
    struct batch_seq seq;
    int lp_sent; /* answer tokens whose log-probabilities went with a delta */
    bool ids;         /* the prompt came as token ids ("prompt_ids") */
    bool prompt_sent; /* streamed: the prompt's line went (prompt_line) */
    long tokens;
    long long since_ms; /* accepted at (a TCP client's line has a limit) */
    struct request *next;
};

struct engine {
    int listen_fd;
    const char *key;   /* the hash of the key every request must carry, or NULL */
    char key_hash[KEYS_HASH_HEX];
    size_t max_model_bytes;
    struct model_lru *models;
    struct admission *adm;
    struct batcher *batcher;
    struct request *reqs;
    int n_reqs;
    unsigned long long generated, steps;
    unsigned long long cancelled; /* requests whose client went away first */
};

static volatile sig_atomic_t stopping;

static long long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void on_stop(int sig)
{
    (void)sig;
    stopping = 1;
}

/* Writes one JSON line to the request's client; a failure marks it gone. */
static void send_line(struct request *r, json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s) {
        r->gone = true;
        return;
    }
    if (r->left) {
        free(s);
        return;
    }
    size_t len = strlen(s);
    s[len++] = '\n'; /* json_dumps's terminator becomes the line's end */
    for (size_t off = 0; off < len && !r->left;) {
        ssize_t k = send(r->fd, s + off, len - off, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            r->gone = r->left = true;
        else
            off += (size_t)k;
    }
    free(s);
}

static void send_error(struct request *r, const char *code, const char *message)
{
    send_line(r, json_pack("{ss ss}", "error", code, "message", message));
}

/* The entries of the prompt's own tokens (they must have been prefilled):
 * every token of ids given, else those of the text, a start token the
 * model put before it left out. */
static json_t *prompt_entries(const struct request *r)
{
    const struct batch_seq *s = &r->seq;
    return serve_prompt_logprobs_json(
        s, !r->ids && s->prompt[0] == tokenizer_bos_id(gen_tokenizer(s->g)));
}

/* What the answer says of its prompt into o: with ids given, its text
 * ("prompt_text", special tokens spelt out); with prompt_logprobs, its
 * tokens' entries. False when memory ran out. */
static bool describe_prompt(const struct request *r, json_t *o)
{
    const struct batch_seq *s = &r->seq;
    if (r->ids) {
        char *t = tokenizer_decode(gen_tokenizer(s->g), s->prompt, (size_t)s->n_prompt, 0);
        if (!t || json_object_set_new(o, "prompt_text", json_string(t))) {
            free(t);
            return false;
        }
        free(t);
    }
    json_t *e = s->plp ? prompt_entries(r) : NULL;
    return !s->plp || (e && json_object_set_new(o, "prompt_logprobs", e) == 0);
}

/* Streamed with ids given or prompt_logprobs: the prompt's line
 * (describe_prompt's), once, before the first delta (or the answer, when
 * no delta comes). */
static void send_prompt_line(struct request *r)
{
    if (!r->stream || (!r->ids && !r->seq.plp) || r->prompt_sent)
        return;
    r->prompt_sent = true;
    json_t *o = json_object();
    if (!o || !describe_prompt(r, o)) {
        json_decref(o);
        r->gone = true; /* out of memory: the client gets no answer */
        return;
    }
    send_line(r, o);
}

static void on_text(void *ctx, const char *piece, size_t len)
{
    struct request *r = ctx;
    send_prompt_line(r);
    json_t *d = json_pack("{s:s%}", "delta", piece, len);
    if (d && r->seq.top_n >= 0) { /* the tokens this piece completes */
        json_object_set_new(d, "logprobs",
                            serve_logprobs_json(&r->seq, r->lp_sent, r->seq.n_kept));
        r->lp_sent = r->seq.n_kept;
    }
    send_line(r, d);
}

static void request_free(struct engine *e, struct request *r)
{
    for (struct request **p = &e->reqs; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            break;
        }
    e->n_reqs--;
    if (r->left && r->state != READING)
        e->cancelled++;
    if (r->state == QUEUED)
        admission_drop(e->adm, r);
    else if (r->state == RUNNING)
        admission_done(e->adm, r->tokens);
    batch_seq_end(&r->seq);
    model_lru_release(e->models, r->adapter);
    model_lru_release(e->models, r->base);
    close(r->fd);
    free(r->buf);
    free(r);
}

/* The loaded models: {"dir", "adapter", "four_bit", "bytes"} each. */
static json_t *loaded_json(const struct model_lru *c)
{
    json_t *a = json_array();
    for (const struct lru_entry *m = model_lru_first(c); a && m; m = m->next)
        json_array_append_new(a, json_pack("{ss sb sb sI}", "dir", m->dir, "adapter",
                                           m->ad != NULL, "four_bit", m->four_bit, "bytes",
                                           (json_int_t)m->bytes));
    return a;
}

static void send_stats(struct engine *e, struct request *r)
{
    struct decode_passes p = batcher_passes(e->batcher);
    send_line(r, json_pack("{si sI sI so si si sI sI sI sI sI sI}", "models",
                           model_lru_count(e->models), "model_bytes",
                           (json_int_t)model_lru_bytes(e->models), "model_memory",
                           (json_int_t)e->max_model_bytes, "loaded",
                           loaded_json(e->models), "running", admission_running(e->adm),
                           "waiting", admission_waiting(e->adm), "tokens_in_flight",
                           (json_int_t)admission_tokens(e->adm), "tokens_generated",
                           (json_int_t)e->generated, "steps", (json_int_t)e->steps,
                           "prefill_passes", (json_int_t)p.prompt, "decode_passes",
                           (json_int_t)p.token, "cancelled", (json_int_t)e->cancelled));
}

/* The sampling options of a request, as `alallo generate` reads them. */
static bool read_opts(json_t *j, struct gen_opts *o, char *why, size_t cap)
{
    json_t *mt = json_object_get(j, "max_tokens"), *t = json_object_get(j, "temperature");
    json_t *tp = json_object_get(j, "top_p"), *seed = json_object_get(j, "seed");
    *o = (struct gen_opts){.max_tokens = 64, .temperature = 0.0f, .top_p = 1.0f, .seed = 0};
    if (mt && (!json_is_integer(mt) || json_integer_value(mt) < 1 ||
               json_integer_value(mt) > GEN_MAX_TOKENS)) {
        snprintf(why, cap, "max_tokens must be an integer from 1 to %d", GEN_MAX_TOKENS);
        return false;
    }
    if (t && (!json_is_number(t) || !(json_number_value(t) >= 0 && json_number_value(t) <= 100))) {
        snprintf(why, cap, "temperature must be a number from 0 to 100");
        return false;
    }
    if (tp && (!json_is_number(tp) ||
               !(json_number_value(tp) >= 1e-6 && json_number_value(tp) <= 1))) {
        snprintf(why, cap, "top_p must be a number from 0.000001 to 1");
        return false;
    }
    if (seed && (!json_is_integer(seed) || json_integer_value(seed) < 0)) {
        snprintf(why, cap, "seed must be a non-negative integer");
        return false;
    }
    json_t *lp = json_object_get(j, "logprobs");
    if (lp && (!json_is_integer(lp) || json_integer_value(lp) < 0 ||
               json_integer_value(lp) > BATCH_TOP_LOGPROBS_MAX)) {
        snprintf(why, cap, "logprobs must be an integer from 0 to %d", BATCH_TOP_LOGPROBS_MAX);
        return false;
    }
    json_t *plp = json_object_get(j, "prompt_logprobs");
    if (plp && (!json_is_boolean(plp) ||
                (json_is_true(plp) && (!lp || json_object_get(j, "chat"))))) {
        snprintf(why, cap, "prompt_logprobs must be true or false, and true only with logprobs "
                           "and a prompt (not a chat)");
        return false;
    }
    if (mt)
        o->max_tokens = (int)json_integer_value(mt);
    if (t)
        o->temperature = (float)json_number_value(t);
    if (tp)
        o->top_p = (float)json_number_value(tp);
    if (seed)
        o->seed = (uint64_t)json_integer_value(seed);
    return true;
}

/* A request's "stop": absent or null, a text, or a list of up to
 * STOP_TEXTS_MAX texts, each of 1 to STOP_TEXT_BYTES bytes. */
static bool read_stops(json_t *j, struct stop_texts *st, char *why, size_t cap)
{
    memset(st, 0, sizeof *st);
    json_t *v = json_object_get(j, "stop");
    if (!v || json_is_null(v))
        return true;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    bool ok = json_is_string(v) || (json_is_array(v) && n <= STOP_TEXTS_MAX);
    for (size_t i = 0; ok && i < n; i++) {
        json_t *t = json_is_array(v) ? json_array_get(v, i) : v;
        ok = json_is_string(t) &&
             stop_texts_add(st, json_string_value(t), json_string_length(t)) == 0;
    }
    if (!ok)
        snprintf(why, cap, "stop must be a text or a list of up to %d texts, each of 1 to %d "
                           "bytes", STOP_TEXTS_MAX, STOP_TEXT_BYTES);
    return ok;
}

/* The loading of a model for r answered as the client should read it:
 * false (and the request answered) when there is none. */
static bool loaded(struct request *r, int rc, const char *err)
{
    if (rc == MODEL_LRU_FULL)
        send_error(r, "busy", err);
    else
        send_error(r, "failed", err);
    return false;
}

/* The token ids of a "prompt_ids" array into *ids (n of them, the
 * caller's): 0; 1 with the reason when one is no integer of the model's
 * vocabulary (0 to vocab - 1); -1 when memory ran out. */
static int prompt_ids(const json_t *a, int vocab, int32_t **ids, size_t *n, char *why,
                      size_t cap)
{
    *n = json_array_size(a);
    *ids = malloc(sizeof **ids * (*n ? *n : 1));
    if (!*ids) {
        snprintf(why, cap, "out of memory for the prompt");
        return -1;
    }
    for (size_t i = 0; i < *n; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= vocab) {
            snprintf(why, cap,
                     "prompt_ids[%zu] is not a token of this model (an integer from 0 to %d)", i,
                     vocab - 1);
            free(*ids);
            *ids = NULL;
            return 1;
        }
        (*ids)[i] = (int32_t)json_integer_value(v);
    }
    return 0;
}

/* Reads the request's line: loads its models, encodes its prompt and
 * queues it. False when it was answered (an error) and is done. */
static bool start(struct engine *e, struct request *r)
{
    json_error_t je;
    json_t *j = json_loadb(r->buf, r->len, 0, &je);
    char why[2048];
    bool ok = false;
    if (!json_is_object(j)) {
        send_error(r, "invalid_request", "the request is not one JSON object");
        goto out;
    }
    if (e->key) {
        const char *key = json_string_value(json_object_get(j, "key"));
        char hash[KEYS_HASH_HEX];
        if (!key || strlen(key) >= ENGINE_KEY_MAX || keys_hash(key, hash) ||
            !keys_equal(hash, e->key_hash)) {
            send_error(r, "forbidden", "the request's key is missing or wrong");
            goto out;
        }
    }
    if (json_is_true(json_object_get(j, "stats"))) {
        send_stats(e, r);
        goto out;
    }
    const char *account = json_string_value(json_object_get(j, "account"));
    const char *weights = json_string_value(json_object_get(j, "weights"));
    json_t *ad = json_object_get(j, "adapter");
    json_t *four = json_object_get(j, "four_bit");
    const char *prompt = json_string_value(json_object_get(j, "prompt"));
    json_t *pids = json_object_get(j, "prompt_ids");
    json_t *chat = json_object_get(j, "chat");
    json_t *messages = json_object_get(chat, "messages");
    struct gen_opts o;
    struct stop_texts stop;
    if (!account || !account[0] || !weights || (ad && !json_is_string(ad)) ||
        (four && !json_is_boolean(four)) || (pids && !json_is_array(pids)) ||
        (!!prompt + !!pids + !!chat != 1) || (chat && !json_is_array(messages))) {
        send_error(r, "invalid_request",
                   "the request needs account, weights, and one of prompt, prompt_ids (an "
                   "array) and chat with messages (four_bit, when given, true or false)");
        goto out;
    }
    if (!read_opts(j, &o, why, sizeof why) || !read_stops(j, &stop, why, sizeof why)) {
        send_error(r, "invalid_request", why);
        goto out;
    }
    snprintf(r->account, sizeof r->account, "%s", account);
    r->stream = json_is_true(json_object_get(j, "stream"));
    int rc;
    r->base = model_lru_base(e->models, weights, json_is_true(four), &rc, why, sizeof why);
    if (!r->base && !loaded(r, rc, why))
        goto out;
    if (ad) {
        r->adapter = model_lru_adapter(e->models, r->base, json_string_value(ad), &rc, why,
                                       sizeof why);
        if (!r->adapter && !loaded(r, rc, why))
            goto out;
    }
    struct generator *g = r->base->gen;
    int32_t *ids;
    size_t n;
    struct gen_stops stops;
    if (pids) {
        rc = prompt_ids(pids, gen_model(g)->cfg.vocab, &ids, &n, why, sizeof why);
        if (rc) {
            send_error(r, rc > 0 ? "invalid_prompt" : "failed", why);
            goto out;
        }
        r->ids = true;
        int32_t *given = ids;
        rc = gen_encode_ids(g, given, n, &ids, &stops, why, sizeof why);
        free(given);
    } else {
        rc = chat ? gen_encode_chat(g, messages, json_object_get(chat, "tools"), &ids, &n,
                                    &stops, why, sizeof why)
                  : gen_encode_prompt(g, prompt, &ids, &n, &stops, why, sizeof why);
    }
    if (rc == GEN_BAD_CHAT) {
        send_error(r, "invalid_chat", why);
        goto out;
    }
    if (rc) {
        send_error(r, "failed", why);
        goto out;
    }
    rc = batch_seq_start(&r->seq, g, r->adapter ? &r->adapter->ad->d : NULL, ids, n, &stops,
                         &o, why, sizeof why);
    if (rc == GEN_TOO_LONG || rc == GEN_EMPTY) {
        send_line(r, json_pack("{ss si si}", "error",
                               rc == GEN_TOO_LONG ? "context_length_exceeded" : "empty_prompt",
                               "prompt_tokens", r->seq.n_prompt, "context_tokens",
                               gen_model(g)->cfg.max_pos));
        goto out;
    }
    if (rc == 0)
        r->seq.stop_texts = stop;
    json_t *lp = json_object_get(j, "logprobs");
    if (rc == 0 && lp &&
        (batch_seq_logprobs(&r->seq, (int)json_integer_value(lp)) ||
         (json_is_true(json_object_get(j, "prompt_logprobs")) &&
          batch_seq_prompt_logprobs(&r->seq)))) {
        rc = -1;
        snprintf(why, sizeof why, "out of memory for log-probabilities");
    }
    if (rc) {
        send_error(r, "failed", why);
        goto out;
    }
    if (r->stream) {
        r->seq.on_text = on_text;
        r->seq.on_text_ctx = r;
    }
    r->tokens = r->seq.n_prompt + r->seq.max_new;
    if (admission_push(e->adm, r->account, r, r->tokens)) {
        send_error(r, "busy", "too many requests of this account wait");
        goto out;
    }
    r->state = QUEUED;
    ok = true;
out:
    json_decref(j);
    return ok;
}

/* Reads what the client sent: the request line, or (later) the end of the
 * connection. False when the request is done with. */
static bool on_readable(struct engine *e, struct request *r)
{
    if (r->state != READING) {
        char c;
        ssize_t k = recv(r->fd, &c, 1, MSG_DONTWAIT);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR))
            r->gone = r->left = true; /* the client went away: cancelled */
        return !r->gone;
    }
    for (;;) { /* all that has come, up to the line's end */
        if (r->len + 65536 > r->cap) {
            size_t cap = r->cap ? r->cap * 2 : 65536 * 2;
            char *b = cap <= REQUEST_MAX * 2 ? realloc(r->buf, cap) : NULL;
            if (!b) {
                send_error(r, "invalid_request", "the request is too long");
                return false;
            }
            r->buf = b;
            r->cap = cap;
        }
        ssize_t k = recv(r->fd, r->buf + r->len, r->cap - r->len, MSG_DONTWAIT);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return true; /* the rest later */
        if (k <= 0)
            return false;
        char *nl = memchr(r->buf + r->len, '\n', (size_t)k);
        r->len += (size_t)k;
        if (!nl && r->len > REQUEST_MAX) {
            send_error(r, "invalid_request", "the request is too long");
            return false;
        }
        if (nl) {
            r->len = (size_t)(nl - r->buf);
            return start(e, r);
        }
    }
}

/* Takes every connection waiting and reads the request line each has
 * sent already, so that all the requests there when a step starts join
 * it together (their prompts prefilled in one pass). */
static void accept_waiting(struct engine *e)
{
    for (;;) {
        int fd = accept4(e->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0 && errno == EINTR)
            continue;
        if (fd < 0)
            return; /* none left (EAGAIN), or none to take now */
        struct request *r = calloc(1, sizeof *r);
        if (!r) {
            close(fd);
            return;
        }
        r->fd = fd;
        r->since_ms = now_ms();
        r->next = e->reqs;
        e->reqs = r;
        e->n_reqs++;
        if (!on_readable(e, r) || r->gone)
            request_free(e, r);
    }
}

/* Answers a finished sequence's client. */
static void finish(struct request *r)
{
    struct batch_seq *s = &r->seq;
    char *text = tokenizer_decode(gen_tokenizer(s->g), s->out, (size_t)s->n_out, 1);
    if (!text) {
        send_error(r, "failed", "out of memory decoding");
        return;
    }
    if (s->has_cut && s->cut < strlen(text))
        text[s->cut] = '\0'; /* the answer ends before its stop text */
    if (r->stream && strlen(text) > s->sent) /* the last incomplete characters, or held */
        on_text(r, text + s->sent, strlen(text + s->sent));
    send_prompt_line(r);
    json_t *answer = json_pack("{ss si si ss}", "text", text, "prompt_tokens", s->n_prompt,
                               "completion_tokens", s->n_out, "finish_reason", s->finish);
    json_t *lp = s->top_n >= 0 ? serve_logprobs_json(s, 0, s->n_kept) : NULL;
    bool failed = s->top_n >= 0 && (!lp || json_object_set_new(answer, "logprobs", lp));
    failed = failed || !describe_prompt(r, answer);
    if (failed) {
        json_decref(answer);
        answer = json_pack("{ss ss}", "error", "failed", "message", "out of memory");
    }
    send_line(r, answer);
    free(text);
}

static bool runnable(const struct request *r)
{
    return r->state == RUNNING && !r->gone && !r->seq.finish;
}

/* One step of every base that has running sequences: each base's
 * sequences go through its model together. */
static void step(struct engine *e)
{
    size_t cap = (size_t)(e->n_reqs ? e->n_reqs : 1);
    struct batch_seq **seqs = malloc(sizeof *seqs * cap);
    struct request **owners = malloc(sizeof *owners * cap);
    if (!seqs || !owners) {
        free(seqs);
        free(owners);
        return;
    }
    for (struct request *r = e->reqs; r; r = r->next)
        r->stepped = false;
    for (struct request *lead = e->reqs; lead; lead = lead->next) {
        if (!runnable(lead) || lead->stepped)
            continue;
        int n = 0;
        for (struct request *r = e->reqs; r; r = r->next)
            if (runnable(r) && r->base == lead->base) {
                seqs[n] = &r->seq;
                owners[n++] = r;
                r->stepped = true;
            }
        if (batcher_step(e->batcher, seqs, n)) {
            for (int i = 0; i < n; i++) {
                send_error(owners[i], "failed", "out of memory for the batch");
                owners[i]->gone = true;
            }
            continue;
        }
        e->steps++;
        e->generated += (unsigned long long)n;
    }
    free(seqs);
    free(owners);
}

/* A TCP listener on "HOST:PORT" (PORT 0: any free one); its port in
 * *port. -1 with the reason on stderr. */
static int listen_tcp(const char *spec, int *port)
{
    char host[256];
    const char *colon = strrchr(spec, ':');
    if (!colon || (size_t)(colon - spec) >= sizeof host || !colon[1]) {
        fprintf(stderr, "alallo inference: --listen wants HOST:PORT, not %s\n", spec);
        return -1;
    }
    memcpy(host, spec, (size_t)(colon - spec));
    host[colon - spec] = '\0';
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *res = NULL;
    int g = getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, &res);
    if (g) {
        fprintf(stderr, "alallo inference: cannot listen on %s: %s\n", spec, gai_strerror(g));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        int one = 1;
        if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
                        bind(fd, a->ai_addr, a->ai_addrlen) || listen(fd, 256))) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (fd < 0 || getsockname(fd, (struct sockaddr *)&ss, &len)) {
        fprintf(stderr, "alallo inference: cannot listen on %s: %s\n", spec, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                           : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

static int listen_on(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof a.sun_path) {
        fprintf(stderr, "alallo inference: the socket path is too long\n");
        return -1;
    }
    strcpy(a.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    unlink(path); /* a stale socket of an engine that is gone */
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 256)) {
        fprintf(stderr, "alallo inference: cannot listen on %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

int engine_run(const struct engine_config *cfg)
{
    struct engine e = {0};
    int port = 0;
    if (cfg->listen && (!cfg->key || !cfg->key[0] || strlen(cfg->key) >= ENGINE_KEY_MAX)) {
        fprintf(stderr, "alallo inference: --listen needs --key\n");
        return 1;
    }
    e.listen_fd = cfg->listen ? listen_tcp(cfg->listen, &port) : listen_on(cfg->socket_path);
    if (e.listen_fd < 0)
        return 1;
    e.max_model_bytes = cfg->max_model_bytes;
    if (cfg->key && keys_hash(cfg->key, e.key_hash) == 0)
        e.key = e.key_hash;
    if (cfg->listen && cfg->port_file) {
        char line[16];
        int n = snprintf(line, sizeof line, "%d\n", port);
        if (fs_write_durably(cfg->port_file, line, (size_t)n, 0600) != 0) {
            fprintf(stderr, "alallo inference: cannot write %s: %s\n", cfg->port_file,
                    strerror(errno));
            close(e.listen_fd);
            return 1;
        }
    }
    if (cfg->listen)
        fprintf(stderr, "alallo inference: listening on port %d\n", port);
    e.models = model_lru_new(cfg->max_model_bytes);
    e.adm = admission_new(&cfg->limits);
    e.batcher = batcher_new();
    if (!e.models || !e.adm || !e.batcher) {
        fprintf(stderr, "alallo inference: out of memory or bad limits\n");
        close(e.listen_fd);
        model_lru_free(e.models);
        admission_free(e.adm);
        batcher_free(e.batcher);
        return 1;
    }
    struct sigaction sa = {.sa_handler = on_stop};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    struct pollfd *pfd = NULL;
    size_t pcap = 0;
    while (!stopping) {
        if ((size_t)e.n_reqs + 1 > pcap) {
            size_t cap = (size_t)e.n_reqs + 64;
            struct pollfd *p = realloc(pfd, sizeof *p * cap);
            if (!p)
                break;
            pfd = p;
            pcap = cap;
        }
        pfd[0] = (struct pollfd){.fd = e.listen_fd, .events = POLLIN};
        int np = 1;
        for (struct request *r = e.reqs; r; r = r->next)
            pfd[np++] = (struct pollfd){.fd = r->fd, .events = POLLIN};
        int timeout = admission_running(e.adm) > 0 ? 0 : 1000;
        if (poll(pfd, (nfds_t)np, timeout) < 0 && errno != EINTR)
            break;
        /* requests first (their fds are in list order), then new ones */
        int i = 1;
        for (struct request *r = e.reqs, *next; r; r = next, i++) {
            next = r->next;
            if (pfd[i].revents & (POLLIN | POLLHUP | POLLERR))
                if (!on_readable(&e, r) || r->gone)
                    request_free(&e, r);
        }
        if (pfd[0].revents & POLLIN)
            accept_waiting(&e);
        if (e.key) /* a TCP client that has not sent its line in time */
            for (struct request *r = e.reqs, *next; r; r = next) {
                next = r->next;
                if (r->state == READING && now_ms() - r->since_ms > ENGINE_READ_TIMEOUT_MS)
                    request_free(&e, r);
            }
        for (struct request *r; (r = admission_next(e.adm));)
            r->state = RUNNING;
        step(&e);
        for (struct request *r = e.reqs, *next; r; r = next) {
            next = r->next;
            if (r->state == RUNNING && (r->gone || r->seq.finish)) {
                if (!r->gone)
                    finish(r);
                request_free(&e, r);
            }
        }
    }
    while (e.reqs)
        request_free(&e, e.reqs);
    free(pfd);
    close(e.listen_fd);
    if (cfg->socket_path)
        unlink(cfg->socket_path);
    model_lru_free(e.models);
    admission_free(e.adm);
    batcher_free(e.batcher);
    return 0;
}
