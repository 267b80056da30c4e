/* grader_python.c - python graders in the sandbox (grader_python.h). */
#include "core/grader_python.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/grader.h"
#include "core/text.h"

/* alallo's runner: the only program the sandbox runs for a grader. The
 * answer goes to a copy of stdout; fd 1 becomes stderr so that the
 * source's prints cannot pose as the score. A process the source forked
 * leaves silently. */
static const char RUNNER[] =
    "import json, math, os, sys\n"
    "me = os.getpid()\n"
    "out = os.dup(1)\n"
    "os.dup2(2, 1)\n"
    "def fail(msg):\n"
    "    if os.getpid() == me:\n"
    "        sys.stderr.write('\\n' + msg + '\\n')\n"
    "        sys.stderr.flush()\n"
    "    os._exit(1)\n"
    "def said(e):\n"
    "    s = str(e)\n"
    "    return type(e).__name__ + (': ' + s if s else '')\n"
    "req = json.loads(sys.stdin.buffer.read())\n"
    "try:\n"
    "    code = compile(req['source'], 'grader.py', 'exec')\n"
    "except SyntaxError as e:\n"
    "    fail('the source does not compile: %s (line %s)' % (e.msg, e.lineno))\n"
    "except BaseException as e:\n"
    "    fail('the source does not compile: ' + said(e))\n"
    "ns = {'__name__': 'grader'}\n"
    "try:\n"
    "    exec(code, ns)\n"
    "    grade = ns.get('grade')\n"
    "    if not callable(grade):\n"
    "        fail('the source defines no function grade(sample, item)')\n"
    "    v = 0.0 if req['mode'] == 'check' else grade(req['sample'], req['item'])\n"
    "    if os.getpid() != me:\n"
    "        os._exit(0)\n"
    "    if not isinstance(v, (int, float)):\n"
    "        fail('grade returned %s, not a number' % type(v).__name__)\n"
    "    v = float(v)\n"
    "except BaseException as e:\n"
    "    fail(said(e))\n"
    "if not math.isfinite(v):\n"
    "    fail('grade returned %r, not a finite number' % v)\n"
    "os.write(out, (repr(v) + '\\n').encode())\n"
    "os._exit(0)\n";

/* Runs the runner on req; the score in *score, or false with a sentence. */
static bool run_runner(json_t *req, const struct sandbox_limits *lim, double *score, char *err,
                       size_t errcap)
{
    char *in = json_dumps(req, JSON_COMPACT);
    if (!in) {
        text_error(err, errcap, "out of memory");
        return false;
    }
    struct child_result r;
    char why[300];
    int rc = sandbox_python(RUNNER, in, strlen(in), lim, &r, why, sizeof why);
    free(in);
    if (rc != 0) {
        text_error(err, errcap, "%s", why);
        return false;
    }
    bool ok = false;
    char line[300];
    sandbox_last_line(&r, line, sizeof line);
    /* bwrap answers 128 + the signal that ended the program */
    int sig = r.signal ? r.signal
              : r.exit_status > 128 && r.exit_status < 128 + 65 ? r.exit_status - 128
                                                                 : 0;
    if (r.too_large) {
        text_error(err, errcap, "the python grader wrote more than %zu bytes", lim->out_cap);
    } else if (r.timed_out) {
        text_error(err, errcap, "the python grader ran past its time limit of %.3g s",
                   (double)lim->wall_ms / 1000.0);
    } else if (sig == SIGXCPU || sig == SIGKILL) {
        text_error(err, errcap, "the python grader used more than its %d s of CPU", lim->cpu_s);
    } else if (sig) {
        text_error(err, errcap, "the python grader was ended by signal %d", sig);
    } else if (r.exit_status != 0) {
        text_error(err, errcap, "the python grader failed: %s",
                   strcmp(line, "MemoryError") == 0
                       ? "MemoryError (it passed its memory limit)"
                       : *line ? line : "it exited with no reason given");
    } else {
        json_t *v = json_loads(r.out ? r.out : "", JSON_DECODE_ANY, NULL);
        ok = json_is_number(v) && isfinite(json_number_value(v));
        if (ok)
            *score = json_number_value(v);
        else
            text_error(err, errcap, "the python grader answered no number");
        json_decref(v);
    }
    child_result_free(&r);
    return ok;
}

bool grader_python_run(const char *source, const char *sample, const json_t *item,
                       const struct sandbox_limits *lim, double *score, char *err, size_t errcap)
{
    json_error_t je;
    json_t *parsed = json_loads(sample, JSON_REJECT_DUPLICATES, &je);
    if (parsed && !json_is_object(parsed) && !json_is_array(parsed)) {
        json_decref(parsed);
        parsed = NULL;
    }
    json_t *req = json_pack("{s:s,s:s,s:{s:s,s:o,s:[]},s:O}", "mode", "grade", "source", source,
                            "sample", "output_text", sample, "output_json",
                            parsed ? parsed : json_null(), "output_tools", "item", item);
    if (!req) {
        text_error(err, errcap, "the answer or the data line is not valid UTF-8 text");
        return false;
    }
    bool ok = run_runner(req, lim, score, err, errcap);
    json_decref(req);
    return ok;
}

bool grader_python_compiles(const char *source, const struct sandbox_limits *lim, char *err,
                            size_t errcap)
{
    json_t *req = json_pack("{s:s,s:s}", "mode", "check", "source", source);
    double unused;
    bool ok = req && run_runner(req, lim, &unused, err, errcap);
    json_decref(req);
    return ok;
}

struct ready {
    char *param, *msg;
    size_t paramcap, msgcap;
};

/* grader_python_ready's step: one grader, when it is a python one. */
static bool ready_one(void *ctx, const json_t *g, const char *at)
{
    struct ready *r = ctx;
    const char *type = json_string_value(json_object_get(g, "type"));
    if (!type || strcmp(type, "python") != 0)
        return true;
    char why[400];
    if (!sandbox_available(why, sizeof why)) {
        snprintf(r->param, r->paramcap, "%s", at);
        text_error(r->msg, r->msgcap,
                   "python graders need a sandbox (bubblewrap with user namespaces), which "
                   "this machine does not have: %s. Use string_check, text_similarity, "
                   "score_model or multi, or ask the operator to install bubblewrap and "
                   "allow unprivileged user namespaces (docs/rft.md).",
                   why);
        return false;
    }
    struct sandbox_limits lim = sandbox_default_limits();
    if (!grader_python_compiles(json_string_value(json_object_get(g, "source")), &lim, why,
                                sizeof why)) {
        snprintf(r->param, r->paramcap, "%s.source", at);
        text_error(r->msg, r->msgcap, "%s.", why);
        return false;
    }
    return true;
}

/* grader_python_count's step. */
static bool count_one(void *ctx, const json_t *g, const char *at)
{
    (void)at;
    const char *type = json_string_value(json_object_get(g, "type"));
    if (type && strcmp(type, "python") == 0)
        (*(int *)ctx)++;
    return true;
}

int grader_python_count(const json_t *g)
{
    int n = 0;
    grader_each_leaf(g, "grader", count_one, &n);
    return n;
}

bool grader_python_ready(const json_t *g, const char *at, char *param, size_t paramcap,
                         char *msg, size_t msgcap)
{
    struct ready r = {param, msg, paramcap, msgcap};
    return grader_each_leaf(g, at, ready_one, &r);
}
