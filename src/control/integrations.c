/* integrations.c - an account's integration settings (integrations.h). */
#include "control/integrations.h"

enum alallo_err control_wandb_key_set(struct control *ctl, const char *account, const char *key)
{
    return store_account_setting_put(ctl->store, account, INTEGRATIONS_WANDB_SETTING, key);
}

enum alallo_err control_wandb_key_clear(struct control *ctl, const char *account)
{
    return store_account_setting_put(ctl->store, account, INTEGRATIONS_WANDB_SETTING, "");
}
