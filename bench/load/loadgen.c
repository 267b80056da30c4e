/* loadgen.c - many concurrent API users of one alallo server, over loopback:
 * some poll their job list, some follow a job's training log, for a fixed
 * time, while jobs train.
 *
 *   loadgen --url URL --clients N --followers F --seconds S
 *           --keys FILE [--jobs FILE] [--think-ms MS]
 *
 * --keys FILE holds one API key a line; client i uses key i mod (number of
 * keys). --jobs FILE holds "KEY-INDEX JOB-ID" lines: follower i follows a
 * job of its key (GET /v1/fine_tuning/jobs/ID/log?follow=1), and follows it
 * again when the stream ends. The other clients GET
 * /v1/fine_tuning/jobs?limit=20 with MS (default 250) between requests.
 *
 * Every client is one thread with one libcurl handle (keep-alive). An error
 * is any transfer that fails (connection refused or reset, timeout) or any
 * status that is not 200; a follow cut by the end of the run is not one.
 * Latency: each list request's total time; each follow's time to its first
 * byte. Both go into fixed histograms of 0.1 ms buckets up to 30 s (bounded
 * memory whatever the run's length). Prints one JSON object.
 *
 * Bounded: at most LOADGEN_MAX_CLIENTS threads, at most 3,600 s, and every
 * transfer has a timeout; the run ends by itself. Not a test:
 * bench/load/run.sh drives it.
 */
#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LOADGEN_MAX_CLIENTS 1000
#define LOADGEN_MAX_KEYS 1000
#define LOADGEN_MAX_JOBS 1000
#define BUCKETS 300000 /* 0.1 ms each: up to 30 s */
#define ERRORS_KEPT 8

struct histogram {
    atomic_ulong count[BUCKETS + 1]; /* the last one: 30 s and over */
    atomic_ulong n;
    atomic_ulong max_us;
};

static struct histogram list_h, follow_h;
static atomic_ulong errors, list_ok, follow_ok, follow_bytes, follow_cut;
static char error_lines[ERRORS_KEPT][200];
static atomic_int n_error_lines;

static const char *base_url;
static char *keys[LOADGEN_MAX_KEYS];
static int n_keys;
static struct {
    int key;
    char id[64];
} jobs[LOADGEN_MAX_JOBS];
static int n_jobs;
static double t_end;
static int think_ms = 250;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void record(struct histogram *h, double seconds)
{
    unsigned long us = seconds > 0 ? (unsigned long)(seconds * 1e6) : 0;
    unsigned long b = us / 100;
    atomic_fetch_add(&h->count[b < BUCKETS ? b : BUCKETS], 1);
    atomic_fetch_add(&h->n, 1);
    unsigned long m = atomic_load(&h->max_us);
    while (us > m && !atomic_compare_exchange_weak(&h->max_us, &m, us))
        ;
}

/* The latency under which a fraction q of the samples fall, in ms. */
static double quantile_ms(struct histogram *h, double q)
{
    unsigned long n = atomic_load(&h->n);
    if (n == 0)
        return 0;
    unsigned long want = (unsigned long)(q * (double)n);
    if (want >= n)
        want = n - 1;
    unsigned long seen = 0;
    for (int b = 0; b <= BUCKETS; b++) {
        seen += atomic_load(&h->count[b]);
        if (seen > want)
            return (b + 1) * 0.1; /* the bucket's upper edge */
    }
    return BUCKETS * 0.1;
}

static void note_error(const char *fmt, const char *a, long b)
{
    atomic_fetch_add(&errors, 1);
    int i = atomic_fetch_add(&n_error_lines, 1);
    if (i < ERRORS_KEPT)
        snprintf(error_lines[i], sizeof error_lines[i], fmt, a, b);
}

/* Response bodies are counted and dropped. */
static size_t sink(char *p, size_t size, size_t n, void *ud)
{
    (void)p;
    size_t *bytes = ud;
    *bytes += size * n;
    return size * n;
}

/* Ends a follow when the run is over (returning non-zero aborts it). */
static int until_end(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)ud, (void)a, (void)b, (void)c, (void)d;
    return now_s() >= t_end;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

struct client {
    int index;
    int follow_job; /* index into jobs, or -1 to poll */
    pthread_t thread;
};

static void *client_run(void *arg)
{
    struct client *c = arg;
    CURL *curl = curl_easy_init();
    if (!curl) {
        note_error("%s%ld", "curl_easy_init failed", 0);
        return NULL;
    }
    char auth[256], url[512];
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", keys[c->index % n_keys]);
    struct curl_slist *h = curl_slist_append(NULL, auth);
    if (c->follow_job >= 0) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", keys[jobs[c->follow_job].key]);
        curl_slist_free_all(h);
        h = curl_slist_append(NULL, auth);
        snprintf(url, sizeof url, "%s/v1/fine_tuning/jobs/%s/log?follow=1", base_url,
                 jobs[c->follow_job].id);
    } else {
        snprintf(url, sizeof url, "%s/v1/fine_tuning/jobs?limit=20", base_url);
    }
    size_t bytes = 0;
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &bytes);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 10L);
    if (c->follow_job >= 0) {
        curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, until_end);
    } else {
        curl_easy_setopt(curl, CURLOPT_TIMEOUT, 30L);
    }
    /* Start the clients spread over the first second, as users arrive. */
    sleep_ms((c->index * 997) % 1000);
    while (now_s() < t_end) {
        bytes = 0;
        double t0 = now_s();
        CURLcode rc = curl_easy_perform(curl);
        long status = 0;
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
        if (c->follow_job >= 0) {
            double ttfb = 0;
            curl_easy_getinfo(curl, CURLINFO_STARTTRANSFER_TIME, &ttfb);
            atomic_fetch_add(&follow_bytes, bytes);
            if (rc == CURLE_ABORTED_BY_CALLBACK && now_s() >= t_end) {
                atomic_fetch_add(&follow_cut, 1); /* our own end, not an error */
                if (status == 200)
                    record(&follow_h, ttfb);
            } else if (rc != CURLE_OK) {
                note_error("follow: %s (status %ld)", curl_easy_strerror(rc), status);
                sleep_ms(think_ms);
            } else if (status != 200) {
                note_error("follow: %s status %ld", "HTTP", status);
                sleep_ms(think_ms);
            } else {
                record(&follow_h, ttfb);
                atomic_fetch_add(&follow_ok, 1);
                sleep_ms(1000); /* the job ended: look again a second later */
            }
        } else {
            if (rc != CURLE_OK) {
                note_error("list: %s (status %ld)", curl_easy_strerror(rc), status);
            } else if (status != 200) {
                note_error("list: %s status %ld", "HTTP", status);
            } else {
                record(&list_h, now_s() - t0);
                atomic_fetch_add(&list_ok, 1);
            }
            sleep_ms(think_ms);
        }
    }
    curl_slist_free_all(h);
    curl_easy_cleanup(curl);
    return NULL;
}

/* Reads up to `max` lines of FILE into out[] (each strdup'd, newline cut). */
static int read_lines(const char *path, char **out, int max)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[512];
    int n = 0;
    while (n < max && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0])
            out[n++] = strdup(line);
    }
    fclose(f);
    return n;
}

static void usage(void)
{
    fprintf(stderr, "usage: loadgen --url URL --clients N --followers F --seconds S --keys FILE "
                    "[--jobs FILE] [--think-ms MS]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *keys_file = NULL, *jobs_file = NULL;
    int clients = 200, followers = 50;
    double seconds = 60;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--url") == 0)
            base_url = argv[i + 1];
        else if (strcmp(argv[i], "--clients") == 0)
            clients = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--followers") == 0)
            followers = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--seconds") == 0)
            seconds = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--keys") == 0)
            keys_file = argv[i + 1];
        else if (strcmp(argv[i], "--jobs") == 0)
            jobs_file = argv[i + 1];
        else if (strcmp(argv[i], "--think-ms") == 0)
            think_ms = atoi(argv[i + 1]);
        else
            usage();
    }
    if (!base_url || !keys_file || clients < 1 || clients > LOADGEN_MAX_CLIENTS || followers < 0 ||
        followers > clients || !(seconds > 0 && seconds <= 3600) || think_ms < 0 || think_ms > 60000)
        usage();
    n_keys = read_lines(keys_file, keys, LOADGEN_MAX_KEYS);
    if (n_keys <= 0) {
        fprintf(stderr, "loadgen: no keys in %s\n", keys_file);
        return 2;
    }
    if (followers > 0) {
        char *lines[LOADGEN_MAX_JOBS];
        int n = jobs_file ? read_lines(jobs_file, lines, LOADGEN_MAX_JOBS) : -1;
        for (int i = 0; i < n; i++) {
            if (sscanf(lines[i], "%d %63s", &jobs[n_jobs].key, jobs[n_jobs].id) == 2 &&
                jobs[n_jobs].key >= 0 && jobs[n_jobs].key < n_keys)
                n_jobs++;
            free(lines[i]);
        }
        if (n_jobs == 0) {
            fprintf(stderr, "loadgen: followers need --jobs with 'KEY-INDEX JOB-ID' lines\n");
            return 2;
        }
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    struct client *cs = calloc((size_t)clients, sizeof *cs);
    if (!cs)
        return 1;
    double t0 = now_s();
    t_end = t0 + seconds;
    int started = 0;
    for (int i = 0; i < clients; i++) {
        cs[i].index = i;
        cs[i].follow_job = i < followers ? i % n_jobs : -1;
        if (pthread_create(&cs[i].thread, NULL, client_run, &cs[i]) != 0) {
            note_error("%s%ld", "pthread_create failed at client ", i);
            break;
        }
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(cs[i].thread, NULL);
    double took = now_s() - t0;
    printf("{\"clients\":%d,\"pollers\":%d,\"followers\":%d,\"keys\":%d,\"seconds\":%.1f,"
           "\"list_requests\":%lu,\"list_per_s\":%.1f,\"list_p50_ms\":%.1f,\"list_p99_ms\":%.1f,"
           "\"list_max_ms\":%.1f,\"follows_completed\":%lu,\"follows_open_at_end\":%lu,"
           "\"follow_first_byte_p99_ms\":%.1f,\"log_bytes\":%lu,\"errors\":%lu",
           started, started - followers, followers, n_keys, took, atomic_load(&list_ok),
           (double)atomic_load(&list_ok) / took, quantile_ms(&list_h, 0.50),
           quantile_ms(&list_h, 0.99), atomic_load(&list_h.max_us) / 1000.0,
           atomic_load(&follow_ok), atomic_load(&follow_cut), quantile_ms(&follow_h, 0.99),
           atomic_load(&follow_bytes), atomic_load(&errors));
    int kept = atomic_load(&n_error_lines);
    printf(",\"first_errors\":[");
    for (int i = 0; i < kept && i < ERRORS_KEPT; i++)
        printf("%s\"%s\"", i ? "," : "", error_lines[i]);
    printf("]}\n");
    free(cs);
    curl_global_cleanup();
    return atomic_load(&errors) ? 1 : 0;
}
