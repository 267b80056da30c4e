/* res_integrations.c - /v1/organization/integrations/wandb: the account's
 * W&B API key, which jobs with a W&B integration log with
 * (docs/integrations.md). POST {api_key} sets it, GET says whether one is
 * set, DELETE removes it. The key is never answered, logged or put in an
 * error message. */
#include <string.h>

#include "api/handlers.h"
#include "control/integrations.h"

#define SETTING INTEGRATIONS_WANDB_SETTING

/* Letters, digits, '-' and '_': W&B's keys (40 hex digits, or a host's
 * prefix and a dash before them) and nothing that could break a header. */
static bool valid_key(const char *k)
{
    size_t n = strlen(k);
    if (n < 1 || n >= STORE_SETTING_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = k[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_'))
            return false;
    }
    return true;
}

static void answer(struct http_response *res, bool configured)
{
    api_json(res, 200,
             json_pack("{ss ss sb}", "object", "organization.integration", "type", "wandb",
                       "configured", configured));
}

void integrations_wandb_set(struct api_server *srv, struct http_request *req,
                            struct http_response *res)
{
    json_t *body = api_body_object(req, res);
    if (!body)
        return;
    json_t *k = json_object_get(body, "api_key");
    if (!json_is_string(k) || !valid_key(json_string_value(k))) {
        json_decref(body);
        api_error(res, ERR_INVALID,
                  "api_key must be a W&B API key: 1 to 255 letters, digits, '-' or '_'.",
                  "api_key");
        return;
    }
    enum alallo_err e = control_wandb_key_set(srv->ctl, req->account.id, json_string_value(k));
    json_decref(body);
    if (e) {
        api_store_error(res, e);
        return;
    }
    answer(res, true);
}

void integrations_wandb_get(struct api_server *srv, struct http_request *req,
                            struct http_response *res)
{
    char key[STORE_SETTING_MAX];
    enum alallo_err e =
        store_account_setting_get(srv->ctl->store, req->account.id, SETTING, key, sizeof key);
    explicit_bzero(key, sizeof key);
    if (e && e != ERR_NOT_FOUND) {
        api_store_error(res, e);
        return;
    }
    answer(res, e == ERR_OK);
}

void integrations_wandb_delete(struct api_server *srv, struct http_request *req,
                               struct http_response *res)
{
    enum alallo_err e = control_wandb_key_clear(srv->ctl, req->account.id);
    if (e) {
        api_store_error(res, e);
        return;
    }
    answer(res, false);
}
