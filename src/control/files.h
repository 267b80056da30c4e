/* files.h - uploaded data sets: a file's bytes live in DATA/files/ID.jsonl,
 * written whole (temporary name, fsync, rename) before its row exists, and
 * go when the row goes. The API checks the upload (core/dataset.h) first.
 */
#ifndef ALALLO_CONTROL_FILES_H
#define ALALLO_CONTROL_FILES_H

#include <stddef.h>

#include "control/control.h"
#include "store/store.h"

/* Stores data (len bytes) as a new file of `account`. f comes with its
 * filename, examples and text_bytes; its id, path, size and time are set
 * here. ERR_IO when the bytes could not be written. */
enum alallo_err control_file_add(struct control *ctl, const char *account, const char *data,
                                 size_t len, struct store_file *f /* IN/OUT */);

/* Deletes file `id` of `account` and its bytes; *f gets the row deleted.
 * ERR_CONFLICT while a job that has not ended uses it. */
enum alallo_err control_file_delete(struct control *ctl, const char *account, const char *id,
                                    struct store_file *f /* OUT */);

#endif
