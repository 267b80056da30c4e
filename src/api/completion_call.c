/* completion_call.c - one generation for a completions request (see
 * completion_call.h). */
#include "api/completion_call.h"

#include <stdatomic.h>

#include "api/fair_share.h"
#include "api/handlers.h"
#include "control/generation.h"
#include "control/inference.h"
#include "control/models.h"
#include "core/text.h"

json_t *completion_generate(struct api_server *srv, struct http_request *req, const char *model,
                            const struct control_generation *g, const char *input_param,
                            struct http_response *res)
{
    char dir[1024], name[256], msg[1024];
    if (!control_model_name(srv->ctl, req->account.id, model, name, sizeof name, msg,
                            sizeof msg)) {
        api_error(res, ERR_NOT_FOUND, msg, "model");
        return NULL;
    }
    enum alallo_err found =
        control_model_dir(srv->ctl, req->account.id, name, dir, sizeof dir, msg, sizeof msg);
    if (found) {
        api_error(res, found, msg[0] ? msg : NULL, found == ERR_NOT_FOUND ? "model" : NULL);
        return NULL;
    }
    /* the engine queues per account itself (train/serve/admission.h) */
    bool pooled = !srv->ctl->inference;
    if (pooled && !fair_share_take(srv->generations, req->account.id, srv->cfg.slot_wait_ms)) {
        api_error(res, ERR_RATE_LIMITED, "Too many generations are running; try again shortly.",
                  NULL);
        return NULL;
    }
    json_t *out = NULL;
    char why[600];
    enum alallo_err e = control_generate(srv->ctl, req->account.id, dir, name, g,
                                         srv->cfg.completion_timeout_s, &out, why, sizeof why);
    if (pooled)
        fair_share_give(srv->generations, req->account.id);
    if (e) {
        bool said = e == ERR_INVALID || e == ERR_RATE_LIMITED || e == ERR_UNAVAILABLE;
        api_error(res, e,
                  said && why[0]         ? why
                  : e == ERR_UNAVAILABLE ? "The generation took too long and was stopped."
                                         : "The generation failed.",
                  e == ERR_INVALID ? input_param : NULL);
        if (e == ERR_RATE_LIMITED || e == ERR_UNAVAILABLE) {
            text_copy(res->header_name, sizeof res->header_name, "Retry-After");
            text_printf(res->header_value, sizeof res->header_value, "%d",
                        INFERENCE_RETRY_AFTER_S);
        }
        return NULL;
    }
    atomic_fetch_add(&srv->metrics.completions, 1);
    return out;
}
