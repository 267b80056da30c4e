/* executor.c - what every engine shares: the tag of an attempt, the checks
 * made before a call reaches an engine, and the error line. */
#include "exec/executor.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/ids.h"
#include "core/text.h"

bool exec_tag_for(const char *attempt_id, char tag[EXEC_TAG_MAX])
{
    if (!ids_valid(attempt_id))
        return false;
    return text_printf(tag, EXEC_TAG_MAX, "%s%s", EXEC_TAG_PREFIX, attempt_id);
}

bool exec_attempt_of(const char *tag, char *attempt_id, size_t cap)
{
    size_t n = strlen(EXEC_TAG_PREFIX);
    if (strncmp(tag, EXEC_TAG_PREFIX, n) != 0 ||
        strncmp(tag, EXEC_BENCH_PREFIX, strlen(EXEC_BENCH_PREFIX)) == 0 ||
        strncmp(tag, EXEC_SERVE_PREFIX, strlen(EXEC_SERVE_PREFIX)) == 0 || !ids_valid(tag + n))
        return false;
    return text_copy(attempt_id, cap, tag + n);
}

bool exec_bench_tag_for(const char *pool, char tag[EXEC_TAG_MAX])
{
    if (!ids_valid_name(pool, EXEC_TAG_MAX - strlen(EXEC_BENCH_PREFIX)))
        return false;
    return text_printf(tag, EXEC_TAG_MAX, "%s%s", EXEC_BENCH_PREFIX, pool);
}

bool exec_serve_tag_for(const char *id, char tag[EXEC_TAG_MAX])
{
    if (!ids_valid_name(id, EXEC_TAG_MAX - strlen(EXEC_SERVE_PREFIX)))
        return false;
    return text_printf(tag, EXEC_TAG_MAX, "%s%s", EXEC_SERVE_PREFIX, id);
}

bool exec_tag_is_alallo(const char *tag)
{
    size_t n = strlen(EXEC_BENCH_PREFIX), m = strlen(EXEC_SERVE_PREFIX);
    char id[EXEC_TAG_MAX];
    if (!tag)
        return false;
    if (strncmp(tag, EXEC_BENCH_PREFIX, n) == 0)
        return ids_valid_name(tag + n, EXEC_TAG_MAX - n);
    if (strncmp(tag, EXEC_SERVE_PREFIX, m) == 0)
        return ids_valid_name(tag + m, EXEC_TAG_MAX - m);
    return exec_attempt_of(tag, id, sizeof id);
}

bool exec_script_quote(char *out, size_t cap, const char *s)
{
    if (strchr(s, '\'') || strchr(s, '\n'))
        return false;
    size_t n = strlen(out);
    return text_printf(out + n, cap - n, "'%s'", s);
}

void executor_close(struct executor *x)
{
    if (x)
        x->ops->close(x);
}

enum alallo_err exec_fail(struct executor *x, enum alallo_err e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->error, sizeof x->error, fmt, ap);
    va_end(ap);
    text_one_line(x->error);
    return e;
}

/* A value passed to an engine as one argument: printable, one line. */
static bool plain(const char *s)
{
    return !text_has_control(s);
}

enum alallo_err executor_submit(struct executor *x, const struct exec_submit *s,
                                struct exec_receipt *r)
{
    struct exec_receipt ignored;
    if (!r)
        r = &ignored;
    memset(r, 0, sizeof *r);
    x->error[0] = '\0';
    if (!exec_tag_is_alallo(s->tag))
        return exec_fail(x, ERR_INVALID, "submit: '%.80s' is not an attempt's tag (%s<attempt id>), "
                         "a bench job's (%s<pool>) nor a serving engine's (%s<id>)",
                         s->tag, EXEC_TAG_PREFIX, EXEC_BENCH_PREFIX, EXEC_SERVE_PREFIX);
    if (s->script[0] != '/')
        return exec_fail(x, ERR_INVALID, "submit %s: the batch script must be an absolute path",
                         s->tag);
    if (s->output[0] && s->output[0] != '/')
        return exec_fail(x, ERR_INVALID, "submit %s: the output file must be an absolute path",
                         s->tag);
    if (s->cpus < 0 || s->mem_mb < 0 || s->time_limit_min < 0 || s->signal_lead_s < 0)
        return exec_fail(x, ERR_INVALID,
                         "submit %s: cpus, memory, time limit and signal lead cannot be negative",
                         s->tag);
    if (s->signal_lead_s > 65535)
        return exec_fail(x, ERR_INVALID, "submit %s: a signal lead of %d s is more than 65535 s",
                         s->tag, s->signal_lead_s);
    const char *fields[] = {s->partition, s->qos, s->account, s->constraint, s->gres,
                            s->script, s->output, s->workdir, s->comment};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (!plain(fields[i]))
            return exec_fail(x, ERR_INVALID, "submit %s: a setting holds a control character",
                             s->tag);
    return x->ops->submit_receipt(x, s, r);
}

enum alallo_err exec_submit_by_receipt(struct executor *x, const struct exec_submit *s,
                                       char id[EXEC_ID_MAX])
{
    struct exec_receipt r;
    enum alallo_err e = executor_submit(x, s, &r);
    text_copy(id, EXEC_ID_MAX, e ? "" : r.id);
    return e;
}

enum alallo_err executor_list(struct executor *x, struct exec_job *out, int cap, int *n)
{
    *n = 0;
    x->error[0] = '\0';
    if (cap < 0 || (cap > 0 && !out))
        return exec_fail(x, ERR_INVALID, "list: no room given for the jobs");
    return x->ops->list(x, out, cap, n);
}

enum alallo_err executor_cancel(struct executor *x, const char *tag)
{
    x->error[0] = '\0';
    if (!exec_tag_is_alallo(tag))
        return exec_fail(x, ERR_INVALID, "cancel: '%.80s' is not an attempt's tag",
                         tag ? tag : "");
    return x->ops->cancel(x, tag);
}

enum alallo_err executor_capacity(struct executor *x, const char *partition, const char *gpu_type,
                                  struct exec_capacity *c)
{
    memset(c, 0, sizeof *c);
    x->error[0] = '\0';
    if (!partition)
        partition = "";
    if (!gpu_type)
        gpu_type = "";
    if (!plain(partition) || !plain(gpu_type))
        return exec_fail(x, ERR_INVALID, "capacity: the partition or GPU type holds a control "
                                         "character");
    return x->ops->capacity(x, partition, gpu_type, c);
}
