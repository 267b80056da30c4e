/* leader_lock_pg.c - see leader_lock_pg.h and leader_lock.h.
 *
 * The lock is a session-level advisory lock, so it belongs to this
 * connection's backend: when the leader dies, PostgreSQL ends the session
 * (at once for a closed socket, after the TCP keepalives below for a dead
 * machine) and frees the lock for a standby. The leader checks its
 * session on every leader_lock_try; a failed check is a lost lock, for
 * the server may already have given it to another. */
#include "store/leader_lock_pg.h"

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/text.h"

struct leader_lock_pg {
    char *url;
    PGconn *conn; /* NULL or broken until (re)connected */
    bool held;
    bool lost; /* held once, then lost: never taken again */
};

/* Statements are short: none may hold the watcher for long. */
#define STATEMENT_TIMEOUT \
    "-c statement_timeout=3000 -c lock_timeout=3000 -c client_min_messages=warning"

static PGconn *connect_to(const char *url)
{
    /* The URL is expanded as dbname; the keys after it override its own. */
    const char *keys[] = {"dbname", "connect_timeout", "application_name", "options",
                          "keepalives_idle", "keepalives_interval", "keepalives_count",
                          "tcp_user_timeout", NULL};
    const char *vals[] = {url, "3", "alallo-leader-lock", STATEMENT_TIMEOUT, "5", "1", "3",
                          "8000", NULL};
    return PQconnectdbParams(keys, vals, 1);
}

static void drop_conn(struct leader_lock_pg *l)
{
    if (l->conn)
        PQfinish(l->conn);
    l->conn = NULL;
}

/* The connection, made when missing or broken. NULL when it cannot be. */
static PGconn *conn_of(struct leader_lock_pg *l)
{
    if (l->conn && PQstatus(l->conn) == CONNECTION_OK)
        return l->conn;
    drop_conn(l);
    l->conn = connect_to(l->url);
    if (PQstatus(l->conn) != CONNECTION_OK) {
        drop_conn(l);
        return NULL;
    }
    return l->conn;
}

/* Runs sql with up to two text parameters; returns the result when its
 * status is `want`, else NULL (and clears it), with the SQLSTATE of the
 * error in state (may be NULL). */
static PGresult *run(PGconn *c, const char *sql, int n, const char *p1, const char *p2,
                     ExecStatusType want, char state[6])
{
    const char *params[2] = {p1, p2};
    PGresult *r = PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0);
    if (state)
        state[0] = '\0';
    if (r && PQresultStatus(r) == want)
        return r;
    const char *s = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    if (state && s)
        text_copy(state, 6, s);
    PQclear(r);
    return NULL;
}

enum alallo_err leader_lock_pg_open(const char *url, struct leader_lock_pg **out, char *err,
                                    size_t errcap)
{
    *out = NULL;
    struct leader_lock_pg *l = calloc(1, sizeof *l);
    if (!l || !(l->url = strdup(url))) {
        free(l);
        snprintf(err, errcap, "out of memory");
        return ERR_NOMEM;
    }
    /* A first connection now, so that a wrong URL is said at start-up. */
    l->conn = connect_to(url);
    if (PQstatus(l->conn) != CONNECTION_OK) {
        snprintf(err, errcap, "the leader lock cannot connect to PostgreSQL: %s",
                 l->conn ? PQerrorMessage(l->conn) : "out of memory");
        err[strcspn(err, "\n")] = '\0';
        leader_lock_pg_close(l);
        return ERR_UNAVAILABLE;
    }
    *out = l;
    return ERR_OK;
}

static void write_url(PGconn *c, const char *url)
{
    PGresult *r = run(c,
                      "CREATE TABLE IF NOT EXISTS serve_leader (id INTEGER PRIMARY KEY "
                      "CHECK (id = 1), url TEXT NOT NULL, since_ms BIGINT NOT NULL)",
                      0, NULL, NULL, PGRES_COMMAND_OK, NULL);
    PQclear(r);
    r = run(c,
            "INSERT INTO serve_leader (id, url, since_ms) VALUES (1, $1, "
            "(extract(epoch FROM clock_timestamp()) * 1000)::bigint) "
            "ON CONFLICT (id) DO UPDATE SET url = EXCLUDED.url, since_ms = EXCLUDED.since_ms",
            1, url, NULL, PGRES_COMMAND_OK, NULL);
    if (!r)
        log_line("warn", "could not write the leader's URL: %s", PQerrorMessage(c));
    PQclear(r);
}

enum leader_lock_state leader_lock_pg_try(struct leader_lock_pg *l, const char *my_url)
{
    if (l->lost)
        return LEADER_LOCK_LOST;
    if (l->held) {
        /* The lock is the session's: a session that does not answer may
         * be gone on the server's side, and its lock with it. */
        PGresult *r = l->conn && PQstatus(l->conn) == CONNECTION_OK
                          ? run(l->conn, "SELECT 1", 0, NULL, NULL, PGRES_TUPLES_OK, NULL)
                          : NULL;
        if (r) {
            PQclear(r);
            return LEADER_LOCK_HELD;
        }
        log_line("error", "the leader lock's connection to PostgreSQL is lost: %s",
                 l->conn ? PQerrorMessage(l->conn) : "no connection");
        drop_conn(l);
        l->held = false;
        l->lost = true;
        return LEADER_LOCK_LOST;
    }
    PGconn *c = conn_of(l);
    if (!c)
        return LEADER_LOCK_STANDBY;
    char key[32];
    snprintf(key, sizeof key, "%lld", (long long)LEADER_LOCK_KEY);
    PGresult *r = run(c, "SELECT pg_try_advisory_lock($1::bigint)", 1, key, NULL,
                      PGRES_TUPLES_OK, NULL);
    bool got = r && PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 0), "t") == 0;
    PQclear(r);
    if (!got)
        return LEADER_LOCK_STANDBY;
    l->held = true;
    write_url(c, my_url);
    return LEADER_LOCK_HELD;
}

enum alallo_err leader_lock_pg_url(struct leader_lock_pg *l, char *out, size_t cap)
{
    PGconn *c = conn_of(l);
    if (!c)
        return ERR_UNAVAILABLE;
    char state[6];
    PGresult *r = run(c, "SELECT url FROM serve_leader WHERE id = 1", 0, NULL, NULL,
                      PGRES_TUPLES_OK, state);
    if (!r)
        return strcmp(state, "42P01") == 0 ? ERR_NOT_FOUND /* no leader yet */
                                           : ERR_UNAVAILABLE;
    enum alallo_err e = ERR_NOT_FOUND;
    if (PQntuples(r) == 1)
        e = text_copy(out, cap, PQgetvalue(r, 0, 0)) ? ERR_OK : ERR_INVALID;
    PQclear(r);
    return e;
}

void leader_lock_pg_close(struct leader_lock_pg *l)
{
    if (!l)
        return;
    /* A graceful close unlocks first, so a standby takes over at once: the
     * end of the session alone frees the lock only when the server has
     * noticed the closed socket, a moment later. */
    if (l->held && !l->lost && l->conn && PQstatus(l->conn) == CONNECTION_OK) {
        PGresult *r = run(l->conn, "SELECT pg_advisory_unlock_all()", 0, NULL, NULL,
                          PGRES_TUPLES_OK, NULL);
        PQclear(r);
    }
    drop_conn(l); /* ends the session: the lock goes with it */
    free(l->url);
    free(l);
}
