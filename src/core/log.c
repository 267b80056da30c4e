/* log.c - see log.h. */
#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

void log_line(const char *level, const char *fmt, ...)
{
    char line[2048];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    int n = (int)strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%SZ ", &tm);
    n += snprintf(line + n, sizeof line - (size_t)n, "%s: ", level);
    va_list ap;
    va_start(ap, fmt);
    if (n < (int)sizeof line)
        vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line);
}
