/* leader_lock_pg.h - the PostgreSQL side of leader_lock.h (internal to
 * src/store): an advisory lock on a libpq connection of its own, and the
 * leader's URL in the table serve_leader. Same contracts as the
 * leader_lock_* functions of the same names. */
#ifndef ALALLO_STORE_LEADER_LOCK_PG_H
#define ALALLO_STORE_LEADER_LOCK_PG_H

#include <stddef.h>

#include "store/leader_lock.h"

struct leader_lock_pg;

enum alallo_err leader_lock_pg_open(const char *url, struct leader_lock_pg **out /* OUT */,
                                    char *err, size_t errcap);
enum leader_lock_state leader_lock_pg_try(struct leader_lock_pg *l, const char *my_url);
enum alallo_err leader_lock_pg_url(struct leader_lock_pg *l, char *out /* OUT */, size_t cap);
void leader_lock_pg_close(struct leader_lock_pg *l);

#endif
