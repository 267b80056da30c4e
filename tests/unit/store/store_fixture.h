/* store_fixture.h - where a store test keeps its store: a SQLite file in a
 * temporary folder, or, when ALALLO_TEST_PG names a running test
 * PostgreSQL (tests/pg/pg-up.sh DIR; CTest sets it for the second pass of
 * every tests/unit/store test), a fresh database made from its template.
 * Header-only: each test file includes it once. */
#ifndef ALALLO_TEST_STORE_FIXTURE_H
#define ALALLO_TEST_STORE_FIXTURE_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The kit's folder when this run is on PostgreSQL, else NULL. */
static const char *fixture_pg_dir(void)
{
    const char *d = getenv("ALALLO_TEST_PG");
    return d && *d ? d : NULL;
}

static bool fixture_on_pg(void) { return fixture_pg_dir() != NULL; }

/* Runs one SQL command on database `db` of the kit; 0 on success. */
static int fixture_pg_exec(const char *db, const char *sql)
{
    char conninfo[512];
    snprintf(conninfo, sizeof conninfo, "host=%s port=55432 user=alallo dbname=%s",
             fixture_pg_dir(), db);
    PGconn *c = PQconnectdb(conninfo);
    int rc = -1;
    if (PQstatus(c) == CONNECTION_OK) {
        PGresult *r = PQexec(c, sql);
        ExecStatusType st = PQresultStatus(r);
        rc = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? 0 : -1;
        if (rc)
            fprintf(stderr, "fixture: %s: %s", sql, PQresultErrorMessage(r));
        PQclear(r);
    } else {
        fprintf(stderr, "fixture: %s", PQerrorMessage(c));
    }
    PQfinish(c);
    return rc;
}

/* Writes into url the store named `name` (letters, digits, _): on
 * PostgreSQL a new database from the template (dropped first if a former
 * run left it), else DIR/NAME.db. 0 on success. */
static int fixture_store_url(const char *dir, const char *name, char *url, size_t cap)
{
    if (!fixture_on_pg())
        return snprintf(url, cap, "%s/%s.db", dir, name) < (int)cap ? 0 : -1;
    char db[64], sql[256];
    snprintf(db, sizeof db, "t%ld_%s", (long)getpid(), name);
    snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s", db);
    if (fixture_pg_exec("postgres", sql))
        return -1;
    snprintf(sql, sizeof sql, "CREATE DATABASE %s TEMPLATE alallo_tmpl", db);
    if (fixture_pg_exec("postgres", sql))
        return -1;
    return snprintf(url, cap, "postgresql:///%s?host=%s&port=55432&user=alallo", db,
                    fixture_pg_dir()) < (int)cap
               ? 0
               : -1;
}

/* Drops what fixture_store_url made (the SQLite file goes with its folder). */
static void fixture_store_drop(const char *name)
{
    if (!fixture_on_pg())
        return;
    char sql[128];
    snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS t%ld_%s WITH (FORCE)", (long)getpid(),
             name);
    fixture_pg_exec("postgres", sql);
}

#endif
