/* auth.h - reading the caller's secret from a request: the bearer token of
 * an Authorization header. Keys and tokens themselves are core/keys.h. */
#ifndef ALALLO_API_AUTH_H
#define ALALLO_API_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include "core/keys.h"

/* Copies the token of an "Authorization: Bearer TOKEN" header value into
 * out. Returns false when the header is missing, not Bearer, empty, or the
 * token does not fit. */
bool auth_bearer(const char *header, char *out, size_t cap);

#endif
