/* bench_slurm.c - the Slurm executor's figures against the cluster that
 * SLURM_CONF names (bench/slurm/run.sh brings a throwaway one up):
 *
 *   submit_to_pending   sbatch, then list until the tag is listed pending (ms, p50/p99)
 *   submit_rate         submissions per second with QUEUED jobs already pending
 *   reconcile_pass      one list + exec_reconcile over every pending job (ms, p50/max)
 *
 * A blocker job takes the node's GPUs first, so that every measured job
 * stays pending (queued, as alallo's held attempts would be).
 * usage: bench_slurm JOBS_DIR [QUEUED] [SAMPLES]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/clock.h"
#include "exec/reconcile.h"
#include "exec/slurm.h"

static struct executor *x;
static const char *jobs_dir;
static char script[1024];

static void die(const char *what)
{
    fprintf(stderr, "bench_slurm: %s: %s\n", what, x ? x->error : "");
    exit(1);
}

static void submit(const char *tag, const char *gres, int cpus)
{
    struct exec_submit s;
    memset(&s, 0, sizeof s);
    snprintf(s.tag, sizeof s.tag, "%s", tag);
    snprintf(s.partition, sizeof s.partition, "ondemand");
    snprintf(s.gres, sizeof s.gres, "%s", gres);
    s.cpus = cpus;
    s.mem_mb = 10;
    s.time_limit_min = 10;
    snprintf(s.script, sizeof s.script, "%s", script);
    snprintf(s.output, sizeof s.output, "/dev/null");
    if (executor_submit(x, &s, NULL) != ERR_OK)
        die("submit");
}

static struct exec_job *jobs;
static int jobs_cap = 4096;

static int list(void)
{
    int n = 0;
    if (executor_list(x, jobs, jobs_cap, &n) != ERR_OK)
        die("list");
    return n;
}

static int cmp_double(const void *a, const void *b)
{
    double d = *(const double *)a - *(const double *)b;
    return d < 0 ? -1 : d > 0;
}

static double pct(double *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int i = (int)(p * (n - 1) + 0.5);
    return v[i];
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s JOBS_DIR [QUEUED] [SAMPLES]\n", argv[0]);
        return 2;
    }
    jobs_dir = argv[1];
    int queued = argc > 2 ? atoi(argv[2]) : 500;
    int samples = argc > 3 ? atoi(argv[3]) : 50;
    snprintf(script, sizeof script, "%s/bench-job.sh", jobs_dir);
    FILE *f = fopen(script, "w");
    if (!f)
        die("write the job script");
    fprintf(f, "#!/bin/bash\nexec /usr/bin/srun /bin/sleep 3600\n");
    fclose(f);
    chmod(script, 0755);
    jobs = calloc((size_t)jobs_cap, sizeof *jobs);
    struct slurm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.timeout_ms = 30000;
    char err[256];
    if (executor_slurm_open(&cfg, &x, err, sizeof err) != ERR_OK) {
        fprintf(stderr, "bench_slurm: %s\n", err);
        return 1;
    }

    /* The blocker holds both GPUs: the rest pend. */
    submit("alallo-att-blocker", "gpu:2", 1);
    double end = clock_mono_s() + 60;
    for (;;) {
        int n = list();
        bool running = false;
        for (int i = 0; i < n && i < jobs_cap; i++)
            running |= strcmp(jobs[i].tag, "alallo-att-blocker") == 0 &&
                       jobs[i].state == EXEC_RUNNING;
        if (running)
            break;
        if (clock_mono_s() > end)
            die("the blocker did not start within 60 s");
    }

    /* 1. sbatch -> listed pending, with few jobs queued. */
    double *lat = calloc((size_t)samples, sizeof *lat);
    char tag[EXEC_TAG_MAX];
    for (int k = 0; k < samples; k++) {
        snprintf(tag, sizeof tag, "alallo-att-lat%d", k);
        double t0 = clock_mono_s();
        submit(tag, "gpu:1", 1);
        bool seen = false;
        while (!seen) {
            int n = list();
            for (int i = 0; i < n && i < jobs_cap && !seen; i++)
                seen = strcmp(jobs[i].tag, tag) == 0 && jobs[i].state == EXEC_PENDING;
            if (!seen && clock_mono_s() - t0 > 60)
                die("a job was not listed pending within 60 s");
        }
        lat[k] = (clock_mono_s() - t0) * 1000;
    }
    double p50 = pct(lat, samples, 0.5), p99 = pct(lat, samples, 0.99);
    printf("{\"phase\":\"submit_to_pending\",\"samples\":%d,\"p50_ms\":%.1f,\"p99_ms\":%.1f}\n",
           samples, p50, p99);

    /* 2. Fill the queue to QUEUED, then the rate of 100 more. */
    int have = samples;
    double t0 = clock_mono_s();
    for (; have < queued; have++) {
        snprintf(tag, sizeof tag, "alallo-att-q%d", have);
        submit(tag, "gpu:1", 1);
    }
    double fill_s = clock_mono_s() - t0;
    int more = 100;
    t0 = clock_mono_s();
    for (int k = 0; k < more; k++) {
        snprintf(tag, sizeof tag, "alallo-att-m%d", k);
        submit(tag, "gpu:1", 1);
    }
    double rate = more / (clock_mono_s() - t0);
    printf("{\"phase\":\"submit_rate\",\"queued_before\":%d,\"submitted\":%d,\"jobs_per_s\":%.1f,"
           "\"fill_jobs_per_s\":%.1f}\n",
           queued, more, rate, (queued - samples) / (fill_s > 0 ? fill_s : 1));

    /* 3. Reconciliation passes: every listed job has its open attempt. */
    int n = list();
    if (n > jobs_cap)
        die("more jobs than the bench holds");
    struct exec_open_attempt *att = calloc((size_t)n, sizeof *att);
    struct exec_action *act = calloc((size_t)(2 * n), sizeof *act);
    for (int i = 0; i < n; i++) {
        exec_attempt_of(jobs[i].tag, att[i].attempt_id, sizeof att[i].attempt_id);
        att[i].state = jobs[i].state == EXEC_RUNNING ? ENGINE_STATE_RUNNING : ENGINE_STATE_PENDING;
        snprintf(att[i].engine_id, sizeof att[i].engine_id, "%s", jobs[i].id);
        att[i].submitted_ms = clock_now_ms() - 60000;
    }
    int passes = 10;
    double *pass_ms = calloc((size_t)passes, sizeof *pass_ms);
    double *reconcile_only = calloc((size_t)passes, sizeof *reconcile_only);
    int kept = 0;
    for (int p = 0; p < passes; p++) {
        double s0 = clock_mono_s();
        int64_t listed = clock_now_ms();
        int m = list();
        double s1 = clock_mono_s();
        int nout = 0;
        exec_reconcile(att, n, jobs, m < jobs_cap ? m : jobs_cap, listed, act, &nout);
        double s2 = clock_mono_s();
        kept = 0;
        for (int i = 0; i < nout; i++)
            kept += act[i].kind == EXEC_ACT_KEEP;
        pass_ms[p] = (s2 - s0) * 1000;
        reconcile_only[p] = (s2 - s1) * 1000;
    }
    printf("{\"phase\":\"reconcile_pass\",\"jobs\":%d,\"kept\":%d,\"passes\":%d,"
           "\"p50_ms\":%.1f,\"max_ms\":%.1f,\"reconcile_only_p50_ms\":%.3f}\n",
           n, kept, passes, pct(pass_ms, passes, 0.5), pct(pass_ms, passes, 1.0),
           pct(reconcile_only, passes, 0.5));
    executor_close(x);
    free(att);
    free(act);
    free(pass_ms);
    free(reconcile_only);
    free(lat);
    free(jobs);
    return 0;
}
