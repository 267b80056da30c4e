/* webhook_delivery.h - the sender of the webhook outbox (the deliveries
 * table): a thread that, while this process leads (control_leads), POSTs
 * each due delivery, signed (core/webhook_sign.h), and records the answer.
 *
 * At least once: a delivery is marked done only after a 2xx answer has
 * come back, so a crash between the answer and the record sends it again
 * (same webhook-id: receivers deduplicate by it). In order per job and
 * endpoint: store_delivery_due() hands out only the oldest pending
 * delivery of each (webhook, job), so a job's next event waits until the
 * previous one is delivered or given up.
 *
 * A try connects only to addresses webhook_target.h allows, checked on
 * each address the host resolves to, never through a proxy; the
 * receiver's answer is dropped and only its status kept, with a short
 * reason in alallo's words (last_answer).
 *
 * Each try has WEBHOOK_TIMEOUT_MS; a failed try (no answer, or not 2xx)
 * is tried again after WEBHOOK_RETRY_BASE_MS, doubling each time up to
 * WEBHOOK_RETRY_MAX_MS between tries, until WEBHOOK_GIVE_UP_MS after the
 * event: then it is given up.
 *
 * Fair and bounded, so that one account's hanging endpoints slow no other
 * account: up to WEBHOOK_IN_FLIGHT_MAX tries run at once (one thread,
 * libcurl's multi interface), at most WEBHOOK_PER_ACCOUNT of one account
 * and WEBHOOK_PER_ENDPOINT to one endpoint; the due deliveries come from
 * the store in turns between accounts, then between an account's
 * endpoints (store_delivery_due), and webhook_pick() starts them in that
 * order. Stopping the sender drops the tries in flight unrecorded: they
 * are sent again.
 */
#ifndef ALALLO_CONTROL_WEBHOOK_DELIVERY_H
#define ALALLO_CONTROL_WEBHOOK_DELIVERY_H

#include <stdint.h>

#include "control/control.h"

#define WEBHOOK_TIMEOUT_MS 10000
#define WEBHOOK_RETRY_BASE_MS 2000
#define WEBHOOK_RETRY_MAX_MS (3600 * 1000)
#define WEBHOOK_GIVE_UP_MS ((int64_t)24 * 3600 * 1000)
#define WEBHOOK_IN_FLIGHT_MAX 16 /* tries at once, this server */
#define WEBHOOK_PER_ACCOUNT 4    /* of them, to one account's endpoints */
#define WEBHOOK_PER_ENDPOINT 2   /* of them, to one endpoint */

struct webhook_sender;

/* When a delivery that failed its `attempts`-th try (1..) is tried next
 * (never past created_ms + WEBHOOK_GIVE_UP_MS: the last try is then), or
 * -1 when it is given up (that time has come). */
int64_t webhook_next_try_ms(int attempts, int64_t created_ms, int64_t now_ms);

/* Which of the n deliveries `due` (in the store's fair order) to start,
 * with the n_flying tries `flying` in flight: in order, none in flight
 * already, while fewer than WEBHOOK_IN_FLIGHT_MAX would fly, skipping a
 * delivery whose account has WEBHOOK_PER_ACCOUNT or endpoint
 * WEBHOOK_PER_ENDPOINT flying or picked. Their indexes go to pick (room
 * for n); returns how many. */
int webhook_pick(const struct store_delivery *due, int n, const struct store_delivery *const *flying,
                 int n_flying, int *pick /* OUT [n] */);

/* Starts the sender thread over ctl (which must outlive it). NULL when the
 * thread could not start. */
struct webhook_sender *webhook_sender_start(struct control *ctl);

/* Stops and frees the sender (tries in flight are dropped, to be sent
 * again); NULL is fine. */
void webhook_sender_stop(struct webhook_sender *ws);

#endif
