/* loadgen.c - a load generator for alallo's API over loopback.
 *
 *   loadgen --url URL --key KEY --mode create|list|get --threads N
 *           (--seconds S | --requests N) [--body JSON] [--ids FILE]
 *
 * Each thread keeps one connection (libcurl, keep-alive) and sends requests
 * back to back. Prints one JSON object: requests, ok, errors, seconds,
 * per_second (of successful requests), p50_ms, p90_ms, p99_ms, max_ms.
 * `create` POSTs --body to /v1/fine_tuning/jobs (and with --ids FILE
 * appends each new id to FILE); `list` GETs /v1/fine_tuning/jobs?limit=20;
 * `get` GETs /v1/fine_tuning/jobs/ID for ids read from --ids FILE, in turn.
 * Not a test: bench/service/run.sh drives it.
 */
#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_THREADS 256
#define MAX_SAMPLES (4 << 20)

struct opts {
    const char *url, *key, *mode, *body, *ids_file;
    int threads;
    double seconds;
    long requests;
};

static struct opts o = {.threads = 8, .seconds = 10};
static char **ids;
static long n_ids;
static atomic_long next_request;
static atomic_long ok_count, err_count;
static double *samples; /* milliseconds */
static atomic_long n_samples;
static pthread_mutex_t ids_mu = PTHREAD_MUTEX_INITIALIZER;
static FILE *ids_out;
static double t_start;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

struct buf {
    char data[65536];
    size_t len;
};

static size_t collect(char *p, size_t size, size_t n, void *ud)
{
    struct buf *b = ud;
    size_t k = size * n;
    size_t room = sizeof b->data - 1 - b->len;
    size_t c = k < room ? k : room;
    memcpy(b->data + b->len, p, c);
    b->len += c;
    b->data[b->len] = '\0';
    return k;
}

static void *worker(void *arg)
{
    (void)arg;
    CURL *curl = curl_easy_init();
    struct curl_slist *h = NULL;
    char auth[256];
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", o.key);
    h = curl_slist_append(h, auth);
    h = curl_slist_append(h, "Content-Type: application/json");
    h = curl_slist_append(h, "Expect:");
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, 30L);
    struct buf *b = malloc(sizeof *b);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, b);
    char url[1024];
    for (;;) {
        long i = atomic_fetch_add(&next_request, 1);
        if (o.requests > 0 ? i >= o.requests : now_s() - t_start >= o.seconds)
            break;
        b->len = 0;
        b->data[0] = '\0';
        if (strcmp(o.mode, "create") == 0) {
            snprintf(url, sizeof url, "%s/v1/fine_tuning/jobs", o.url);
            curl_easy_setopt(curl, CURLOPT_POSTFIELDS, o.body);
        } else if (strcmp(o.mode, "list") == 0) {
            snprintf(url, sizeof url, "%s/v1/fine_tuning/jobs?limit=20", o.url);
            curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
        } else {
            snprintf(url, sizeof url, "%s/v1/fine_tuning/jobs/%s", o.url, ids[i % n_ids]);
            curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
        }
        curl_easy_setopt(curl, CURLOPT_URL, url);
        double t0 = now_s();
        CURLcode rc = curl_easy_perform(curl);
        double ms = (now_s() - t0) * 1000.0;
        long status = 0;
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
        if (rc != CURLE_OK || status != 200) {
            atomic_fetch_add(&err_count, 1);
            continue;
        }
        atomic_fetch_add(&ok_count, 1);
        long k = atomic_fetch_add(&n_samples, 1);
        if (k < MAX_SAMPLES)
            samples[k] = ms;
        if (ids_out) {
            /* "id":"ftjob-..." is the second field of a job object. */
            char *p = strstr(b->data, "\"id\":\"");
            if (p) {
                p += 6;
                char *e = strchr(p, '"');
                if (e) {
                    pthread_mutex_lock(&ids_mu);
                    fprintf(ids_out, "%.*s\n", (int)(e - p), p);
                    pthread_mutex_unlock(&ids_mu);
                }
            }
        }
    }
    free(b);
    curl_slist_free_all(h);
    curl_easy_cleanup(curl);
    return NULL;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(long n, double p)
{
    if (n == 0)
        return 0;
    long i = (long)(p * (double)(n - 1) + 0.5);
    return samples[i];
}

static void load_ids(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        exit(2);
    }
    long cap = 1024;
    ids = malloc(sizeof *ids * (size_t)cap);
    char line[128];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (!line[0])
            continue;
        if (n_ids == cap)
            ids = realloc(ids, sizeof *ids * (size_t)(cap *= 2));
        ids[n_ids++] = strdup(line);
    }
    fclose(f);
    if (!n_ids) {
        fprintf(stderr, "loadgen: no ids in %s\n", path);
        exit(2);
    }
}

int main(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--url"))
            o.url = v;
        else if (!strcmp(k, "--key"))
            o.key = v;
        else if (!strcmp(k, "--mode"))
            o.mode = v;
        else if (!strcmp(k, "--body"))
            o.body = v;
        else if (!strcmp(k, "--ids"))
            o.ids_file = v;
        else if (!strcmp(k, "--threads"))
            o.threads = atoi(v);
        else if (!strcmp(k, "--seconds"))
            o.seconds = atof(v);
        else if (!strcmp(k, "--requests"))
            o.requests = atol(v);
        else {
            fprintf(stderr, "loadgen: unknown option %s\n", k);
            return 2;
        }
    }
    if (!o.url || !o.key || !o.mode || o.threads < 1 || o.threads > MAX_THREADS ||
        (strcmp(o.mode, "create") == 0 && !o.body) ||
        (strcmp(o.mode, "get") == 0 && !o.ids_file)) {
        fprintf(stderr, "usage: loadgen --url URL --key KEY --mode create|list|get --threads N "
                        "(--seconds S | --requests N) [--body JSON] [--ids FILE]\n");
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    samples = malloc(sizeof *samples * MAX_SAMPLES);
    if (strcmp(o.mode, "get") == 0)
        load_ids(o.ids_file);
    else if (o.ids_file && !(ids_out = fopen(o.ids_file, "a"))) {
        perror(o.ids_file);
        return 2;
    }
    pthread_t t[MAX_THREADS];
    t_start = now_s();
    for (int i = 0; i < o.threads; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < o.threads; i++)
        pthread_join(t[i], NULL);
    double secs = now_s() - t_start;
    long n = atomic_load(&n_samples);
    if (n > MAX_SAMPLES)
        n = MAX_SAMPLES;
    qsort(samples, (size_t)n, sizeof *samples, cmp);
    printf("{\"mode\":\"%s\",\"threads\":%d,\"requests\":%ld,\"ok\":%ld,\"errors\":%ld,"
           "\"seconds\":%.3f,\"per_second\":%.1f,\"p50_ms\":%.3f,\"p90_ms\":%.3f,"
           "\"p99_ms\":%.3f,\"max_ms\":%.3f}\n",
           o.mode, o.threads, atomic_load(&ok_count) + atomic_load(&err_count),
           atomic_load(&ok_count), atomic_load(&err_count), secs,
           (double)atomic_load(&ok_count) / secs, pct(n, 0.5), pct(n, 0.9), pct(n, 0.99),
           n ? samples[n - 1] : 0.0);
    if (ids_out)
        fclose(ids_out);
    curl_global_cleanup();
    return 0;
}
