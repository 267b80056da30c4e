/* setup.c - the data folder, the first run, accounts. */
#include "control/setup.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/ids.h"
#include "core/text.h"

int setup_data_dir(const char *data, char *err, size_t errcap)
{
    static const char *const subs[] = {"", "/files", "/jobs", "/workers", "/tmp"};
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        char path[1024];
        if (!text_printf(path, sizeof path, "%s%s", data, subs[i])) {
            snprintf(err, errcap, "the data folder's path is too long");
            return -1;
        }
        if (mkdir(path, 0700) != 0 && errno != EEXIST) {
            snprintf(err, errcap, "cannot create %s: %s", path, strerror(errno));
            return -1;
        }
    }
    return 0;
}

int setup_open_store(const char *data, struct store **out, char *err, size_t errcap)
{
    char path[1024];
    if (!text_printf(path, sizeof path, "%s/alallo.db", data)) {
        snprintf(err, errcap, "the data folder's path is too long");
        return -1;
    }
    return store_open(path, out, err, errcap) ? -1 : 0;
}

int setup_open_store_at(const char *url, const char *data, struct store **out, char *err,
                        size_t errcap)
{
    if (!url)
        return setup_open_store(data, out, err, errcap);
    return store_open_url(url, out, err, errcap) ? -1 : 0;
}

int setup_write_secret(const char *path, const char *text)
{
    size_t n = strlen(text);
    char *line = malloc(n + 1);
    if (!line)
        return -1;
    memcpy(line, text, n);
    line[n] = '\n';
    int rc = fs_write_durably(path, line, n + 1, 0600);
    free(line);
    return rc;
}

int setup_read_secret(const char *path, char *out, size_t cap)
{
    return fs_read_line(path, out, cap);
}

enum alallo_err setup_create_account(struct store *s, const char *name, char key[KEYS_MAX])
{
    char hash[KEYS_HASH_HEX];
    if (!ids_valid_name(name, 65))
        return ERR_INVALID;
    if (keys_new_api_key(key, KEYS_MAX) || keys_hash(key, hash))
        return ERR_INTERNAL;
    return store_account_create(s, name, hash, NULL);
}

int setup_first_run(struct store *s, const char *data, char key[KEYS_MAX],
                    char token[KEYS_MAX], bool *created, char *err, size_t errcap)
{
    char key_path[1024], token_path[1024];
    *created = false;
    key[0] = token[0] = '\0';
    if (!text_printf(key_path, sizeof key_path, "%s/api-key", data) ||
        !text_printf(token_path, sizeof token_path, "%s/worker-token", data)) {
        snprintf(err, errcap, "the data folder's path is too long");
        return -1;
    }
    if (setup_read_secret(token_path, token, KEYS_MAX) != 0) {
        if (keys_new_token(token, KEYS_MAX) || setup_write_secret(token_path, token)) {
            snprintf(err, errcap, "cannot write %s: %s", token_path, strerror(errno));
            return -1;
        }
    }
    struct store_account a;
    enum alallo_err e = store_account_by_name(s, "default", &a);
    if (e == ERR_OK) {
        if (setup_read_secret(key_path, key, KEYS_MAX) != 0)
            key[0] = '\0';
        return 0;
    }
    if (e != ERR_NOT_FOUND) {
        snprintf(err, errcap, "%s", store_last_error());
        return -1;
    }
    /* The key file is written before the account exists: a crash in
     * between leaves a key with no account, and the next start makes both
     * again. The reverse order could leave an account nobody can use. */
    char hash[KEYS_HASH_HEX];
    if (keys_new_api_key(key, KEYS_MAX) || keys_hash(key, hash)) {
        snprintf(err, errcap, "cannot make an API key");
        return -1;
    }
    if (setup_write_secret(key_path, key) != 0) {
        snprintf(err, errcap, "cannot write %s: %s", key_path, strerror(errno));
        return -1;
    }
    e = store_account_create(s, "default", hash, NULL);
    if (e) {
        snprintf(err, errcap, "cannot create the account default: %s", store_last_error());
        return -1;
    }
    *created = true;
    return 0;
}
