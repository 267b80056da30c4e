/* engine_pool.c - the server-to-node path map (--cluster-data). See
 * engine.h. */
#include <string.h>

#include "control/engine.h"
#include "core/text.h"

bool engine_map_path(const struct engine_config *cfg, const char *path, char *out, size_t cap)
{
    size_t n = strlen(cfg->map_from);
    if (n > 0 && strncmp(path, cfg->map_from, n) == 0 && (path[n] == '/' || path[n] == '\0'))
        return text_printf(out, cap, "%s%s", cfg->map_to, path + n);
    return text_copy(out, cap, path);
}
