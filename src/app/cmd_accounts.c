/* cmd_accounts.c - `alallo accounts create NAME --data DIR [--store URL]`:
 * a new account in the store of a (running or stopped) server (SQLite in
 * DIR unless --store names another). Its API key is
 * printed once, on the last line; only its hash is kept. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "control/setup.h"
#include "core/cmd_help.h"
#include "app/cmds.h"

static void usage(FILE *f)
{
    fputs("usage: alallo accounts create NAME --data DIR [--store URL]\n", f);
}

int cmd_accounts(int argc, char **argv)
{
    const char *name = NULL, *data = NULL, *store = NULL;
    if (cmd_help_asked(argc, argv)) {
        usage(stdout);
        return 0;
    }
    if (argc < 2 || strcmp(argv[1], "create") != 0) {
        usage(stderr);
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--data") == 0 && i + 1 < argc)
            data = argv[++i];
        else if (strcmp(argv[i], "--store") == 0 && i + 1 < argc)
            store = argv[++i];
        else if (argv[i][0] != '-' && !name)
            name = argv[i];
        else {
            usage(stderr);
            return 2;
        }
    }
    if (!name || !data) {
        usage(stderr);
        return 2;
    }
    umask(077);
    char err[512];
    struct store *s;
    if (setup_data_dir(data, err, sizeof err) != 0 ||
        setup_open_store_at(store, data, &s, err, sizeof err) != 0) {
        fprintf(stderr, "alallo accounts: %s\n", err);
        return 1;
    }
    char key[KEYS_MAX];
    enum alallo_err e = setup_create_account(s, name, key);
    store_close(s);
    if (e == ERR_CONFLICT) {
        fprintf(stderr, "alallo accounts: an account named %s exists already\n", name);
        return 1;
    }
    if (e == ERR_INVALID) {
        fprintf(stderr, "alallo accounts: a name is 1 to 64 letters, digits, '.', '-' or '_'\n");
        return 2;
    }
    if (e) {
        fprintf(stderr, "alallo accounts: %s\n", store_last_error());
        return 1;
    }
    printf("Created the account %s. Its API key, shown this once:\n%s\n", name, key);
    return 0;
}
