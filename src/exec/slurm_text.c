/* slurm_text.c - Slurm's outputs read, Slurm's words said plainly. */
#include "exec/slurm_text.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/text.h"

bool slurm_parse_job_id(const char *reply, char id[EXEC_ID_MAX])
{
    id[0] = '\0';
    if (!reply)
        return false;
    while (*reply == ' ' || *reply == '\t')
        reply++;
    size_t n = strcspn(reply, ";\r\n \t");
    if (n == 0 || n >= EXEC_ID_MAX || !isdigit((unsigned char)reply[0]))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isdigit((unsigned char)reply[i]) && reply[i] != '_' && reply[i] != '+')
            return false;
    memcpy(id, reply, n);
    id[n] = '\0';
    return true;
}

/* A run of 1 to 6 digits at *p into *v, moving *p past it. */
static bool digits(const char **p, long *v)
{
    const char *s = *p;
    long x = 0;
    int k = 0;
    while (isdigit((unsigned char)*s) && k < 7) {
        x = x * 10 + (*s - '0');
        s++;
        k++;
    }
    if (k == 0 || k > 6)
        return false;
    *v = x;
    *p = s;
    return true;
}

bool slurm_parse_minutes(const char *text, long *min)
{
    if (!text)
        return false;
    if (strcmp(text, "UNLIMITED") == 0 || strcmp(text, "INFINITE") == 0) {
        *min = 0;
        return true;
    }
    /* [days-]a[:b[:c]]: with days, a:b:c are hours:minutes:seconds;
     * without, a is minutes, a:b minutes:seconds, a:b:c hours:min:sec. */
    const char *p = text;
    long days = -1, f[3] = {0, 0, 0};
    int nf = 0;
    if (strchr(p, '-')) {
        if (!digits(&p, &days) || *p != '-')
            return false;
        p++;
    }
    for (;;) {
        if (nf == 3 || !digits(&p, &f[nf]))
            return false;
        nf++;
        if (*p == '\0')
            break;
        if (*p != ':')
            return false;
        p++;
    }
    long m;
    if (days >= 0)
        m = days * 1440 + f[0] * 60 + (nf > 1 ? f[1] : 0); /* d-h[:m[:s]] */
    else if (nf == 3)
        m = f[0] * 60 + f[1];
    else
        m = f[0]; /* m or m:s */
    *min = m;
    return true;
}

int64_t slurm_parse_timestamp_ms(const char *text)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    if (!text)
        return 0;
    const char *end = strptime(text, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!end || *end != '\0')
        return 0;
    tm.tm_isdst = -1;
    time_t t = mktime(&tm);
    if (t == (time_t)-1)
        return 0;
    return (int64_t)t * 1000;
}

bool slurm_partition_max_time(const char *line, long *min)
{
    const char *p = line;
    while ((p = strstr(p, "MaxTime=")) != NULL) {
        if (p == line || p[-1] == ' ') {
            char v[32];
            size_t n = strcspn(p + 8, " \n");
            if (n == 0 || n >= sizeof v)
                return false;
            memcpy(v, p + 8, n);
            v[n] = '\0';
            return slurm_parse_minutes(v, min);
        }
        p += 8;
    }
    return false;
}

/* The states squeue prints (Slurm 22.05, squeue(1) "JOB STATE CODES"). */
static const char *const ended_states[] = {
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL",
    "OUT_OF_MEMORY", "PREEMPTED", "REVOKED", "SPECIAL_EXIT", "TIMEOUT",
};
static const char *const running_states[] = {
    "RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING",
};

enum exec_state slurm_state_of(const char *state)
{
    for (size_t i = 0; i < sizeof ended_states / sizeof ended_states[0]; i++)
        if (strcmp(state, ended_states[i]) == 0)
            return EXEC_ENDED;
    for (size_t i = 0; i < sizeof running_states / sizeof running_states[0]; i++)
        if (strcmp(state, running_states[i]) == 0)
            return EXEC_RUNNING;
    /* PENDING, CONFIGURING, REQUEUED, REQUEUE_HOLD, REQUEUE_FED,
     * RESV_DEL_HOLD and words of later releases: not started. */
    return EXEC_PENDING;
}

struct words {
    const char *slurm; /* the reason, or its prefix when it ends in '*' */
    const char *plain;
};

static const struct words pending_words[] = {
    {"None", "waiting to be scheduled"},
    {"Resources", "waiting for free GPUs, CPUs or memory on the cluster"},
    {"Priority", "other jobs with a higher priority are ahead of it in the cluster's queue"},
    {"ReqNodeNotAvail*", "the nodes it needs are down, drained or reserved"},
    {"Nodes required for job are DOWN*", "the nodes it needs are down, drained or reserved"},
    {"NodeDown", "a node it needs is down"},
    {"PartitionTimeLimit", "its time limit is above the partition's maximum"},
    {"PartitionNodeLimit", "it asks for more nodes than the partition allows"},
    {"PartitionDown", "the partition is down"},
    {"PartitionInactive", "the partition is inactive"},
    {"PartitionConfig", "the partition's settings do not allow it"},
    {"BeginTime", "its start time has not come yet"},
    {"DependencyNeverSatisfied", "a job it depends on ended in a way that lets it never start"},
    {"Dependency", "waiting for a job it depends on"},
    {"JobHeldUser", "held by its user (scontrol release starts it)"},
    {"JobHeldAdmin", "held by the cluster's administrator"},
    {"launch failed requeued held", "its launch failed; Slurm requeued and held it"},
    {"BadConstraints", "no node has the features it asks for"},
    {"Reservation", "waiting for its reservation to start"},
    {"Licenses", "waiting for licenses"},
    {"InvalidAccount", "the Slurm account is not valid"},
    {"InvalidQOS", "the quality of service (QOS) is not valid for this account"},
    {"QOSMaxJobsPerUserLimit", "the QOS allows no more running jobs for this user now"},
    {"QOSMaxGRESPerUser", "the QOS allows this user no more GPUs now"},
    {"QOSGrp*", "the QOS's group limit is reached; other jobs of the QOS must end first"},
    {"QOS*", "a limit of the quality of service (QOS) is reached"},
    {"AssocGrp*", "the Slurm account's group limit is reached; its other jobs must end first"},
    {"AssocMax*", "a limit of the Slurm account is reached"},
    {"Cleaning", "the node is still cleaning up after a previous job"},
    {"Prolog", "the job's prolog is running"},
    {"FrontEndDown", "no front end node is available"},
    {"PowerUpNode", "a powered-down node is starting for it"},
    {"Scheduling", "the scheduler is looking at it"},
};

static const char *find_words(const struct words *w, size_t n, const char *reason)
{
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(w[i].slurm);
        if (w[i].slurm[len - 1] == '*') {
            if (strncmp(reason, w[i].slurm, len - 1) == 0)
                return w[i].plain;
        } else if (strcmp(reason, w[i].slurm) == 0) {
            return w[i].plain;
        }
    }
    return NULL;
}

void slurm_pending_words(const char *reason, char *out, size_t cap)
{
    if (!reason || !*reason)
        reason = "None";
    const char *plain =
        find_words(pending_words, sizeof pending_words / sizeof pending_words[0], reason);
    if (!plain)
        plain = "waiting in the cluster's queue";
    /* Slurm's word, without the node list ReqNodeNotAvail may carry. */
    int n = (int)strcspn(reason, ",(");
    while (n > 0 && reason[n - 1] == ' ')
        n--;
    text_error(out, cap, "%s (Slurm: %.*s)", plain, n > 48 ? 48 : n, reason);
    if (out && cap)
        out[0] = (char)toupper((unsigned char)out[0]);
}

static const struct words end_words[] = {
    {"COMPLETED", "the Slurm job ended without the attempt reporting its end"},
    {"CANCELLED", "the Slurm job was cancelled outside alallo (scancel or an administrator)"},
    {"FAILED", "the Slurm job failed: its script exited with an error or could not start"},
    {"TIMEOUT", "the Slurm job reached its time limit"},
    {"PREEMPTED", "the Slurm job was preempted by a job of a higher priority"},
    {"NODE_FAIL", "the node running the Slurm job failed"},
    {"BOOT_FAIL", "the node for the Slurm job failed to boot"},
    {"OUT_OF_MEMORY", "the Slurm job ran out of memory"},
    {"DEADLINE", "the Slurm job passed its deadline"},
    {"REVOKED", "the Slurm job was moved to another cluster"},
    {"SPECIAL_EXIT", "the Slurm job ended with a special exit"},
};

void slurm_end_words(const char *state, const char *reason, char *out, size_t cap)
{
    const char *plain = find_words(end_words, sizeof end_words / sizeof end_words[0], state);
    if (!plain)
        plain = "the Slurm job ended";
    if (reason && *reason && strcmp(reason, "None") != 0)
        text_error(out, cap, "%s (Slurm: %.24s, %.40s)", plain, state, reason);
    else
        text_error(out, cap, "%s (Slurm: %.24s)", plain, state);
    if (out && cap)
        out[0] = (char)toupper((unsigned char)out[0]);
}

bool slurm_parse_squeue_line(char *line, struct exec_job *j)
{
    memset(j, 0, sizeof *j);
    char *f[6];
    char *p = line;
    for (int i = 0; i < 6; i++) {
        char *bar = strchr(p, '|');
        if (!bar)
            return false;
        *bar = '\0';
        f[i] = p;
        p = bar + 1;
    }
    char *name = p;
    name[strcspn(name, "\r\n")] = '\0';
    if (!slurm_parse_job_id(f[0], j->id) || !text_copy(j->tag, sizeof j->tag, name) ||
        !text_copy(j->raw_state, sizeof j->raw_state, f[1]))
        return false;
    text_copy(j->raw_reason, sizeof j->raw_reason, f[2]);
    j->state = slurm_state_of(j->raw_state);
    j->start_ms = slurm_parse_timestamp_ms(f[3]); /* f[4], the end, is not kept */
    if (j->state != EXEC_PENDING && strcmp(f[5], "(null)") != 0)
        text_copy(j->node, sizeof j->node, f[5]);
    if (j->state == EXEC_PENDING)
        slurm_pending_words(f[2], j->reason, sizeof j->reason);
    else if (j->state == EXEC_ENDED)
        slurm_end_words(j->raw_state, f[2], j->reason, sizeof j->reason);
    return true;
}

int slurm_gres_gpus(const char *gres, const char *type)
{
    int total = 0;
    const char *p = gres;
    while (p && *p) {
        size_t len = strcspn(p, ",");
        /* Commas also sit inside "(S:0-1,3)": skip to the closing bracket. */
        const char *open = memchr(p, '(', len);
        if (open) {
            const char *close = strchr(open, ')');
            len = close ? (size_t)(close - p) + strcspn(close, ",") : strlen(p);
        }
        char item[128];
        if (len < sizeof item) {
            memcpy(item, p, len);
            item[len] = '\0';
            item[strcspn(item, "(")] = '\0';
            /* gpu:N or gpu:TYPE:N */
            char *c1 = strchr(item, ':');
            if (c1 && strncmp(item, "gpu", 3) == 0 && c1 == item + 3) {
                char *c2 = strchr(c1 + 1, ':');
                const char *t = "";
                const char *count = c1 + 1;
                if (c2) {
                    *c2 = '\0';
                    t = c1 + 1;
                    count = c2 + 1;
                }
                long v;
                if ((!*type || strcmp(type, t) == 0) && text_parse_long(count, 0, 1 << 20, &v))
                    total += (int)v;
            }
        }
        p += len;
        if (*p == ',')
            p++;
    }
    return total;
}

/* Node states that take work (sinfo %t, a '*' suffix: not responding). */
static bool node_up(const char *state)
{
    static const char *const up[] = {"idle", "alloc", "mix", "comp", "resv", "plnd", "planned"};
    size_t n = strlen(state);
    if (n == 0 || state[n - 1] == '*')
        return false;
    char base[24];
    size_t k = strcspn(state, "*~#!%$@^-");
    if (k >= sizeof base)
        return false;
    memcpy(base, state, k);
    base[k] = '\0';
    for (size_t i = 0; i < sizeof up / sizeof up[0]; i++)
        if (strcmp(base, up[i]) == 0)
            return true;
    return false;
}

bool slurm_add_sinfo_line(char *line, const char *gpu_type, struct exec_capacity *c)
{
    char *f[5];
    char *p = line;
    for (int i = 0; i < 4; i++) {
        char *bar = strchr(p, '|');
        if (!bar)
            return false;
        *bar = '\0';
        f[i] = p;
        p = bar + 1;
    }
    f[4] = p;
    f[4][strcspn(f[4], "\r\n ")] = '\0';
    long cpus, mem;
    if (!text_parse_long(f[1], 0, 1 << 24, &cpus))
        return false;
    /* %m may read "4000+" when nodes differ; the line is per node (-N). */
    f[2][strcspn(f[2], "+")] = '\0';
    if (!text_parse_long(f[2], 0, 1L << 40, &mem))
        return false;
    c->nodes++;
    if (!node_up(f[4]))
        return true;
    int gpus = slurm_gres_gpus(f[3], gpu_type);
    c->nodes_up++;
    c->cpus += (int)cpus;
    c->mem_mb += mem;
    c->gpus += gpus;
    if (gpus > c->max_gpus_per_node)
        c->max_gpus_per_node = gpus;
    return true;
}
