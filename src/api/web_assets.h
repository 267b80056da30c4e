/* web_assets.h - the dashboard's files, embedded at build time.
 *
 * The build turns every file under web/ into an entry of web_assets[]
 * (scripts/embed_web.cmake). Paths start with "/" ("/index.html").
 * The table ends with an entry whose path is NULL. Data are static and
 * NUL-terminated beyond `size` for convenience.
 */
#ifndef ALALLO_API_WEB_ASSETS_H
#define ALALLO_API_WEB_ASSETS_H

#include <stddef.h>

struct web_asset {
    const char *path;
    const unsigned char *data;
    size_t size;
};

extern const struct web_asset web_assets[];

#endif
