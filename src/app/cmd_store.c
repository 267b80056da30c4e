/* cmd_store.c - `alallo store`: operations on a store by URL.
 *
 *   alallo store migrate URL     brings the store at URL to this build's
 *                                schema (creating its tables), then exits
 *   alallo store copy FROM TO    copies a SQLite store (sqlite:DIR) into an
 *                                empty PostgreSQL one (postgresql://…)
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "app/cmds.h"
#include "core/cmd_help.h"
#include "store/store.h"
#include "store/store_copy.h"

static void usage(FILE *f)
{
    fputs("usage: alallo store migrate URL\n"
          "       alallo store copy sqlite:DIR postgresql://…\n",
          f);
}

static int migrate(const char *url)
{
    struct store *s;
    char err[512];
    if (store_open_url(url, &s, err, sizeof err)) {
        fprintf(stderr, "alallo store: %s\n", err);
        return 1;
    }
    printf("The store is at schema version %d.\n", store_schema_version(s));
    store_close(s);
    return 0;
}

static int copy(const char *from, const char *to)
{
    long long rows[STORE_COPY_TABLES];
    char err[512];
    if (store_copy(from, to, rows, err, sizeof err)) {
        fprintf(stderr, "alallo store copy: %s\n", err);
        return 1;
    }
    long long total = 0;
    for (int i = 0; i < STORE_COPY_TABLES; i++) {
        printf("%-12s %lld\n", store_copy_table_name(i), rows[i]);
        total += rows[i];
    }
    printf("Copied %lld rows; the counts match on both sides.\n", total);
    return 0;
}

int cmd_store(int argc, char **argv)
{
    if (cmd_help_asked(argc, argv)) {
        usage(stdout);
        return 0;
    }
    umask(077); /* a new SQLite file holds key hashes */
    if (argc == 3 && strcmp(argv[1], "migrate") == 0)
        return migrate(argv[2]);
    if (argc == 4 && strcmp(argv[1], "copy") == 0)
        return copy(argv[2], argv[3]);
    usage(stderr);
    return 2;
}
