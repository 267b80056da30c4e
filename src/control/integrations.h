/* integrations.h - an account's integration settings: the W&B API key
 * that jobs with a W&B integration log with (docs/integrations.md). The
 * HTTP layer checks the key's shape (api/res_integrations.c) and calls
 * these; it never writes settings to the store itself. The key is a
 * secret: never logged, never put in an error message.
 */
#ifndef ALALLO_CONTROL_INTEGRATIONS_H
#define ALALLO_CONTROL_INTEGRATIONS_H

#include "control/control.h"

/* The account setting that holds the W&B API key (also read by
 * control/wandb_forward.c and when a job asks for the integration). */
#define INTEGRATIONS_WANDB_SETTING "wandb_api_key"

/* Sets `account`'s W&B API key to key (already checked by the caller),
 * durably. ERR_INVALID when it does not fit STORE_SETTING_MAX; a store
 * error otherwise. */
enum alallo_err control_wandb_key_set(struct control *ctl, const char *account, const char *key);

/* Removes `account`'s W&B API key (none set is fine). A store error on
 * failure. */
enum alallo_err control_wandb_key_clear(struct control *ctl, const char *account);

#endif
