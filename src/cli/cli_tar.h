/* cli_tar.h - unpacking the ustar archive the API sends for a folder
 * export (`alallo export ID --format hf|peft`), safely: only regular files
 * and folders, only relative paths without "..", within size limits.
 */
#ifndef ALALLO_CLI_TAR_H
#define ALALLO_CLI_TAR_H

#include <stddef.h>

/* Largest archive member accepted (a model's weights fit well under it). */
#define CLI_TAR_MAX_MEMBER (256LL * 1024 * 1024 * 1024)
#define CLI_TAR_MAX_MEMBERS 10000

/* Unpacks the archive at `tar_path` into folder `dir` (created, mode 0755;
 * it must not exist yet). Returns 0, or -1 with a one-line reason in err
 * (a bad header or checksum, an unsafe name, a link or device entry, a
 * truncated archive, I/O); `dir` may then hold part of the files. */
int cli_untar(const char *tar_path, const char *dir, char *err, size_t errcap);

#endif
