/* webhooks.h - an account's webhook endpoints: registering one (under the
 * per-account cap, atomically in the store) and removing one. The HTTP
 * layer checks the request's shape (api/res_webhooks.c) and calls these;
 * it never writes webhooks to the store itself.
 */
#ifndef ALALLO_CONTROL_WEBHOOKS_H
#define ALALLO_CONTROL_WEBHOOKS_H

#include <stddef.h>

#include "control/control.h"

/* The most webhooks one account may have (docs/security.md). */
#define WEBHOOKS_PER_ACCOUNT 20

/* Registers w->url for w->account with w->events (set by the caller):
 * fills w's id, secret and created_ms and stores it. ERR_INVALID with the
 * reason in why (for the user) when the URL's host is an internal address
 * the operator did not allow (webhook_target.h) or the account has
 * WEBHOOKS_PER_ACCOUNT already; a store error otherwise. */
enum alallo_err control_webhook_create(struct control *ctl, struct store_webhook *w /* IN/OUT */,
                                       char *why, size_t whycap);

/* Removes webhook `id` of `account` and its deliveries not yet sent.
 * ERR_NOT_FOUND when there is none (or it is another account's). */
enum alallo_err control_webhook_delete(struct control *ctl, const char *account, const char *id);

#endif
