/* cli_format.c - text forms of API objects for the command line. */
#include "cli/cli_format.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/job.h"

/* ---- small values ------------------------------------------------------ */

static const char *str(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

/* The escape of the control character at s (n bytes left) into out (at
 * least 7 bytes); 0 when s does not start with one, else the bytes it
 * spans. keep_lines leaves newlines and tabs alone. */
static size_t control_escape(const unsigned char *s, size_t n, bool keep_lines, char out[7])
{
    if (keep_lines && (s[0] == '\n' || s[0] == '\t'))
        return 0;
    if (s[0] < 0x20 || s[0] == 0x7f) {
        snprintf(out, 7, "\\x%02x", s[0]);
        return 1;
    }
    if (n >= 2 && s[0] == 0xc2 && s[1] >= 0x80 && s[1] <= 0x9f) {
        snprintf(out, 7, "\\u%04x", s[1]);
        return 2;
    }
    return 0;
}

char *cli_safe_text(char *buf, size_t cap, const char *s)
{
    size_t o = 0, n = s ? strlen(s) : 0;
    if (cap == 0)
        return buf;
    for (size_t i = 0; i < n;) {
        char esc[7];
        size_t used = control_escape((const unsigned char *)s + i, n - i, false, esc);
        const char *piece = used ? esc : s + i;
        size_t len = used ? strlen(esc) : 1;
        if (o + len >= cap)
            break;
        memcpy(buf + o, piece, len);
        o += len;
        i += used ? used : 1;
    }
    buf[o] = '\0';
    return buf;
}

void cli_write_safe(FILE *out, const char *s, size_t len)
{
    for (size_t i = 0; i < len;) {
        char esc[7];
        size_t used = control_escape((const unsigned char *)s + i, len - i, true, esc);
        if (used) {
            fputs(esc, out);
            i += used;
        } else {
            fputc(s[i++], out);
        }
    }
}

static bool number_of(const json_t *v, double *out)
{
    if (!json_is_number(v))
        return false;
    double d = json_number_value(v);
    if (!isfinite(d))
        return false;
    *out = d;
    return true;
}

static bool num(const json_t *obj, const char *key, double *out)
{
    return number_of(json_object_get(obj, key), out);
}

char *cli_progress_bar(char *buf, size_t cap, int percent)
{
    if (percent < 0)
        percent = 0;
    if (percent > 100)
        percent = 100;
    int filled = percent * CLI_BAR_CELLS / 100;
    char cells[CLI_BAR_CELLS + 1];
    for (int i = 0; i < CLI_BAR_CELLS; i++)
        cells[i] = i < filled ? '#' : '-';
    cells[CLI_BAR_CELLS] = '\0';
    snprintf(buf, cap, "[%s] %3d%%", cells, percent);
    return buf;
}

/* exact: to the ledger's micro, trailing zeros dropped down to cents
 * ("$0.0579", "$0.06"), so that amounts shown side by side add up;
 * otherwise cents, or three significant digits below a cent. */
static char *money_text(char *buf, size_t cap, double a, const char *currency, bool exact)
{
    double m = fabs(a);
    char body[64];
    if (exact) {
        snprintf(body, sizeof body, "%.6f", m);
        size_t n = strlen(body);
        while (n > 0 && body[n - 1] == '0' && n > strcspn(body, ".") + 3)
            body[--n] = '\0';
    } else if (a != 0 && m < 0.01) {
        int digits = 2 - (int)floor(log10(m));
        if (digits > 8)
            digits = 8;
        snprintf(body, sizeof body, "%.*f", digits, m);
        size_t n = strlen(body);
        while (n > 0 && body[n - 1] == '0')
            body[--n] = '\0';
    } else {
        snprintf(body, sizeof body, "%.2f", m);
    }
    const char *sign = a < 0 && strcmp(body, "0.00") != 0 ? "-" : "";
    if (!currency || !*currency || strcasecmp(currency, "usd") == 0) {
        snprintf(buf, cap, "%s$%s", sign, body);
    } else {
        char cur[16];
        size_t i = 0;
        for (; currency[i] && i < sizeof cur - 1; i++)
            cur[i] = (char)(currency[i] >= 'a' && currency[i] <= 'z' ? currency[i] - 32
                                                                     : currency[i]);
        cur[i] = '\0';
        snprintf(buf, cap, "%s%s %s", sign, body, cur);
    }
    return buf;
}

static char *money_value(char *buf, size_t cap, double a, const char *currency)
{
    return money_text(buf, cap, a, currency, false);
}

char *cli_money(char *buf, size_t cap, const json_t *amount, const char *currency)
{
    double a;
    if (!number_of(amount, &a)) {
        snprintf(buf, cap, "-");
        return buf;
    }
    return money_value(buf, cap, a, currency);
}

char *cli_money_range(char *buf, size_t cap, const json_t *low, const json_t *high,
                      const char *currency)
{
    char a[64], b[64];
    cli_money(a, sizeof a, low, currency);
    cli_money(b, sizeof b, high, currency);
    double x;
    if (!number_of(low, &x))
        snprintf(buf, cap, "%s", b);
    else if (!number_of(high, &x) || strcmp(a, b) == 0)
        snprintf(buf, cap, "%s", a);
    else
        snprintf(buf, cap, "%s to %s", a, b);
    return buf;
}

static bool is_active(const char *status)
{
    return status && (strcmp(status, "queued") == 0 || strcmp(status, "running") == 0 ||
                      strcmp(status, "re-scheduling") == 0 || strcmp(status, "cancelling") == 0);
}

int cli_job_percent(const json_t *job)
{
    const char *status = str(job, "status");
    if (status && strcmp(status, "succeeded") == 0)
        return 100;
    const json_t *p = json_object_get(job, "progress");
    double pct, done, max;
    if (num(p, "percent", &pct)) {
        /* the server's number wins */
    } else if (num(p, "steps_done", &done) && num(p, "max_steps", &max) && max > 0) {
        pct = 100.0 * done / max;
    } else {
        pct = 0;
    }
    pct = floor(pct);
    return pct < 0 ? 0 : pct > 100 ? 100 : (int)pct;
}

char *cli_job_method(char *buf, size_t cap, const json_t *job)
{
    const char *method = str(job, "training_method");
    if (!method || !*method)
        method = "Supervised fine-tuning";
    const char *precision = str(job, "precision");
    if (precision && *precision)
        snprintf(buf, cap, "%s, %s", method, precision);
    else
        snprintf(buf, cap, "%s", method);
    return buf;
}

char *cli_job_time_left(char *buf, size_t cap, const json_t *job)
{
    const char *status = str(job, "status");
    snprintf(buf, cap, "-");
    if (!is_active(status) || strcmp(status, "cancelling") == 0)
        return buf;
    const json_t *t = json_object_get(job, "time_left");
    double low, high;
    if (num(t, "low_s", &low) && num(t, "high_s", &high)) {
        job_time_left_range_text(buf, cap, low, high);
    } else if (str(t, "text") && *str(t, "text")) {
        snprintf(buf, cap, "%s", str(t, "text"));
    }
    if (!buf[0])
        snprintf(buf, cap, "-");
    return buf;
}

char *cli_job_price(char *buf, size_t cap, const json_t *job)
{
    const char *status = str(job, "status");
    const json_t *price = json_object_get(job, "price");
    const json_t *est = json_object_get(json_object_get(job, "estimate"), "price");
    const char *currency = str(price, "currency");
    if (!currency)
        currency = str(est, "currency");
    char m[96];
    if (status && strcmp(status, "failed") == 0) {
        snprintf(buf, cap, "%s (not charged)", money_value(m, sizeof m, 0, currency));
    } else if (!is_active(status)) {
        double charged = 0, refunded = 0;
        num(price, "charged", &charged);
        num(price, "refunded", &refunded);
        double net = charged - refunded;
        snprintf(buf, cap, "%s (charged)", money_value(m, sizeof m, net > 0 ? net : 0, currency));
    } else {
        double x;
        if (num(est, "low", &x) || num(est, "high", &x)) {
            char r[200];
            const char *ec = str(est, "currency");
            cli_money_range(r, sizeof r, json_object_get(est, "low"),
                            json_object_get(est, "high"), ec ? ec : currency);
            snprintf(buf, cap, "%s (estimate)", r);
        } else {
            snprintf(buf, cap, "-");
        }
    }
    return buf;
}

char *cli_estimate_time(char *buf, size_t cap, const json_t *estimate)
{
    const json_t *t = json_object_get(estimate, "time");
    double low, high;
    if (num(t, "low_s", &low) && num(t, "high_s", &high))
        job_estimate_range_text(buf, cap, low, high);
    else if (str(t, "text"))
        snprintf(buf, cap, "%s", str(t, "text"));
    else
        snprintf(buf, cap, "-");
    return buf;
}

char *cli_bytes(char *buf, size_t cap, double bytes)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%.0f B", bytes);
    else
        snprintf(buf, cap, "%.1f %s", bytes, units[u]);
    return buf;
}

/* "2024-05-01 12:00" in local time from Unix seconds; "-" when absent. */
static char *when(char *buf, size_t cap, const json_t *v)
{
    double s;
    if (!number_of(v, &s) || s <= 0) {
        snprintf(buf, cap, "-");
        return buf;
    }
    time_t t = (time_t)s;
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%d %H:%M", &tm);
    return buf;
}

/* ---- tables ------------------------------------------------------------ */

void cli_table_init(struct cli_table *t, int ncols, const char *const head[])
{
    memset(t, 0, sizeof *t);
    t->ncols = ncols > CLI_TABLE_MAX_COLS ? CLI_TABLE_MAX_COLS : ncols;
    for (int i = 0; i < t->ncols; i++)
        t->head[i] = head[i];
}

int cli_table_add(struct cli_table *t, const char *const row[])
{
    if (t->nrows == t->caprows) {
        int cap = t->caprows ? t->caprows * 2 : 16;
        char **grown = realloc(t->cells, (size_t)cap * (size_t)t->ncols * sizeof *grown);
        if (!grown)
            return -1;
        t->cells = grown;
        t->caprows = cap;
    }
    char **cells = t->cells + (size_t)t->nrows * (size_t)t->ncols;
    for (int i = 0; i < t->ncols; i++) {
        size_t cap = 4 * strlen(row[i] ? row[i] : "") + 1; /* one byte escapes to four */
        cells[i] = malloc(cap);
        if (cells[i])
            cli_safe_text(cells[i], cap, row[i]);
        if (!cells[i]) {
            for (int j = 0; j < i; j++)
                free(cells[j]);
            return -1;
        }
    }
    t->nrows++;
    return 0;
}

size_t cli_text_width(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80)
            n++;
    return n;
}

static void print_row(FILE *out, const struct cli_table *t, const char *const cells[],
                      const size_t width[])
{
    /* The last non-empty cell ends the line: no trailing spaces. */
    int last = t->ncols - 1;
    while (last > 0 && !cells[last][0])
        last--;
    for (int i = 0; i <= last; i++) {
        fputs(cells[i], out);
        if (i < last)
            for (size_t k = cli_text_width(cells[i]); k < width[i] + 2; k++)
                fputc(' ', out);
    }
    fputc('\n', out);
}

void cli_table_print(const struct cli_table *t, FILE *out)
{
    size_t width[CLI_TABLE_MAX_COLS] = {0};
    for (int i = 0; i < t->ncols; i++)
        width[i] = cli_text_width(t->head[i]);
    for (int r = 0; r < t->nrows; r++)
        for (int i = 0; i < t->ncols; i++) {
            size_t w = cli_text_width(t->cells[(size_t)r * (size_t)t->ncols + (size_t)i]);
            if (w > width[i])
                width[i] = w;
        }
    print_row(out, t, t->head, width);
    for (int r = 0; r < t->nrows; r++)
        print_row(out, t, (const char *const *)t->cells + (size_t)r * (size_t)t->ncols, width);
}

void cli_table_free(struct cli_table *t)
{
    for (size_t i = 0; i < (size_t)t->nrows * (size_t)t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    t->cells = NULL;
    t->nrows = t->caprows = 0;
}

/* Cuts a cell to `max` characters with "..." so one long name does not
 * push every other column off the screen. */
static const char *cut(char *buf, size_t cap, const char *s, size_t max)
{
    if (!s)
        return "";
    if (cli_text_width(s) <= max) {
        snprintf(buf, cap, "%s", s);
        return buf;
    }
    size_t chars = 0, i = 0;
    while (s[i] && chars < max - 3 && i + 4 < cap) {
        i++;
        while (((unsigned char)s[i] & 0xC0) == 0x80)
            i++;
        chars++;
    }
    snprintf(buf, cap, "%.*s...", (int)i, s);
    return buf;
}

/* ---- views ------------------------------------------------------------- */

void cli_print_jobs(FILE *out, const json_t *list)
{
    const json_t *data = json_object_get(list, "data");
    if (json_array_size(data) == 0) {
        fputs("No jobs yet.\n", out);
        return;
    }
    static const char *const head[] = {"ID",       "NAME",      "METHOD", "STATUS",
                                       "PROGRESS", "TIME LEFT", "PRICE"};
    struct cli_table t;
    cli_table_init(&t, 7, head);
    size_t i;
    const json_t *job;
    json_array_foreach(data, i, job) {
        char name[128], method[96], bar[64], left[64], price[128];
        cli_progress_bar(bar, sizeof bar, cli_job_percent(job));
        const char *n = str(job, "name");
        const char *row[] = {
            str(job, "id"),
            cut(name, sizeof name, n && *n ? n : "-", 32),
            cli_job_method(method, sizeof method, job),
            str(job, "status"),
            bar,
            cli_job_time_left(left, sizeof left, job),
            cli_job_price(price, sizeof price, job),
        };
        cli_table_add(&t, row);
    }
    cli_table_print(&t, out);
    cli_table_free(&t);
}

static void field(FILE *out, const char *label, const char *value)
{
    char safe[2048];
    fprintf(out, "%-22s %s\n", label,
            value && *value ? cli_safe_text(safe, sizeof safe, value) : "-");
}

void cli_print_job(FILE *out, const json_t *job, const json_t *checkpoints)
{
    char buf[512], buf2[256];
    const char *status = str(job, "status");
    const char *message = str(job, "message");
    const char *name = str(job, "name");
    char id_safe[256], name_safe[512];
    fprintf(out, "%s%s%s\n", cli_safe_text(id_safe, sizeof id_safe, str(job, "id") ? str(job, "id") : "?"),
            name && *name ? "  " : "",
            name && *name ? cli_safe_text(name_safe, sizeof name_safe, name) : "");
    field(out, "Status:", status);
    if (message && *message)
        field(out, "Message:", message);

    const json_t *p = json_object_get(job, "progress");
    double done = 0, max = 0;
    num(p, "steps_done", &done);
    bool has_max = num(p, "max_steps", &max) && max > 0;
    if (status && strcmp(status, "succeeded") == 0 && has_max)
        done = max;
    cli_progress_bar(buf2, sizeof buf2, cli_job_percent(job));
    if (has_max)
        snprintf(buf, sizeof buf, "%s  (%.0f / %.0f steps)", buf2, done, max);
    else
        snprintf(buf, sizeof buf, "%s", buf2);
    field(out, "Progress:", buf);

    cli_job_time_left(buf2, sizeof buf2, job);
    const char *basis = str(json_object_get(job, "time_left"), "basis");
    if (strcmp(buf2, "-") != 0 && basis)
        snprintf(buf, sizeof buf, "%s  (%s)", buf2,
                 strcmp(basis, "pace") == 0 ? "from the job's pace" : "from the estimate");
    else
        snprintf(buf, sizeof buf, "%s", buf2);
    field(out, "Time left (estimate):", buf);

    const json_t *est = json_object_get(job, "estimate");
    if (est && !json_is_null(est)) {
        const json_t *ep = json_object_get(est, "price");
        char t[128], m[200];
        cli_estimate_time(t, sizeof t, est);
        cli_money_range(m, sizeof m, json_object_get(ep, "low"), json_object_get(ep, "high"),
                        str(ep, "currency"));
        /* A dash alone would read "Estimate: -, -"; say which part is missing. */
        bool no_t = strcmp(t, "-") == 0, no_m = strcmp(m, "-") == 0;
        if (no_t && no_m)
            snprintf(buf, sizeof buf, "none (the job was not estimated)");
        else if (no_t)
            snprintf(buf, sizeof buf, "time not known, %s", m);
        else if (no_m)
            snprintf(buf, sizeof buf, "%s, price not known", t);
        else
            snprintf(buf, sizeof buf, "%s, %s", t, m);
        field(out, "Estimate:", buf);
    }
    /* What the user pays first (charged less refunded), the ledger's two
     * totals after it: "$0.0021 (charged $0.06, refunded $0.0579)", each to the
     * ledger's micro so that they add up; the
     * dashboard's job page says the same (web/js/format.js priceLine). */
    const json_t *price = json_object_get(job, "price");
    char c[64], r[64], paid[64];
    double charged = 0, refunded = 0;
    num(price, "charged", &charged);
    num(price, "refunded", &refunded);
    /* In micros, as the ledger keeps it, so that 0.06 - 0.0579 reads 0.0021. */
    double net = (double)llround((charged - refunded) * 1e6) / 1e6;
    const char *cur = str(price, "currency");
    money_text(paid, sizeof paid, net > 0 ? net : 0, cur, true);
    money_text(c, sizeof c, charged, cur, true);
    money_text(r, sizeof r, refunded, cur, true);
    snprintf(buf, sizeof buf, "%s (charged %s, refunded %s)", paid, c, r);
    field(out, "Price:", buf);
    /* What a cancel would cost now, while one is still possible. */
    const json_t *cn = json_object_get(price, "cancel_now");
    if (cn && json_is_number(cn) && status &&
        (strcmp(status, "queued") == 0 || strcmp(status, "running") == 0 ||
         strcmp(status, "re-scheduling") == 0)) {
        cli_money(c, sizeof c, cn, str(price, "currency"));
        field(out, "Cancel now:", c);
    }

    field(out, "Model:", str(job, "model"));
    field(out, "Training method:", cli_job_method(buf, sizeof buf, job));
    const char *goal = str(job, "goal");
    char goal_text[80];
    if (goal && strcmp(goal, "finish_by") == 0) {
        char by[48];
        snprintf(goal_text, sizeof goal_text, "Finish by %s",
                 when(by, sizeof by, json_object_get(job, "finish_by")));
        goal = goal_text;
    }
    field(out, "Goal:", goal && strcmp(goal, "fastest_finish") == 0 ? "Fastest finish"
                        : goal && strcmp(goal, "lowest_cost") == 0  ? "Lowest cost"
                                                                    : goal);
    field(out, "Training file:", str(job, "training_file"));
    field(out, "Fine-tuned model:", str(job, "fine_tuned_model"));
    field(out, "Created:", when(buf, sizeof buf, json_object_get(job, "created_at")));

    const json_t *attempts = json_object_get(job, "attempts");
    if (json_array_size(attempts) > 0) {
        fputs("\nAttempts:\n", out);
        static const char *const head[] = {"  ID", "WORKER", "STATUS", "STEPS", "REASON"};
        struct cli_table t;
        cli_table_init(&t, 5, head);
        size_t i;
        const json_t *a;
        json_array_foreach(attempts, i, a) {
            double s0 = 0, s1 = 0;
            bool h0 = num(a, "start_step", &s0), h1 = num(a, "end_step", &s1);
            char steps[64], id[96];
            if (h0 && h1)
                snprintf(steps, sizeof steps, "%.0f to %.0f", s0, s1);
            else if (h0)
                snprintf(steps, sizeof steps, "from %.0f", s0);
            else
                snprintf(steps, sizeof steps, "-");
            snprintf(id, sizeof id, "  %s", str(a, "id") ? str(a, "id") : "?");
            const char *row[] = {id, str(a, "worker"), str(a, "status"), steps, str(a, "reason")};
            cli_table_add(&t, row);
        }
        cli_table_print(&t, out);
        cli_table_free(&t);
    }
    const json_t *cks = json_object_get(checkpoints, "data");
    if (json_array_size(cks) > 0) {
        fputs("\nCheckpoints:\n", out);
        static const char *const head[] = {"  STEP", "TRAIN LOSS", "CHECKPOINT"};
        struct cli_table t;
        cli_table_init(&t, 3, head);
        size_t i;
        const json_t *ck;
        json_array_foreach(cks, i, ck) {
            char step[32] = "  -", loss[32] = "-";
            double v;
            if (num(ck, "step_number", &v))
                snprintf(step, sizeof step, "  %.0f", v);
            if (num(json_object_get(ck, "metrics"), "train_loss", &v))
                snprintf(loss, sizeof loss, "%.4f", v);
            const char *id = str(ck, "fine_tuned_model_checkpoint");
            const char *row[] = {step, loss, id ? id : str(ck, "id")};
            cli_table_add(&t, row);
        }
        cli_table_print(&t, out);
        cli_table_free(&t);
    }
}

void cli_print_estimate(FILE *out, const json_t *estimate)
{
    char t[128], m[200];
    const json_t *p = json_object_get(estimate, "price");
    cli_estimate_time(t, sizeof t, estimate);
    cli_money_range(m, sizeof m, json_object_get(p, "low"), json_object_get(p, "high"),
                    str(p, "currency"));
    field(out, "Time:", t);
    field(out, "Price:", m);
    const json_t *plan = json_object_get(estimate, "plan");
    double mem;
    if (num(plan, "memory_bytes", &mem)) {
        char b[64], line[200];
        const char *w = str(plan, "worker");
        snprintf(line, sizeof line, "%s of memory%s%s", cli_bytes(b, sizeof b, mem),
                 w ? ", on worker " : "", w ? w : "");
        field(out, "Plan:", line);
    }
    /* goal finish_by: the deadline, and the range's upper end as a time */
    const json_t *fb = json_object_get(estimate, "finish_by");
    if (json_is_object(fb)) {
        char by[48], hi[48], line[160];
        when(by, sizeof by, json_object_get(fb, "deadline"));
        when(hi, sizeof hi, json_object_get(fb, "high_at"));
        const json_t *hv = json_object_get(fb, "high_at");
        if (json_is_true(json_object_get(fb, "met")) && json_is_number(hv))
            snprintf(line, sizeof line, "%s (done by %s at the latest)", by, hi);
        else
            snprintf(line, sizeof line, "%s", by);
        field(out, "Finish by:", line);
    }
    const char *msg = str(estimate, "message");
    char safe[1024];
    if (msg && *msg)
        fprintf(out, "%s\n", cli_safe_text(safe, sizeof safe, msg));
    const char *limit = str(estimate, "time_limit_message");
    if (limit && *limit)
        fprintf(out, "%s\n", cli_safe_text(safe, sizeof safe, limit));
}

void cli_print_files(FILE *out, const json_t *list)
{
    const json_t *data = json_object_get(list, "data");
    if (json_array_size(data) == 0) {
        fputs("No files yet.\n", out);
        return;
    }
    static const char *const head[] = {"ID", "FILENAME", "BYTES", "PURPOSE", "CREATED"};
    struct cli_table t;
    cli_table_init(&t, 5, head);
    size_t i;
    const json_t *f;
    json_array_foreach(data, i, f) {
        char bytes[32] = "-", created[64], name[128];
        double b;
        if (num(f, "bytes", &b))
            snprintf(bytes, sizeof bytes, "%.0f", b);
        const char *row[] = {str(f, "id"), cut(name, sizeof name, str(f, "filename"), 40), bytes,
                             str(f, "purpose"), when(created, sizeof created,
                                                     json_object_get(f, "created_at"))};
        cli_table_add(&t, row);
    }
    cli_table_print(&t, out);
    cli_table_free(&t);
}

/* "16-bit LoRA, 4-bit LoRA": the methods of a base model that can run now
 * (`methods` [{precision, adapter, available}]). */
static char *runnable(char *buf, size_t cap, const json_t *methods)
{
    size_t n = 0, i;
    const json_t *m;
    buf[0] = '\0';
    json_array_foreach(methods, i, m) {
        if (json_is_false(json_object_get(m, "available")))
            continue;
        const char *p = str(m, "precision"), *a = str(m, "adapter");
        int w = snprintf(buf + n, cap - n, "%s%s%s%s", n ? ", " : "", p ? p : "?",
                         a ? " " : "", a ? (strcmp(a, "lora") == 0 ? "LoRA" : a) : "");
        if (w < 0 || (size_t)w >= cap - n)
            break;
        n += (size_t)w;
    }
    if (!buf[0])
        snprintf(buf, cap, "none now");
    return buf;
}

void cli_print_models(FILE *out, const json_t *list)
{
    const json_t *data = json_object_get(list, "data");
    if (json_array_size(data) == 0) {
        fputs("No models.\n", out);
        return;
    }
    static const char *const head[] = {"ID", "KIND", "PARAMETERS", "CAN RUN NOW"};
    struct cli_table t;
    cli_table_init(&t, 4, head);
    size_t i;
    const json_t *m;
    json_array_foreach(data, i, m) {
        char params[32] = "-", can[300];
        double p;
        if (num(json_object_get(m, "size"), "parameters", &p) || num(m, "parameters", &p)) {
            if (p >= 1e9)
                snprintf(params, sizeof params, "%.1fB", p / 1e9);
            else if (p >= 1e6)
                snprintf(params, sizeof params, "%.1fM", p / 1e6);
            else if (p >= 1e3)
                snprintf(params, sizeof params, "%.1fK", p / 1e3);
            else
                snprintf(params, sizeof params, "%.0f", p);
        }
        const char *kind = str(m, "kind");
        bool base = !kind || strcmp(kind, "fine-tuned") != 0;
        if (!base)
            snprintf(can, sizeof can, "from %s", str(m, "base_model") ? str(m, "base_model") : "?");
        const char *row[] = {str(m, "id"), kind, params,
                             base ? runnable(can, sizeof can, json_object_get(m, "methods"))
                                  : can};
        cli_table_add(&t, row);
    }
    cli_table_print(&t, out);
    cli_table_free(&t);
}

void cli_print_workers(FILE *out, const json_t *list)
{
    const json_t *data = json_object_get(list, "data");
    if (json_array_size(data) == 0) {
        fputs("No workers.\n", out);
        return;
    }
    static const char *const head[] = {"NAME",   "STATE", "CLASS",   "CPUS",  "MEMORY",
                                       "GPUS",   "PRICE/H", "SPEED", "RUNNING"};
    struct cli_table t;
    cli_table_init(&t, 9, head);
    size_t i;
    const json_t *w;
    json_array_foreach(data, i, w) {
        char cpus[16] = "-", mem[32] = "-", gpus[96] = "-", price[64], speed[64] = "unknown";
        /* The declaration sits in `resources`; top-level fields are read too. */
        const json_t *res = json_object_get(w, "resources");
        double v;
        if (num(res, "cpus", &v) || num(w, "cpus", &v))
            snprintf(cpus, sizeof cpus, "%.0f", v);
        if (num(res, "mem_bytes", &v) || num(w, "mem_bytes", &v))
            cli_bytes(mem, sizeof mem, v);
        /* "8 x h200 (141 GiB)": count, kind and the memory of one GPU */
        const json_t *g = json_object_get(res, "gpus");
        double gmem;
        if (num(g, "count", &v) && str(g, "kind") && num(g, "mem_bytes", &gmem)) {
            char b[32];
            /* a worker whose trainer was built without CUDA trains on its
             * CPUs: its GPUs are declared but idle */
            const char *trainer = str(res, "trainer");
            snprintf(gpus, sizeof gpus, "%.0f x %s (%s)%s", v, str(g, "kind"),
                     cli_bytes(b, sizeof b, gmem),
                     trainer && strcmp(trainer, "cpu") == 0 ? " unused: no CUDA" : "");
        }
        cli_money(price, sizeof price, json_object_get(w, "price_per_hour"), str(w, "currency"));
        if (num(json_object_get(w, "speed"), "tokens_per_s", &v) && v > 0)
            snprintf(speed, sizeof speed, "%.0f tokens/s", v);
        const char *running = str(w, "running");
        const char *row[] = {str(w, "name"), str(w, "state"), str(w, "class"), cpus, mem, gpus,
                             price, speed, running ? running : "-"};
        cli_table_add(&t, row);
    }
    cli_table_print(&t, out);
    cli_table_free(&t);
}

void cli_print_ledger(FILE *out, const json_t *list)
{
    const json_t *data = json_object_get(list, "data");
    if (json_array_size(data) == 0) {
        fputs("No charges or refunds yet.\n", out);
        return;
    }
    static const char *const head[] = {"WHEN", "JOB", "KIND", "AMOUNT", "DETAIL"};
    struct cli_table t;
    cli_table_init(&t, 5, head);
    size_t i;
    const json_t *e;
    double total = 0;
    const char *currency = NULL;
    json_array_foreach(data, i, e) {
        char w[64], amount[64];
        const char *kind = str(e, "kind");
        if (!kind)
            kind = str(e, "type");
        double a = 0;
        num(e, "amount", &a);
        if (!currency)
            currency = str(e, "currency");
        /* Refunds count against the total whatever sign the server uses. */
        bool refund = kind && strcmp(kind, "refund") == 0;
        total += refund ? -fabs(a) : a;
        cli_money(amount, sizeof amount, json_object_get(e, "amount"), str(e, "currency"));
        char detail[256] = "";
        double steps, from, to;
        if (str(e, "description")) {
            snprintf(detail, sizeof detail, "%s", str(e, "description"));
        } else if (num(e, "steps", &steps)) {
            /* "40 steps (80 to 120), attempt att-2: lost work (repeated for free)" */
            char span[64] = "";
            if (num(e, "from_step", &from) && num(e, "to_step", &to) && to > from)
                snprintf(span, sizeof span, " (%.0f to %.0f)", from, to);
            const char *attempt = str(e, "attempt");
            const char *reason = str(e, "reason");
            snprintf(detail, sizeof detail, "%.0f steps%s%s%s%s%s", steps, span,
                     attempt && attempt[0] ? ", attempt " : "", attempt ? attempt : "",
                     reason ? ": " : "", reason ? reason : "");
        } else if (str(e, "reason")) {
            snprintf(detail, sizeof detail, "%s", str(e, "reason"));
        }
        const char *job = str(e, "job") ? str(e, "job") : str(e, "job_id");
        const char *row[] = {when(w, sizeof w, json_object_get(e, "created_at")), job, kind, amount,
                             detail};
        cli_table_add(&t, row);
    }
    cli_table_print(&t, out);
    cli_table_free(&t);
    char tot[64];
    fprintf(out, "Total: %s\n", money_value(tot, sizeof tot, total, currency));
}
