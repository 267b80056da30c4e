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

#endif
