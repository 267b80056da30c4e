/* catalog.h - the base models the service offers: one folder each, in
 * Hugging Face layout (config.json, *.safetensors, tokenizer.json), under
 * the models folder (`serve --models DIR`, default models/ of the source
 * tree). A folder's name is the model's id.
 *
 * The folder is read again at most once a second, when asked, so a model
 * copied in while serving appears without a restart.
 */
#ifndef ALALLO_CONTROL_CATALOG_H
#define ALALLO_CONTROL_CATALOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CATALOG_MAX 64 /* models listed at most */

struct catalog_model {
    char id[128];
    char dir[1024]; /* absolute */
    int64_t params; /* parameter count from config.json */
    int64_t bytes;  /* size of its *.safetensors files */
    int hidden, layers, heads, kv_heads, intermediate, vocab, max_positions;
    bool tied;
    int head_dim;       /* heads * head_dim may differ from hidden (Gemma)   */
    bool post_norms;    /* Gemma 2's norms after attention and MLP           */
    bool attn_softcap;  /* Gemma 2's soft-capped attention logits            */
    bool final_softcap; /* Gemma 2's soft-capped final logits                */
    bool qk_norm;       /* Qwen3's per-head norms of q and k (head_dim each) */
    /* a mixture of experts (qwen3_moe): 0 experts for a dense model; params
     * counts every expert, active_params what one token goes through */
    int experts, experts_used, moe_intermediate, sparse_layers;
    int64_t active_params;
    int64_t created_ms; /* the folder's modification time */
};

struct catalog;

/* A catalog over `models_dir` (which may not exist yet). NULL on OOM. */
struct catalog *catalog_new(const char *models_dir);
void catalog_free(struct catalog *c);

/* Copies up to cap models, sorted by id. Returns how many. */
int catalog_list(struct catalog *c, struct catalog_model *out /* OUT [cap] */, int cap);

/* The model `id`; false when unknown. */
bool catalog_find(struct catalog *c, const char *id, struct catalog_model *out /* OUT */);

/* Reads a model folder (config.json and the sizes of its weights). Returns
 * 0, or -1 with a reason in err when it is not a usable model folder. */
int catalog_read_dir(const char *dir, struct catalog_model *out /* OUT */, char *err,
                     size_t errcap);

#endif
