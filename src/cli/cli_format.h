/* cli_format.h - how the command-line client writes what the API returns:
 * progress bars, money, time ranges, tables, and the job, estimate and
 * list views. Pure: from JSON objects to text, no network.
 *
 * Time texts come from core/job.h so that they read exactly as the help
 * page says ("40 min to 1.3 h"); money reads like the dashboard ("$0.42").
 */
#ifndef ALALLO_CLI_FORMAT_H
#define ALALLO_CLI_FORMAT_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

#define CLI_BAR_CELLS 20

/* Text from the server made safe for a terminal: every control character
 * (C0 including newline and tab, DEL, and C1 U+0080..U+009F, which some
 * terminals read as escapes) becomes a visible "\xNN" (C1: "\u00NN"), so
 * a job name or a message cannot move the cursor, clear the screen or
 * change the window title. Cut at cap, never inside an escape. Every view
 * here passes what the server sent through it. Returns buf. */
char *cli_safe_text(char *buf, size_t cap, const char *s);

/* Writes len bytes of multi-line text (a training log) to out the same
 * way, keeping newlines and tabs. */
void cli_write_safe(FILE *out, const char *s, size_t len);

/* "[#########-----------]  45%": CLI_BAR_CELLS cells, filled in proportion
 * (rounded down, so a bar is full only at 100%), percent right-aligned in
 * three places. `percent` is clamped to 0..100. Returns buf. */
char *cli_progress_bar(char *buf, size_t cap, int percent);

/* "$0.42"; under a cent but above zero three significant digits ("$0.00312");
 * other currencies "0.42 EUR"; "-" when amount is not a number. */
char *cli_money(char *buf, size_t cap, const json_t *amount, const char *currency);

/* "A to B"; equal ends read once; a missing end leaves the other. */
char *cli_money_range(char *buf, size_t cap, const json_t *low, const json_t *high,
                      const char *currency);

/* The job's progress percent: a succeeded job 100, else progress.percent,
 * else from steps_done / max_steps. */
int cli_job_percent(const json_t *job);

/* "Supervised fine-tuning, 4-bit". */
char *cli_job_method(char *buf, size_t cap, const json_t *job);

/* Time left while the job is queued, running or re-scheduling, from
 * time_left.low_s/high_s by the help page's rule ("40 min to 1.3 h" or
 * "2.4 h"); time_left.text when the numbers are absent; "-" once ended or
 * unknown. */
char *cli_job_time_left(char *buf, size_t cap, const json_t *job);

/* The price column: while active the estimated range and " (estimate)";
 * once ended what was paid (charged less refunded); a failed job
 * "$0.00 (not charged)". */
char *cli_job_price(char *buf, size_t cap, const json_t *job);

/* An estimate's time range text by the estimate rule, from time.low_s and
 * time.high_s (time.text when they are absent). */
char *cli_estimate_time(char *buf, size_t cap, const json_t *estimate);

/* ---- tables ------------------------------------------------------------ */

#define CLI_TABLE_MAX_COLS 10

struct cli_table {
    int ncols;
    const char *head[CLI_TABLE_MAX_COLS];
    char **cells;   /* rows × ncols strings, owned */
    int nrows, caprows;
};

/* Starts a table with `ncols` headings (static strings). */
void cli_table_init(struct cli_table *t /* OUT */, int ncols, const char *const head[]);

/* Adds a row of ncols strings (copied; NULL reads as ""). Returns -1 on out
 * of memory. */
int cli_table_add(struct cli_table *t, const char *const row[]);

/* Prints the headings and rows, columns two spaces apart, padded to the
 * widest cell in characters (UTF-8 aware), with no trailing spaces. */
void cli_table_print(const struct cli_table *t, FILE *out);

void cli_table_free(struct cli_table *t);

/* Characters (UTF-8 code points) in s. */
size_t cli_text_width(const char *s);

/* ---- views ------------------------------------------------------------- */

/* `alallo jobs`: a table of the list answer's `data` (id, name, method,
 * status, progress, time left, price). "No jobs yet." when empty. */
void cli_print_jobs(FILE *out, const json_t *list);

/* `alallo jobs show`: the job object; `checkpoints` (a list answer, may be
 * NULL) under it. */
void cli_print_job(FILE *out, const json_t *job, const json_t *checkpoints);

/* `alallo estimate`: time range, price range, plan, and the no-capacity
 * sentence when `message` carries it. */
void cli_print_estimate(FILE *out, const json_t *estimate);

/* `alallo files list`, `models`, `workers`, `ledger`: tables of `data`. */
void cli_print_files(FILE *out, const json_t *list);
void cli_print_models(FILE *out, const json_t *list);
void cli_print_workers(FILE *out, const json_t *list);
void cli_print_ledger(FILE *out, const json_t *list);

/* A size in bytes as "2.0 GiB", "512 MiB", "900 B". */
char *cli_bytes(char *buf, size_t cap, double bytes);

#endif
