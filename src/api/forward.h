/* forward.h - how a standby answers the calls only the leader may make.
 *
 * A `serve` that does not lead (control/leadership.h) answers reads (GET)
 * itself, from the store, and sends every other call (creations, cancels,
 * uploads, estimates, completions and all of the workers' calls) on to the
 * leader's URL, relaying the answer: whole, or, for an event stream (a
 * streamed chat answer), piece by piece as the leader sends it, so that
 * the first piece comes as early as through the leader (at most 1 MiB of
 * it held for a slow reader). So every write reaches the one process
 * whose caches (the scheduler's snapshot, the fleet) must see it, and
 * clients and workers need not know which process leads
 * (docs/operations.md, "High availability").
 *
 * A forwarded call carries FORWARD_HEADER; a process that does not lead
 * answers such a call 503 instead of forwarding it again, so that two
 * standbys with stale ideas of the leader never pass a call back and
 * forth. With no leader known the call waits up to FORWARD_WAIT_MS for
 * one (a take-over, or this process's own first try of the lock at
 * start-up, takes under a second); with still none, or a leader that does
 * not answer, it is answered 503 with Retry-After: 1.
 */
#ifndef ALALLO_API_FORWARD_H
#define ALALLO_API_FORWARD_H

#include <stdbool.h>

#include "api/server.h"

#define FORWARD_HEADER "X-Alallo-Forwarded"
#define FORWARD_WAIT_MS 3000

/* Whether a call with this method goes to the leader rather than being
 * answered here. */
bool forward_needed(struct api_server *srv, const char *method);

/* Sends req on to the leader and fills res with its answer (status, body,
 * content type, and Retry-After or Content-Disposition when given), or
 * with a 503 that says why it could not; returns true. Returns false,
 * with res untouched, when this process has become the leader meanwhile:
 * the caller answers the call itself. */
bool forward_to_leader(struct api_server *srv, const struct http_request *req,
                       struct http_response *res);

#endif
