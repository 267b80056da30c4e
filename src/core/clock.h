/* clock.h - the clocks every layer reads: wall time for what is stored and
 * shown, monotonic time for durations. */
#ifndef ALALLO_CORE_CLOCK_H
#define ALALLO_CORE_CLOCK_H

#include <stdint.h>

/* Milliseconds since the Unix epoch (CLOCK_REALTIME). */
int64_t clock_now_ms(void);

/* Seconds on CLOCK_MONOTONIC, for measuring how long something took. */
double clock_mono_s(void);

/* Seconds of CPU the process has used, all its threads together
 * (CLOCK_PROCESS_CPUTIME_ID): work measured apart from waiting for a
 * loaded machine's cores. */
double clock_cpu_s(void);

/* Whole milliseconds on CLOCK_MONOTONIC, for ages and deadlines kept as
 * integers. */
int64_t clock_mono_ms(void);

#endif
