/* cmd_sim.c - `alallo sim`: runs the fleet simulation (sim.h) and prints
 * its one JSON object. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/cmd_sim.h"

#include "core/cmd_help.h"
#include "core/text.h"
#include "sched/sim.h"

static void usage(FILE *f)
{
    fputs("usage: alallo sim --jobs N --workers M --seed S [--accounts A] [--burst]\n"
          "                  [--load L] [--pass-interval SECONDS] [--time-limit SECONDS]\n"
          "                  [--budget-multiple X] [--finish-by-share P] [--no-timing]\n"
          "Simulates a fleet running the real planner, scheduler, estimator, time left\n"
          "and ledger on a virtual clock; prints one JSON object (docs/scheduler.md).\n",
          f);
}

static bool parse_double(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return false;
    *out = v;
    return true;
}

int cmd_sim(int argc, char **argv)
{
    if (cmd_help_asked(argc, argv)) {
        usage(stdout);
        return 0;
    }
    struct sim_config c;
    sim_config_default(&c);
    bool timing = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        bool ok = true;
        if (strcmp(a, "--burst") == 0) {
            c.burst = true;
            continue;
        } else if (strcmp(a, "--no-timing") == 0) {
            timing = false;
            continue;
        } else if (!v) {
            ok = false;
        } else if (strcmp(a, "--jobs") == 0) {
            ok = text_parse_long(v, 1, SIM_MAX_JOBS, &c.jobs);
        } else if (strcmp(a, "--workers") == 0) {
            ok = text_parse_long(v, 1, SIM_MAX_WORKERS, &n);
            c.workers = (int)n;
        } else if (strcmp(a, "--seed") == 0) {
            ok = text_parse_long(v, 0, 0x7fffffffL, &n);
            c.seed = (uint64_t)n;
        } else if (strcmp(a, "--accounts") == 0) {
            ok = text_parse_long(v, 1, 256, &n);
            c.accounts = (int)n;
        } else if (strcmp(a, "--load") == 0) {
            ok = parse_double(v, 0.01, 10, &c.load);
        } else if (strcmp(a, "--pass-interval") == 0) {
            ok = parse_double(v, 0, 86400, &c.pass_interval_s);
        } else if (strcmp(a, "--time-limit") == 0) {
            ok = parse_double(v, 0, 1e9, &c.limits.time_limit_s);
        } else if (strcmp(a, "--finish-by-share") == 0) {
            ok = parse_double(v, 0, 1, &c.finish_by_share);
        } else if (strcmp(a, "--budget-multiple") == 0) {
            ok = parse_double(v, 0, 1000, &c.limits.budget_multiple);
        } else {
            fprintf(stderr, "alallo sim: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "alallo sim: bad or missing value for %s\n", a);
            usage(stderr);
            return 2;
        }
        i++;
    }
    struct sim_result r;
    char why[160];
    if (sim_run(&c, &r, why, sizeof why)) {
        fprintf(stderr, "alallo sim: %s\n", why);
        return 1;
    }
    char buf[2048];
    if (sim_result_json(&r, timing, buf, sizeof buf) < 0) {
        fprintf(stderr, "alallo sim: result too large\n");
        return 1;
    }
    puts(buf);
    return r.invariant_violations ? 1 : 0;
}
