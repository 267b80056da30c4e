/* cli_http.h - the command-line client's HTTP: calls to the alallo API at
 * ALALLO_URL with ALALLO_API_KEY (SPEC §4, §6).
 *
 * Every answer kept in memory is capped at CLI_MAX_ANSWER bytes; downloads
 * and streams go to a FILE as they arrive. Calls are bounded by a connect
 * timeout, and (except streams and downloads) by a total timeout.
 */
#ifndef ALALLO_CLI_HTTP_H
#define ALALLO_CLI_HTTP_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#define CLI_MAX_ANSWER (64L * 1024 * 1024)
#define CLI_DEFAULT_URL "http://127.0.0.1:8080"

struct cli_conn {
    char base[512];     /* ALALLO_URL without a trailing '/'            */
    char auth[600];     /* "Authorization: Bearer <key>", "" without key */
    long timeout_s;     /* total time of one ordinary call              */
    bool from_env;      /* base came from ALALLO_URL (else the default) */
};

/* An answer held in memory. */
struct cli_answer {
    long status;        /* HTTP status                                  */
    char *body;         /* NUL-terminated, owned; "" when empty         */
    size_t len;
    json_t *json;       /* body parsed, or NULL when it is not JSON     */
    char content_type[128];
};

/* Reads ALALLO_URL (default CLI_DEFAULT_URL; a trailing "/v1", as SDKs are
 * given, is dropped) and ALALLO_API_KEY. Returns 0,
 * or -1 with a reason in err (a URL that is not http(s), a key too long). */
int cli_conn_from_env(struct cli_conn *c /* OUT */, char *err, size_t errcap);

/* One call: `method` to base + path with a JSON body (NULL: none). Returns 0
 * when the server answered (any status), with *a filled; -1 with a reason in
 * err when it did not (refused, timed out, answer too large). */
int cli_call(const struct cli_conn *c, const char *method, const char *path, json_t *body,
             struct cli_answer *a /* OUT */, char *err, size_t errcap);

/* POST /v1/files as multipart/form-data: purpose=`purpose`, file=@path.
 * Same results as cli_call. */
int cli_upload(const struct cli_conn *c, const char *file_path, const char *purpose,
               struct cli_answer *a /* OUT */, char *err, size_t errcap);

/* GET base + path, writing a 2xx body to `out` as it arrives (no total
 * timeout: `jobs log --follow`, `export`). A non-2xx answer is kept in *a
 * instead, so that its error can be shown. Returns 0 or -1 like cli_call. */
int cli_get_to_file(const struct cli_conn *c, const char *path, FILE *out,
                    struct cli_answer *a /* OUT */, char *err, size_t errcap);

/* The server's words for a failed call: error.message of an API error, else
 * the first line of the body, else "HTTP <status>". Never NULL. */
const char *cli_answer_error(const struct cli_answer *a, char *buf, size_t cap);

/* Frees what the answer holds; accepts a zeroed answer. */
void cli_answer_free(struct cli_answer *a);

/* Appends `text` to `buf` percent-encoded for a URL path segment or query
 * value. Returns -1 when it does not fit. */
int cli_url_escape(char *buf, size_t cap, const char *text);

#endif
