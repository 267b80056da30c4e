/* rft_data.c - a reinforcement job's data against its grader (rft_data.h). */
#include "control/rft_data.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/grader.h"
#include "core/text.h"

bool rft_data_check(const char *path, const char *name, const json_t *g, char *msg, size_t cap)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        text_error(msg, cap, "%s could not be read.", name);
        return false;
    }
    char *line = NULL;
    size_t linecap = 0;
    ssize_t n;
    long no = 0;
    bool ok = true;
    while (ok && (n = getline(&line, &linecap, f)) >= 0) {
        no++;
        json_t *item = json_loadb(line, (size_t)n, JSON_DECODE_ANY, NULL);
        char field[256];
        /* blank lines were skipped at upload; anything else is an object */
        if (json_is_object(item) && !grader_item_has_fields(g, item, field, sizeof field)) {
            text_error(msg, cap,
                       "line %ld of %s has no field \"%s\", which the grader reads as "
                       "{{item.%s}}.",
                       no, name, field, field);
            ok = false;
        }
        json_decref(item);
    }
    free(line);
    fclose(f);
    return ok;
}
