/* store_copy.c - moving a SQLite store into an empty PostgreSQL one
 * (`alallo store copy sqlite:DIR postgresql://…`).
 *
 * Both stores are first opened through store.h, so that each is at the
 * build's schema version (the SQLite one is migrated like `serve` would).
 * Then every table is read from SQLite in insertion order and streamed into
 * PostgreSQL with COPY, column by column by name (the PostgreSQL schema
 * keeps SQLite's column names), all in one transaction: a copy that fails
 * leaves the target as empty as it found it. The identity sequences are
 * moved past the copied numbers, and every table's row count is compared
 * before COMMIT.
 */
#include "store/store_copy.h"

#include <libpq-fe.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/growbuf.h"
#include "store/store_backend.h"

static const char *const tables[STORE_COPY_TABLES] = {
    "accounts", "files",       "jobs",    "attempts", "events",
    "log_lines", "checkpoints", "workers", "ledger",   "calibration",
    "webhooks",  "deliveries",  "account_settings", "integration_cursors",
};

const char *store_copy_table_name(int i)
{
    return i >= 0 && i < STORE_COPY_TABLES ? tables[i] : NULL;
}

/* One COPY chunk: sent once past 1 MiB, so its size is bounded by that and
 * one row (GROWBUF_UNBOUNDED). -1 on out of memory. */
static int buf_put(struct growbuf *b, const char *s, size_t n)
{
    return growbuf_append(b, s, n) ? -1 : 0;
}

/* Appends one value in COPY's text format. */
static int put_value(struct growbuf *b, sqlite3_stmt *st, int col)
{
    char num[40];
    switch (sqlite3_column_type(st, col)) {
    case SQLITE_NULL:
        return buf_put(b, "\\N", 2);
    case SQLITE_INTEGER:
        snprintf(num, sizeof num, "%lld", (long long)sqlite3_column_int64(st, col));
        return buf_put(b, num, strlen(num));
    case SQLITE_FLOAT:
        snprintf(num, sizeof num, "%.17g", sqlite3_column_double(st, col));
        return buf_put(b, num, strlen(num));
    default: {
        const unsigned char *t = sqlite3_column_text(st, col);
        int n = sqlite3_column_bytes(st, col);
        for (int i = 0; i < n; i++) {
            const char *esc = NULL;
            switch (t[i]) {
            case '\\': esc = "\\\\"; break;
            case '\t': esc = "\\t"; break;
            case '\n': esc = "\\n"; break;
            case '\r': esc = "\\r"; break;
            default: break;
            }
            if (esc ? buf_put(b, esc, 2) : buf_put(b, (const char *)&t[i], 1))
                return -1;
        }
        return 0;
    }
    }
}

static int pg_ok(PGconn *pg, PGresult *r, ExecStatusType want, char *err, size_t errcap,
                 const char *what)
{
    if (PQresultStatus(r) == want)
        return 0;
    const char *m = PQresultErrorMessage(r);
    if (!*m)
        m = PQerrorMessage(pg);
    snprintf(err, errcap, "%s: %.*s", what, (int)strcspn(m, "\n"), m);
    return -1;
}

/* One integer from a query on PostgreSQL; -1 on error. */
static long long pg_count(PGconn *pg, const char *sql, char *err, size_t errcap)
{
    PGresult *r = PQexec(pg, sql);
    long long v = -1;
    if (!pg_ok(pg, r, PGRES_TUPLES_OK, err, errcap, "count rows") && PQntuples(r) == 1)
        v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return v;
}

static long long sq_count(sqlite3 *db, const char *table, char *err, size_t errcap)
{
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM %s", table);
    sqlite3_stmt *st;
    long long v = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    else
        snprintf(err, errcap, "count rows of %s: %s", table, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return v;
}

/* The target's column list of `table`, as "a, b, c". */
static int pg_columns(PGconn *pg, const char *table, char *cols, size_t cap, char *err,
                      size_t errcap)
{
    const char *params[1] = {table};
    PGresult *r = PQexecParams(pg,
                               "SELECT string_agg(column_name, ', ' ORDER BY ordinal_position)"
                               " FROM information_schema.columns WHERE table_name = $1"
                               " AND table_schema = current_schema()",
                               1, NULL, params, NULL, NULL, 0);
    int rc = pg_ok(pg, r, PGRES_TUPLES_OK, err, errcap, "read the target's columns");
    if (!rc && (PQntuples(r) != 1 || PQgetisnull(r, 0, 0))) {
        snprintf(err, errcap, "the target has no table %s", table);
        rc = -1;
    }
    if (!rc && snprintf(cols, cap, "%s", PQgetvalue(r, 0, 0)) >= (int)cap) {
        snprintf(err, errcap, "too many columns in %s", table);
        rc = -1;
    }
    PQclear(r);
    return rc;
}

/* Whether the list "a, b, c" (pg_columns) names column `name` itself (not
 * one that only contains it, as sent_seq contains seq). */
static bool has_column(const char *cols, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = cols; (p = strstr(p, name)) != NULL; p += n) {
        bool starts = p == cols || p[-1] == ' ';
        bool ends = p[n] == '\0' || p[n] == ',';
        if (starts && ends)
            return true;
    }
    return false;
}

static int copy_table(sqlite3 *db, PGconn *pg, const char *table, long long *rows, char *err,
                      size_t errcap)
{
    char cols[2048], sql[2300];
    if (pg_columns(pg, table, cols, sizeof cols, err, errcap))
        return -1;
    /* Insertion order: the tables with a seq by it, the others by rowid
     * (or their primary key for WITHOUT ROWID tables). */
    const char *order = has_column(cols, "seq") ? "seq" : "1";
    snprintf(sql, sizeof sql, "SELECT %s FROM %s ORDER BY %s", cols, table, order);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        snprintf(err, errcap, "read %s: %s", table, sqlite3_errmsg(db));
        return -1;
    }
    snprintf(sql, sizeof sql, "COPY %s (%s) FROM STDIN", table, cols);
    PGresult *r = PQexec(pg, sql);
    int rc = pg_ok(pg, r, PGRES_COPY_IN, err, errcap, "start COPY");
    PQclear(r);
    struct growbuf b = GROWBUF_INIT(GROWBUF_UNBOUNDED);
    int ncol = sqlite3_column_count(st);
    *rows = 0;
    int step;
    while (!rc && (step = sqlite3_step(st)) == SQLITE_ROW) {
        for (int i = 0; !rc && i < ncol; i++)
            rc = (i ? buf_put(&b, "\t", 1) : 0) || put_value(&b, st, i) ? -1 : 0;
        if (!rc)
            rc = buf_put(&b, "\n", 1);
        (*rows)++;
        if (!rc && b.len > 1 << 20) {
            if (PQputCopyData(pg, b.p, (int)b.len) != 1)
                rc = -1;
            growbuf_clear(&b);
        }
    }
    if (!rc && step != SQLITE_DONE) {
        snprintf(err, errcap, "read %s: %s", table, sqlite3_errmsg(db));
        rc = -1;
    }
    if (!rc && b.len && PQputCopyData(pg, b.p, (int)b.len) != 1)
        rc = -1;
    growbuf_free(&b);
    sqlite3_finalize(st);
    if (PQputCopyEnd(pg, rc ? "copy failed" : NULL) != 1 && !rc) {
        snprintf(err, errcap, "copy %s: %s", table, PQerrorMessage(pg));
        rc = -1;
    }
    r = PQgetResult(pg);
    char what[64];
    snprintf(what, sizeof what, "copy %s", table);
    if (!rc)
        rc = pg_ok(pg, r, PGRES_COMMAND_OK, err, errcap, what);
    PQclear(r);
    while ((r = PQgetResult(pg)))
        PQclear(r);
    return rc;
}

/* Opens both stores through store.h (each brought to the build's schema),
 * then closes them: the copy works on raw connections. */
static int check_both(const char *from, const char *to, char *err, size_t errcap)
{
    if (store_url_kind(from) != STORE_SQLITE || store_url_kind(to) != STORE_POSTGRESQL) {
        snprintf(err, errcap, "copies from a SQLite store (sqlite:DIR) to a PostgreSQL one"
                              " (postgresql://…)");
        return -1;
    }
    struct store *s;
    char why[400];
    if (store_open_url(from, &s, why, sizeof why)) {
        snprintf(err, errcap, "the source: %s", why);
        return -1;
    }
    store_close(s);
    if (store_open_url(to, &s, why, sizeof why)) {
        snprintf(err, errcap, "the target: %s", why);
        return -1;
    }
    store_close(s);
    return 0;
}

enum alallo_err store_copy(const char *from, const char *to,
                           long long rows[STORE_COPY_TABLES], char *err, size_t errcap)
{
    memset(rows, 0, sizeof(long long) * STORE_COPY_TABLES);
    char path[STORE_PATH_MAX];
    if (store_sqlite_file(from, path, sizeof path)) {
        snprintf(err, errcap, "the source's path is too long");
        return ERR_INVALID;
    }
    if (store_url_kind(from) == STORE_SQLITE && access(path, R_OK) != 0) {
        /* Opening would make an empty store there, and copy nothing. */
        snprintf(err, errcap, "the source has no store: %s does not exist", path);
        return ERR_NOT_FOUND;
    }
    if (check_both(from, to, err, errcap))
        return ERR_INVALID;
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        snprintf(err, errcap, "cannot open %s: %s", path, sqlite3_errmsg(db));
        sqlite3_close(db);
        return ERR_IO;
    }
    PGconn *pg = PQconnectdb(to);
    enum alallo_err e = ERR_IO;
    if (PQstatus(pg) != CONNECTION_OK) {
        snprintf(err, errcap, "cannot connect to the target: %.*s",
                 (int)strcspn(PQerrorMessage(pg), "\n"), PQerrorMessage(pg));
        goto out;
    }
    /* One read transaction on SQLite (a consistent picture even while a
     * serve writes), one write transaction on PostgreSQL. */
    if (sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK) {
        snprintf(err, errcap, "read %s: %s", path, sqlite3_errmsg(db));
        goto out;
    }
    PGresult *r = PQexec(pg, "BEGIN; SET LOCAL statement_timeout = 0;"
                             " LOCK TABLE accounts, files, jobs, attempts, events, log_lines,"
                             " checkpoints, workers, ledger, calibration IN EXCLUSIVE MODE");
    int bad = pg_ok(pg, r, PGRES_COMMAND_OK, err, errcap, "lock the target");
    PQclear(r);
    if (bad)
        goto out;
    for (int i = 0; i < STORE_COPY_TABLES; i++) {
        char sql[128];
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM (SELECT 1 FROM %s LIMIT 1) AS one",
                 tables[i]);
        long long n = pg_count(pg, sql, err, errcap);
        if (n < 0)
            goto out;
        if (n > 0) {
            snprintf(err, errcap,
                     "the target is not empty (its table %s has rows): copy into a new database",
                     tables[i]);
            e = ERR_CONFLICT;
            goto out;
        }
    }
    for (int i = 0; i < STORE_COPY_TABLES; i++)
        if (copy_table(db, pg, tables[i], &rows[i], err, errcap))
            goto out;
    /* New rows continue after the copied numbers. */
    static const char *const seqs[] = {"files", "jobs", "ledger", "calibration",
                                         "webhooks", "deliveries"};
    for (size_t i = 0; i < sizeof seqs / sizeof seqs[0]; i++) {
        char sql[256];
        snprintf(sql, sizeof sql,
                 "SELECT setval(pg_get_serial_sequence('%s', 'seq'),"
                 " COALESCE(MAX(seq), 0) + 1, false) FROM %s",
                 seqs[i], seqs[i]);
        if (pg_count(pg, sql, err, errcap) < 0)
            goto out;
    }
    for (int i = 0; i < STORE_COPY_TABLES; i++) {
        char sql[128];
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM %s", tables[i]);
        long long want = sq_count(db, tables[i], err, errcap);
        long long got = pg_count(pg, sql, err, errcap);
        if (want < 0 || got < 0)
            goto out;
        if (want != got || want != rows[i]) {
            snprintf(err, errcap, "%s: %lld rows in the source, %lld copied, %lld in the target",
                     tables[i], want, rows[i], got);
            goto out;
        }
    }
    r = PQexec(pg, "COMMIT");
    bad = pg_ok(pg, r, PGRES_COMMAND_OK, err, errcap, "commit");
    PQclear(r);
    if (!bad)
        e = ERR_OK;
out:
    if (e && PQstatus(pg) == CONNECTION_OK)
        PQclear(PQexec(pg, "ROLLBACK"));
    PQfinish(pg);
    sqlite3_close(db);
    return e;
}
