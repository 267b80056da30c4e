/* fuzz_util.h - small helpers shared by the libFuzzer drivers in fuzz/.
 *
 * Header-only (static inline) so that each driver stays one file plus the
 * module sources it exercises. A failed FUZZ_CHECK prints the expression
 * with file and line and aborts, which libFuzzer records as a crash and
 * saves the input.
 */
#ifndef ALALLO_FUZZ_UTIL_H
#define ALALLO_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* An always-on assert: a property the target promises and that failed. */
#define FUZZ_CHECK(expr)                                                                    \
    do {                                                                                    \
        if (!(expr)) {                                                                      \
            fprintf(stderr, "%s:%d: property failed: %s\n", __FILE__, __LINE__, #expr);     \
            abort();                                                                        \
        }                                                                                   \
    } while (0)

/* Reads every byte of [p, p+n) so that AddressSanitizer checks the range
 * a module handed out, not only the bytes the driver happens to compare. */
static inline void fuzz_touch(const void *p, size_t n)
{
    const volatile uint8_t *b = p;
    uint8_t acc = 0;
    for (size_t i = 0; i < n; i++)
        acc ^= b[i];
    (void)acc;
}

/* A folder for scratch files: /dev/shm when there is one (fsync there is
 * free, and a writer under test fsyncs every file), else $TMPDIR or /tmp. */
static inline const char *fuzz_scratch_dir(void)
{
    struct stat st;
    if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0)
        return "/dev/shm";
    const char *t = getenv("TMPDIR");
    return t && t[0] ? t : "/tmp";
}

/* A scratch file path private to this process: DIR/alallo-fuzz-PID-TAG.
 * Fuzzing jobs run as several processes at once, hence the pid. */
static inline void fuzz_temp_path(char *out, size_t cap, const char *tag)
{
    snprintf(out, cap, "%s/alallo-fuzz-%ld-%s", fuzz_scratch_dir(), (long)getpid(), tag);
}

/* True when s[0, n) is well-formed UTF-8 (no overlongs, no surrogates, at
 * most U+10FFFF). Written here so the drivers judge round trips by their
 * own rule, not by the module's. */
static inline int fuzz_utf8_valid(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint32_t cp, min;
        if ((c & 0xe0) == 0xc0) {
            len = 2, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return 0;
        }
        if (n - i < len)
            return 0;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += len;
    }
    return 1;
}

#endif
