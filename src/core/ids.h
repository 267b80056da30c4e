/* ids.h - the ids of alallo's objects and the rule that keeps them safe.
 *
 * Ids are a short prefix and random letters and digits from libsodium's
 * generator ("ftjob-3kP9...", "file-...", "att-..."). An id that comes from
 * outside (a URL, a JSON body) is checked with ids_valid() before it is used
 * in anything, and ids are never joined into a path without that check.
 */
#ifndef ALALLO_CORE_IDS_H
#define ALALLO_CORE_IDS_H

#include <stdbool.h>
#include <stddef.h>

#define IDS_MAX 64          /* longest id, with its NUL                      */
#define IDS_RANDOM_CHARS 24 /* base-62 characters after the prefix (~142 bits) */

/* Writes `prefix` followed by IDS_RANDOM_CHARS random base-62 characters
 * into buf. Returns buf, or NULL when cap is too small. Thread-safe. */
char *ids_make(char *buf, size_t cap, const char *prefix);

/* True when `id` is 1..IDS_MAX-1 characters of [A-Za-z0-9-]: safe to place
 * in a path or a URL without escaping. */
bool ids_valid(const char *id);

/* True when `name` is 1..cap-1 characters of [A-Za-z0-9._-], does not start
 * with '.', and so names a folder entry safely (model and worker names). */
bool ids_valid_name(const char *name, size_t cap);

/* Writes `nbytes` random bytes as lowercase hex (2*nbytes chars + NUL).
 * Returns buf, or NULL when cap is too small. Used for API keys and the
 * worker token. */
char *ids_random_hex(char *buf, size_t cap, size_t nbytes);

#endif
