/* fuzz_multipart.c - libFuzzer driver for the multipart/form-data parser
 * (api/multipart.h), the first code an upload's bytes meet.
 *
 * Input: the Content-Type header value, a newline, then the body, as
 * POST /v1/files receives them. When the header names no usable boundary
 * the body is still parsed with the boundary "B", so that the fuzzer
 * spends its time in the body parser either way.
 *
 * Properties: no crash or read outside the body; at most `cap` parts; every
 * part's data lies inside the body and its header fields are NUL-terminated
 * within their arrays and named; a failure says why; multipart_find finds
 * the first part of each name.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/multipart.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CAP 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size);
    if (!nl)
        return 0;
    size_t hlen = (size_t)(nl - data);
    if (hlen > 1024)
        return 0; /* the HTTP layer keeps header values far shorter */
    char content_type[1025];
    memcpy(content_type, data, hlen);
    content_type[hlen] = '\0';

    char boundary[MULTIPART_BOUNDARY_MAX];
    memset(boundary, 0x7f, sizeof boundary);
    if (multipart_boundary(content_type, boundary) == 0) {
        size_t blen = strnlen(boundary, sizeof boundary);
        FUZZ_CHECK(blen > 0 && blen < sizeof boundary);
    } else {
        strcpy(boundary, "B");
    }

    /* The body in a buffer of its own size, so that ASan sees any read past
     * its end (libFuzzer's buffer would hide a read into the header). An
     * empty body is NULL, as the socket layer hands it over. */
    size_t blen = size - hlen - 1;
    char *body = NULL;
    if (blen) {
        body = malloc(blen);
        FUZZ_CHECK(body != NULL);
        memcpy(body, nl + 1, blen);
    }

    struct multipart_part parts[CAP];
    int n = -7;
    char err[200] = "";
    int rc = multipart_parse(body, blen, boundary, parts, CAP, &n, err, sizeof err);
    FUZZ_CHECK(rc == 0 || rc == -1);
    FUZZ_CHECK(n >= 0 && n <= CAP);
    if (rc != 0) {
        FUZZ_CHECK(err[0] != '\0' && memchr(err, '\0', sizeof err) != NULL);
    }
    for (int i = 0; i < n && rc == 0; i++) {
        const struct multipart_part *p = &parts[i];
        FUZZ_CHECK(memchr(p->name, '\0', sizeof p->name) != NULL && p->name[0] != '\0');
        FUZZ_CHECK(memchr(p->filename, '\0', sizeof p->filename) != NULL);
        FUZZ_CHECK(memchr(p->content_type, '\0', sizeof p->content_type) != NULL);
        FUZZ_CHECK(body != NULL && p->data >= body && p->data <= body + blen);
        FUZZ_CHECK(p->len <= (size_t)(body + blen - p->data));
        fuzz_touch(p->data, p->len);
        /* Parts come in body order and never overlap. */
        if (i > 0)
            FUZZ_CHECK(p->data >= parts[i - 1].data + parts[i - 1].len);
        const struct multipart_part *f = multipart_find(parts, n, p->name);
        FUZZ_CHECK(f != NULL && f <= p && strcmp(f->name, p->name) == 0);
    }
    if (rc == 0)
        FUZZ_CHECK(multipart_find(parts, n, "") == NULL);
    free(body);
    return 0;
}
