/* jsonw.h - a small JSON text writer for the hot answers (job objects and
 * lists of them), where building jansson trees cost most of the time.
 * Output is compact, strings are escaped, invalid UTF-8 becomes U+FFFD.
 *
 * The text is a growbuf (core/growbuf.h) of at most JSONW_MAX bytes, its
 * NUL included: w.b.p and w.b.len once written. Past that, or on out of
 * memory, w.b.err is set and the text is unusable. A struct jsonw set to
 * {0} is an empty writer; jsonw_free frees its text.
 */
#ifndef ALALLO_API_JSONW_H
#define ALALLO_API_JSONW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/growbuf.h"

#define JSONW_MAX (64u << 20)

struct jsonw {
    struct growbuf b; /* the text; its cap is set to JSONW_MAX at the first write */
    bool need_comma; /* inside an object or array, after a member */
};

void jsonw_free(struct jsonw *w);

/* Raw text, as is (must be valid JSON where it lands). */
void jsonw_raw(struct jsonw *w, const char *text, size_t n);

/* Containers; separators between members are written automatically. */
void jsonw_open(struct jsonw *w, char c /* '{' or '[' */);
void jsonw_close(struct jsonw *w, char c /* '}' or ']' */);

/* A key inside an object (the value follows with one of the calls below). */
void jsonw_key(struct jsonw *w, const char *key);

void jsonw_str(struct jsonw *w, const char *s);      /* NULL writes null */
void jsonw_str_or_null(struct jsonw *w, const char *s); /* "" writes null too */
void jsonw_int(struct jsonw *w, int64_t v);
void jsonw_num(struct jsonw *w, double v); /* shortest exact; non-finite: null */
void jsonw_bool(struct jsonw *w, bool v);
void jsonw_null(struct jsonw *w);
/* A value that is already JSON text (e.g. stored metadata); "" writes null. */
void jsonw_json(struct jsonw *w, const char *text);

#endif
