/* multipart.c - multipart/form-data parsing over a buffer. */
#include "api/multipart.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Copies the value of `param` (e.g. name, filename, boundary) from a header
 * value's "; key=value" list; quoted values may hold ';' and escaped
 * quotes. Returns 0, or -1 when absent or too long. */
static int header_param(const char *v, size_t vlen, const char *param, char *out, size_t cap)
{
    size_t plen = strlen(param);
    const char *end = v + vlen;
    for (const char *p = v; p < end;) {
        /* The item runs to the next ';' outside quotes. */
        const char *semi = p;
        int quoted = 0;
        while (semi < end && (quoted || *semi != ';')) {
            if (*semi == '"')
                quoted = !quoted;
            else if (*semi == '\\' && quoted && semi + 1 < end)
                semi++;
            semi++;
        }
        const char *k = p;
        while (k < semi && (*k == ' ' || *k == '\t'))
            k++;
        if ((size_t)(semi - k) > plen && strncasecmp(k, param, plen) == 0 && k[plen] == '=') {
            const char *val = k + plen + 1;
            size_t o = 0;
            if (val < semi && *val == '"') {
                for (val++; val < semi && *val != '"'; val++) {
                    if (*val == '\\' && val + 1 < semi)
                        val++;
                    if (o + 1 >= cap)
                        return -1;
                    out[o++] = *val;
                }
            } else {
                const char *ve = semi;
                while (ve > val && (ve[-1] == ' ' || ve[-1] == '\t' || ve[-1] == '\r'))
                    ve--;
                for (; val < ve; val++) {
                    if (o + 1 >= cap)
                        return -1;
                    out[o++] = *val;
                }
            }
            out[o] = '\0';
            return 0;
        }
        p = semi + 1;
    }
    return -1;
}

int multipart_boundary(const char *content_type, char out[MULTIPART_BOUNDARY_MAX])
{
    if (!content_type || strncasecmp(content_type, "multipart/form-data", 19) != 0)
        return -1;
    const char *rest = content_type + 19;
    if (header_param(rest, strlen(rest), "boundary", out, MULTIPART_BOUNDARY_MAX))
        return -1;
    return out[0] ? 0 : -1;
}

/* Parses one part's header block [h, h+hlen) into p. */
static int part_headers(const char *h, size_t hlen, struct multipart_part *p, char *err,
                        size_t errcap)
{
    const char *end = h + hlen;
    while (h < end) {
        const char *eol = memchr(h, '\n', (size_t)(end - h));
        const char *line_end = eol ? eol : end;
        size_t llen = (size_t)(line_end - h);
        if (llen && h[llen - 1] == '\r')
            llen--;
        if (llen > 20 && strncasecmp(h, "Content-Disposition:", 20) == 0) {
            const char *v = h + 20;
            size_t vlen = llen - 20;
            if (header_param(v, vlen, "name", p->name, sizeof p->name)) {
                snprintf(err, errcap, "a form part has no name, or its name is too long");
                return -1;
            }
            if (header_param(v, vlen, "filename", p->filename, sizeof p->filename))
                p->filename[0] = '\0';
        } else if (llen > 13 && strncasecmp(h, "Content-Type:", 13) == 0) {
            const char *v = h + 13;
            size_t vlen = llen - 13;
            while (vlen && (*v == ' ' || *v == '\t'))
                v++, vlen--;
            if (vlen >= sizeof p->content_type)
                vlen = sizeof p->content_type - 1;
            memcpy(p->content_type, v, vlen);
            p->content_type[vlen] = '\0';
        }
        h = eol ? eol + 1 : end;
    }
    if (!p->name[0]) {
        snprintf(err, errcap, "a form part has no Content-Disposition name");
        return -1;
    }
    return 0;
}

int multipart_parse(const char *body, size_t len, const char *boundary,
                    struct multipart_part *parts, int cap, int *n, char *err, size_t errcap)
{
    *n = 0;
    if (!body || len == 0) {
        /* No pointer arithmetic on a missing body (the socket layer passes
         * NULL for an empty one). */
        snprintf(err, errcap, "the multipart body is empty");
        return -1;
    }
    char delim[MULTIPART_BOUNDARY_MAX + 4];
    size_t blen = strlen(boundary);
    if (blen == 0 || blen >= MULTIPART_BOUNDARY_MAX) {
        snprintf(err, errcap, "the multipart boundary is missing or too long");
        return -1;
    }
    /* Between parts the delimiter is CRLF "--" boundary; the first may sit
     * at the very start of the body. */
    delim[0] = '\r';
    delim[1] = '\n';
    delim[2] = delim[3] = '-';
    memcpy(delim + 4, boundary, blen);
    size_t dlen = blen + 4;
    const char *end = body + len;
    const char *p;
    if (len >= dlen - 2 && memcmp(body, delim + 2, dlen - 2) == 0) {
        p = body + dlen - 2;
    } else {
        const char *d = memmem(body, len, delim, dlen);
        if (!d) {
            snprintf(err, errcap, "the multipart body has no boundary line");
            return -1;
        }
        p = d + dlen;
    }
    for (;;) {
        /* After a delimiter: "--" closes the body, CRLF opens a part. */
        if (end - p >= 2 && p[0] == '-' && p[1] == '-')
            return 0;
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if (end - p < 2 || p[0] != '\r' || p[1] != '\n') {
            snprintf(err, errcap, "the multipart body is cut short or malformed");
            return -1;
        }
        p += 2;
        const char *hend = memmem(p, (size_t)(end - p), "\r\n\r\n", 4);
        const char *hbody;
        if (hend) {
            hbody = hend + 4;
        } else if (end - p >= 2 && p[0] == '\r' && p[1] == '\n') {
            hend = p; /* a part with no headers */
            hbody = p + 2;
        } else {
            snprintf(err, errcap, "a multipart part has no end of headers");
            return -1;
        }
        if (hend - p > MULTIPART_HEADERS_MAX) {
            snprintf(err, errcap, "a multipart part's headers are too long");
            return -1;
        }
        if (*n >= cap) {
            snprintf(err, errcap, "too many form parts (at most %d)", cap);
            return -1;
        }
        struct multipart_part *part = &parts[*n];
        memset(part, 0, sizeof *part);
        if (part_headers(p, (size_t)(hend - p), part, err, errcap))
            return -1;
        const char *next = memmem(hbody, (size_t)(end - hbody), delim, dlen);
        if (!next) {
            snprintf(err, errcap, "the multipart body has no closing boundary");
            return -1;
        }
        part->data = hbody;
        part->len = (size_t)(next - hbody);
        (*n)++;
        p = next + dlen;
    }
}

const struct multipart_part *multipart_find(const struct multipart_part *parts, int n,
                                            const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(parts[i].name, name) == 0)
            return &parts[i];
    return NULL;
}
