/* store_copy.h - moving a SQLite store into a new PostgreSQL store
 * (`alallo store copy sqlite:DIR postgresql://…`; docs/operations.md). */
#ifndef ALALLO_STORE_COPY_H
#define ALALLO_STORE_COPY_H

#include "store/store.h"

#define STORE_COPY_TABLES 14

/* The name of table i (0..STORE_COPY_TABLES-1) of store_copy's counts. */
const char *store_copy_table_name(int i);

/* Copies every row of every table (accounts, files, jobs, attempts,
 * events, log lines, checkpoints, workers, ledger, calibration) of the
 * SQLite store `from` ("sqlite:PATH" or a PATH, as store_open_url) into the
 * PostgreSQL store `to`, in one transaction, and checks that each table
 * has as many rows on both sides before it commits. Both are first brought
 * to this build's schema. The source must exist (ERR_NOT_FOUND). The
 * target must be empty: ERR_CONFLICT, and nothing written, otherwise. rows[i] gets the rows copied into table i.
 * On error writes a one-line reason into err and leaves the target as it
 * was. Files under the data folder (uploads, models) are not the store's:
 * they stay where they are. */
enum alallo_err store_copy(const char *from, const char *to,
                           long long rows[STORE_COPY_TABLES] /* OUT */, char *err,
                           size_t errcap);

#endif
