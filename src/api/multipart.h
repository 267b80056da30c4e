/* multipart.h - a bounded parser of multipart/form-data bodies (RFC 7578),
 * enough for file uploads from browsers, curl and the OpenAI SDKs.
 *
 * Pure: works on a buffer in memory and points into it; nothing is copied
 * but the short header fields. Parts beyond `cap`, header blocks over
 * MULTIPART_HEADERS_MAX bytes, and bodies without a closing delimiter are
 * errors with a one-line reason.
 */
#ifndef ALALLO_API_MULTIPART_H
#define ALALLO_API_MULTIPART_H

#include <stddef.h>

#define MULTIPART_HEADERS_MAX 8192
#define MULTIPART_BOUNDARY_MAX 71 /* 70 characters by RFC 2046, with NUL */

struct multipart_part {
    char name[64];
    char filename[256]; /* "" when the part is not a file */
    char content_type[128];
    const char *data; /* points into the body */
    size_t len;
};

/* Reads the boundary parameter of a Content-Type header value
 * ("multipart/form-data; boundary=XYZ", quoted or not). Returns 0, or -1
 * when the type is not multipart/form-data or has no usable boundary. */
int multipart_boundary(const char *content_type, char out[MULTIPART_BOUNDARY_MAX]);

/* Splits `body` into parts. Returns 0 with *n parts, or -1 with err set. */
int multipart_parse(const char *body, size_t len, const char *boundary,
                    struct multipart_part *parts /* OUT [cap] */, int cap, int *n /* OUT */,
                    char *err, size_t errcap);

/* The part named `name`, or NULL. */
const struct multipart_part *multipart_find(const struct multipart_part *parts, int n,
                                            const char *name);

#endif
