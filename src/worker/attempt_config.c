/* attempt_config.c - writing ATTEMPT.json for the trainer. */
#include "worker/attempt_config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"

int attempt_config_write(const json_t *spec, int threads, const char *device, const char *path,
                         char *err, size_t errcap)
{
    if (!json_is_object(spec)) {
        snprintf(err, errcap, "attempt spec is not a JSON object");
        return -1;
    }
    if (threads < 1) {
        snprintf(err, errcap, "threads must be at least 1");
        return -1;
    }
    if (!device || (strcmp(device, "cpu") != 0 && strcmp(device, "cuda") != 0)) {
        snprintf(err, errcap, "device must be \"cpu\" or \"cuda\"");
        return -1;
    }
    json_t *copy = json_deep_copy(spec);
    if (!copy || json_object_set_new(copy, "threads", json_integer(threads)) != 0 ||
        json_object_set_new(copy, "device", json_string(device)) != 0) {
        json_decref(copy);
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    char *text = json_dumps(copy, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(copy);
    if (!text) {
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    size_t len = strlen(text);
    if (len > ATTEMPT_CONFIG_MAX_BYTES) {
        free(text);
        snprintf(err, errcap, "attempt spec too large (%zu bytes)", len);
        return -1;
    }
    char tmp[1100];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        free(text);
        snprintf(err, errcap, "path too long");
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, errcap, "cannot create %s: %s", tmp, strerror(errno));
        free(text);
        return -1;
    }
    int bad = fs_write_all(fd, text, len) != 0 || fs_write_all(fd, "\n", 1) != 0 || fsync(fd) != 0;
    int saved = errno;
    free(text);
    if (close(fd) != 0 && !bad) {
        bad = 1;
        saved = errno;
    }
    if (bad || rename(tmp, path) != 0) {
        if (!bad)
            saved = errno;
        snprintf(err, errcap, "cannot write %s: %s", path, strerror(saved));
        unlink(tmp);
        return -1;
    }
    return 0;
}
