/* setup.h - the data folder of `alallo serve` and its accounts.
 *
 * DATA/alallo.db     the store
 * DATA/api-key       the API key of the account `default` (0600)
 * DATA/worker-token  the token workers present (0600)
 * DATA/files/        uploaded data sets
 * DATA/jobs/ID/      each job's checkpoints and output model
 * DATA/workers/NAME/ local workers' own folders
 * DATA/tmp/          exports being made
 */
#ifndef ALALLO_CONTROL_SETUP_H
#define ALALLO_CONTROL_SETUP_H

#include <stdbool.h>
#include <stddef.h>

#include "core/keys.h"
#include "store/store.h"

/* Creates DATA and its folders (0700) if missing. Returns 0 or -1 with err. */
int setup_data_dir(const char *data, char *err, size_t errcap);

/* Opens DATA/alallo.db. Returns 0 or -1 with err. */
int setup_open_store(const char *data, struct store **out /* OUT */, char *err, size_t errcap);

/* The store `url` names (store_open_url: "postgresql://…", "sqlite:PATH"),
 * or with url NULL the one in DATA (setup_open_store). Returns 0 or -1 with
 * err. */
int setup_open_store_at(const char *url, const char *data, struct store **out /* OUT */,
                        char *err, size_t errcap);

/* On a data folder without the account `default`: creates it and writes
 * its key to DATA/api-key; also makes DATA/worker-token when missing.
 * Writes the key of `default` into key (or "" when its file is gone) and
 * the worker token into token. Returns 0 or -1 with err. */
int setup_first_run(struct store *s, const char *data, char key[KEYS_MAX] /* OUT */,
                    char token[KEYS_MAX] /* OUT */, bool *created /* OUT */, char *err,
                    size_t errcap);

/* Creates account `name` and writes its new key into key. ERR_CONFLICT when
 * the name is taken; ERR_INVALID when it is not 1-64 of [A-Za-z0-9._-]. */
enum alallo_err setup_create_account(struct store *s, const char *name,
                                     char key[KEYS_MAX] /* OUT */);

/* Writes text to path with mode 0600, durably (temporary file, fsync,
 * rename). Returns 0 or -1. */
int setup_write_secret(const char *path, const char *text);

/* Reads a one-line secret file into out (trailing newline dropped).
 * Returns 0, or -1 when missing, empty or too long. */
int setup_read_secret(const char *path, char *out, size_t cap);

#endif
