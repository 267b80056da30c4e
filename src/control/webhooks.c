/* webhooks.c - registering and removing webhook endpoints (webhooks.h). */
#include "control/webhooks.h"

#include "core/clock.h"
#include "core/ids.h"
#include "core/text.h"
#include "core/webhook_sign.h"

enum alallo_err control_webhook_create(struct control *ctl, struct store_webhook *w, char *why,
                                       size_t whycap)
{
    if (webhook_url_refused(&ctl->cfg.webhook_allow, w->url, why, whycap))
        return ERR_INVALID;
    ids_make(w->id, sizeof w->id, "wh-");
    if (webhook_new_secret(w->secret, sizeof w->secret) != 0)
        return ERR_INTERNAL;
    w->created_ms = clock_now_ms();
    enum alallo_err e = store_webhook_insert(ctl->store, w, WEBHOOKS_PER_ACCOUNT);
    if (e == ERR_CONFLICT) {
        text_printf(why, whycap, "An account has at most %d webhooks; delete one first.",
                    WEBHOOKS_PER_ACCOUNT);
        return ERR_INVALID;
    }
    return e;
}

enum alallo_err control_webhook_delete(struct control *ctl, const char *account, const char *id)
{
    if (!ids_valid(id))
        return ERR_NOT_FOUND;
    return store_webhook_delete(ctl->store, account, id);
}
