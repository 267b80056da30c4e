/* fs.h - the small file-system steps every layer repeats: making a folder
 * path, removing a folder tree, copying a file, writing a whole buffer,
 * reading a one-line file, and replacing a file durably (a temporary file, fsync, rename, fsync of
 * the folder).
 *
 * The one module in core that touches the disk; it holds no state and
 * knows nothing of jobs, models or accounts. Every function returns 0 on
 * success and -1 on failure with errno set by the step that failed. Paths
 * longer than FS_MAX_PATH fail with ENAMETOOLONG.
 */
#ifndef ALALLO_CORE_FS_H
#define ALALLO_CORE_FS_H

#include <stddef.h>
#include <sys/types.h>

#define FS_MAX_PATH 4096

/* Creates path and every missing folder above it (mkdir -p), each with
 * mode (less the umask). A folder that already exists is fine. */
int fs_mkdirs(const char *path, mode_t mode);

/* Removes path: a file, a link (never followed) or a whole folder tree.
 * A path that does not exist counts as removed (0). Stops at the first
 * entry it cannot remove. */
int fs_remove_tree(const char *path);

/* Copies the file from into to (created with mode 0644, or truncated), and
 * fsyncs it. On failure to may hold part of the data. */
int fs_copy_file(const char *from, const char *to);

/* Writes all len bytes of buf to fd, retrying short writes and EINTR. */
int fs_write_all(int fd, const void *buf, size_t len);

/* fsyncs the folder dir, so that the entries made in it reach the disk. */
int fs_sync_dir(const char *dir);

/* fsyncs the folder that holds path ("." for a bare name). */
int fs_sync_parent(const char *path);

/* Reads the first line of the file at path into out (cap bytes), without
 * its line ending: for one-line secret and token files. -1 when the file
 * cannot be opened or the line is empty. A line longer than cap - 1 bytes
 * is cut there. */
int fs_read_line(const char *path, char *out /* OUT */, size_t cap);

/* Replaces path by len bytes of data so that a crash leaves either the old
 * file or the new one whole: writes "<path>.tmp" (with exactly mode, whatever
 * the umask: secrets rely on 0600), fsyncs
 * it, renames it onto path and fsyncs the folder. On failure the temporary
 * file is removed and path is untouched. A failed fsync of the folder after
 * the rename is not reported: the new file is already in place. */
int fs_write_durably(const char *path, const void *data, size_t len, mode_t mode);

#endif
