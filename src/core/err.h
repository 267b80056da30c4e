/* err.h - the one error type of the alallo control plane.
 *
 * Every control-plane function that can fail returns an `enum alallo_err`
 * (0 on success, a negative value on failure) and writes its results through
 * out-parameters. The API layer maps each value to an HTTP status and an
 * OpenAI-shaped error code with err_http_status() and err_code().
 */
#ifndef ALALLO_CORE_ERR_H
#define ALALLO_CORE_ERR_H

enum alallo_err {
    ERR_OK = 0,
    ERR_INVALID = -1,       /* bad input from the caller (400)                 */
    ERR_UNAUTHORIZED = -2,  /* missing or wrong API key / worker token (401)   */
    ERR_FORBIDDEN = -3,     /* authenticated but not allowed (403)             */
    ERR_NOT_FOUND = -4,     /* no such object, or it belongs to another account (404) */
    ERR_CONFLICT = -5,      /* the object's state does not allow this (409)    */
    ERR_TOO_LARGE = -6,     /* a body, upload or field passed its cap (413)    */
    ERR_RATE_LIMITED = -7,  /* too many requests for this key (429)            */
    ERR_NOMEM = -8,         /* out of memory (500)                             */
    ERR_IO = -9,            /* disk or database I/O failed (500)               */
    ERR_INTERNAL = -10,     /* a broken invariant: a bug (500)                 */
    ERR_UNAVAILABLE = -11,  /* temporarily cannot serve; retry later (503)     */
    ERR_FENCED = -12,       /* a stale attempt reported: ignored (409)         */
};

/* The HTTP status that stands for `e` (200 for ERR_OK). */
int err_http_status(enum alallo_err e);

/* A short, stable, machine-readable code, e.g. "invalid_request_error".
 * Never NULL; a static string. */
const char *err_code(enum alallo_err e);

/* A generic English sentence for `e`, for when the caller has nothing
 * better to say. Never NULL; a static string. */
const char *err_message(enum alallo_err e);

#endif
