/* attempt_config.h - the trainer's ATTEMPT.json, written by the worker from
 * a claim's `spec` plus `threads` (docs/trainer-protocol.md, "Starting").
 */
#ifndef ALALLO_WORKER_ATTEMPT_CONFIG_H
#define ALALLO_WORKER_ATTEMPT_CONFIG_H

#include <jansson.h>
#include <stddef.h>

/* The largest ATTEMPT.json written; a bigger spec is refused. */
#define ATTEMPT_CONFIG_MAX_BYTES (256 * 1024)

/* Writes `spec` (a JSON object; not changed) with "threads": threads and
 * "device": device ("cpu" or "cuda", the host's decision: it replaces any
 * "device" in the spec; docs/trainer-protocol.md, "Device") set to `path`,
 * atomically: a temporary file in the same folder, fsync, rename. So a
 * trainer never reads half a config. Returns 0, or -1 with a one-line
 * reason in err (spec not an object, threads < 1, another device, too
 * large, I/O). */
int attempt_config_write(const json_t *spec, int threads, const char *device, const char *path,
                         char *err, size_t errcap);

#endif
