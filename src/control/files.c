/* files.c - see files.h. */
#include "control/files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/ids.h"
#include "core/text.h"

static bool file_path(const struct control *ctl, const char *id, char *out, size_t cap)
{
    return ids_valid(id) && text_printf(out, cap, "%s/files/%s.jsonl", ctl->cfg.data_dir, id);
}

enum alallo_err control_file_add(struct control *ctl, const char *account, const char *data,
                                 size_t len, struct store_file *f)
{
    ids_make(f->id, sizeof f->id, "file-");
    text_copy(f->account, sizeof f->account, account);
    text_copy(f->purpose, sizeof f->purpose, "fine-tune");
    f->bytes = (int64_t)len;
    f->created_ms = clock_now_ms();
    if (!file_path(ctl, f->id, f->path, sizeof f->path) ||
        fs_write_durably(f->path, data, len, 0600) != 0) {
        log_line("error", "cannot write upload %s: %s", f->path, strerror(errno));
        return ERR_IO;
    }
    enum alallo_err e = store_file_insert(ctl->store, f);
    if (e)
        unlink(f->path);
    return e;
}

enum alallo_err control_file_delete(struct control *ctl, const char *account, const char *id,
                                    struct store_file *f)
{
    /* A job that has not ended still needs its data (a later attempt reads
     * it again after a move): the store refuses, in the delete's own
     * transaction, so a job created at the same moment cannot slip in. */
    enum alallo_err e = store_file_delete(ctl->store, account, id, f);
    if (e)
        return e;
    char path[1100];
    if (file_path(ctl, f->id, path, sizeof path))
        unlink(path);
    return ERR_OK;
}
