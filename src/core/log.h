/* log.h - the service's log: one line to stderr per call, with a UTC time
 * stamp and a level ("info", "warn", "error"). Used by the API and the
 * control layer of `alallo serve`; workers keep their own (worker/wlog.h).
 */
#ifndef ALALLO_CORE_LOG_H
#define ALALLO_CORE_LOG_H

void log_line(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
