/* text.h - bounded string building. Every fixed buffer in the control
 * plane is filled through these, so that a value that does not fit is
 * noticed (false) instead of silently cut or overflowing. Pure.
 */
#ifndef ALALLO_CORE_TEXT_H
#define ALALLO_CORE_TEXT_H

#include <stdbool.h>
#include <stddef.h>

/* Copies src (NULL reads as "") into dst. On false (does not fit) dst holds
 * a cut copy, still NUL-terminated. */
bool text_copy(char *dst, size_t cap, const char *src);

/* snprintf into dst; false when the result was cut (or cap is 0). */
bool text_printf(char *dst, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Makes a message one line of valid UTF-8, in place, because error lines
 * travel in JSON and logs: control characters and bytes that are not part
 * of a valid UTF-8 character become '?' (a parser's message may quote broken
 * input), and a character cut by the end of the buffer is dropped. */
void text_one_line(char *s);

/* Sets an error message: printf into err (cut to cap), then text_one_line,
 * so that the message is one line of valid UTF-8 whatever it quotes. Does
 * nothing when err is NULL or cap is 0, so callers may pass no buffer. */
void text_error(char *err, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* True when UTF-8 string s holds a control character: C0 (U+0000 to
 * U+001F, tab and newline included), DEL, or C1 (U+0080 to U+009F, which
 * some terminals read as escapes). For names a user gives that other
 * programs print (job and file names). */
bool text_has_control(const char *s);

/* How many of the first len bytes of s to quote so that at most max are
 * shown and no UTF-8 character is cut: len when len <= max, else max or
 * less, backed off to the start of the character at byte max. For the
 * "%.*s" of a message that travels in JSON. s need not be NUL-terminated. */
int text_utf8_prefix_n(const char *s, size_t len, size_t max);

/* text_utf8_prefix_n for a NUL-terminated s (reads at most max + 1 bytes). */
int text_utf8_prefix(const char *s, size_t max);

/* Parses s as a whole decimal number in [lo, hi] into *out; false (and
 * *out unchanged) for anything else: empty, trailing characters, out of
 * range. For command-line values. */
bool text_parse_long(const char *s, long lo, long hi, long *out /* OUT */);

#endif
