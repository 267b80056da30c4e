/* auth.c - bearer tokens (auth.h). */
#include "api/auth.h"

#include <string.h>
#include <strings.h>

bool auth_bearer(const char *header, char *out, size_t cap)
{
    if (!header || strncasecmp(header, "Bearer ", 7) != 0)
        return false;
    const char *t = header + 7;
    while (*t == ' ')
        t++;
    size_t n = strlen(t);
    while (n && (t[n - 1] == ' ' || t[n - 1] == '\t'))
        n--;
    if (n == 0 || n >= cap)
        return false;
    memcpy(out, t, n);
    out[n] = '\0';
    return true;
}
