/* res_files.c - /v1/files: upload (multipart, validated line by line),
 * list, show, content, delete. Storing and deleting are the control
 * layer's (control/files.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/handlers.h"
#include "api/multipart.h"
#include "api/paging.h"
#include "api/results_file.h"
#include "api/shapes.h"
#include "control/files.h"
#include "core/dataset.h"
#include "core/ids.h"
#include "core/text.h"

#define FORM_PARTS_MAX 8

/* A file name as uploaded: its last path component, printable UTF-8, short. */
static bool clean_filename(const char *in, char *out, size_t cap)
{
    const char *base = strrchr(in, '/');
    base = base ? base + 1 : in;
    const char *bs = strrchr(base, '\\');
    base = bs ? bs + 1 : base;
    if (!base[0] || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        return false;
    if (text_has_control(base))
        return false;
    json_t *utf8 = json_string(base); /* NULL unless valid UTF-8 */
    if (!utf8)
        return false;
    json_decref(utf8);
    return text_copy(out, cap, base);
}

void files_create(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    char boundary[MULTIPART_BOUNDARY_MAX], err[300];
    if (multipart_boundary(req->content_type, boundary)) {
        api_error(res, ERR_INVALID,
                  "Upload the file as multipart/form-data with fields \"file\" and \"purpose\".",
                  "file");
        return;
    }
    struct multipart_part parts[FORM_PARTS_MAX];
    int n;
    if (multipart_parse(req->body, req->body_len, boundary, parts, FORM_PARTS_MAX, &n, err,
                        sizeof err)) {
        char msg[400];
        text_printf(msg, sizeof msg, "The upload is not valid multipart/form-data: %s.", err);
        api_error(res, ERR_INVALID, msg, "file");
        return;
    }
    const struct multipart_part *purpose = multipart_find(parts, n, "purpose");
    const struct multipart_part *file = multipart_find(parts, n, "file");
    if (!purpose || purpose->len != 9 || memcmp(purpose->data, "fine-tune", 9) != 0) {
        api_error(res, ERR_INVALID, "purpose must be \"fine-tune\".", "purpose");
        return;
    }
    struct store_file f = {0};
    if (!file || !clean_filename(file->filename, f.filename, sizeof f.filename)) {
        api_error(res, ERR_INVALID, "file is required: a JSONL data set with a file name.",
                  "file");
        return;
    }
    struct dataset_check check;
    if (dataset_check_buffer(file->data, file->len, &check) != 0) {
        char msg[600];
        dataset_check_error(&check, f.filename, msg, sizeof msg);
        api_error(res, ERR_INVALID, msg, "file");
        return;
    }
    f.examples = check.examples;
    f.text_bytes = check.bytes_of_text;
    text_copy(f.format, sizeof f.format, dataset_format_name(check.format));
    /* Alpaca and ShareGPT lines are stored converted to chat form, so the
     * trainer and a download see what is trained on (docs/data.md). */
    const char *converted_from = dataset_check_converted_from(&check);
    if (converted_from)
        text_copy(f.converted_from, sizeof f.converted_from, converted_from);
    char *converted = NULL;
    size_t converted_len = 0;
    if (converted_from && dataset_convert(file->data, file->len, &converted, &converted_len,
                                          &check) != 0) {
        api_error(res, ERR_NOMEM, NULL, NULL);
        return;
    }
    enum alallo_err e = control_file_add(srv->ctl, req->account.id,
                                         converted ? converted : file->data,
                                         converted ? converted_len : file->len, &f);
    free(converted);
    if (e) {
        api_store_error(res, e);
        return;
    }
    /* the upload's answer also says how many examples reason (docs/data.md):
     * counted from the file as uploaded, not stored with it */
    json_t *o = shape_file(&f);
    if (o)
        json_object_set_new(o, "reasoning_examples", json_integer(check.reasoning_examples));
    api_json(res, 200, o);
}

void files_list(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    const char *after;
    int limit = paging_limit(req, res, STORE_LIST_MAX);
    if (limit < 0 || !paging_after_id(req, res, "files", &after))
        return;
    struct store_file *files = calloc((size_t)limit, sizeof *files);
    if (!files) {
        api_error(res, ERR_NOMEM, NULL, NULL);
        return;
    }
    int n;
    bool more;
    enum alallo_err e =
        store_file_list(srv->ctl->store, req->account.id, after, limit, files, &n, &more);
    if (e) {
        api_store_error(res, e);
    } else {
        json_t *data = json_array();
        for (int i = 0; i < n && data; i++)
            json_array_append_new(data, shape_file(&files[i]));
        api_json(res, 200, shape_list(data, more));
    }
    free(files);
}

static bool load_file(struct api_server *srv, struct http_request *req, struct http_response *res,
                      struct store_file *f)
{
    const char *id = req->params[0];
    enum alallo_err e = ids_valid(id) ? store_file_get(srv->ctl->store, req->account.id, id, f)
                                      : ERR_NOT_FOUND;
    if (e == ERR_NOT_FOUND) {
        char msg[HTTP_VALUE_MAX + 32];
        text_printf(msg, sizeof msg, "No such file: %s.", id);
        api_error(res, ERR_NOT_FOUND, msg, "id");
    } else if (e) {
        api_store_error(res, e);
    }
    return e == ERR_OK;
}

void files_get(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    struct store_file f;
    char job[IDS_MAX];
    if (results_file_job(req->params[0], job, sizeof job)) {
        results_file_get(srv, req, res, job, false);
        return;
    }
    if (load_file(srv, req, res, &f))
        api_json(res, 200, shape_file(&f));
}

void files_content(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    struct store_file f;
    char job[IDS_MAX];
    if (results_file_job(req->params[0], job, sizeof job)) {
        results_file_get(srv, req, res, job, true);
        return;
    }
    if (!load_file(srv, req, res, &f))
        return;
    FILE *in = fopen(f.path, "rb");
    char *data = f.bytes >= 0 && f.bytes <= srv->cfg.max_upload ? malloc((size_t)f.bytes + 1)
                                                                : NULL;
    size_t got = in && data ? fread(data, 1, (size_t)f.bytes, in) : 0;
    if (in)
        fclose(in);
    if (!data || got != (size_t)f.bytes) {
        free(data);
        log_line("error", "cannot read %s", f.path);
        api_error(res, ERR_IO, NULL, NULL);
        return;
    }
    http_respond(res, 200, "application/jsonl", data, got);
    free(data);
}

void files_delete(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    struct store_file f;
    if (!load_file(srv, req, res, &f))
        return;
    enum alallo_err e = control_file_delete(srv->ctl, req->account.id, f.id, &f);
    if (e == ERR_CONFLICT) {
        api_error(res, ERR_CONFLICT,
                  "A job that has not ended uses this file; cancel it or wait for it to end.",
                  "id");
        return;
    }
    if (e) {
        api_store_error(res, e);
        return;
    }
    api_json(res, 200, json_pack("{s:s,s:s,s:b}", "id", f.id, "object", "file", "deleted", 1));
}
