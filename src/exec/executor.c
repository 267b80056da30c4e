/* executor.c - what every engine shares: the tag of an attempt. */
#include "exec/executor.h"

#include <string.h>

#include "core/ids.h"
#include "core/text.h"

bool exec_tag_for(const char *attempt_id, char tag[EXEC_TAG_MAX])
{
    if (!ids_valid(attempt_id))
        return false;
    return text_printf(tag, EXEC_TAG_MAX, "%s%s", EXEC_TAG_PREFIX, attempt_id);
}

bool exec_attempt_of(const char *tag, char *attempt_id, size_t cap)
{
    size_t n = strlen(EXEC_TAG_PREFIX);
    if (strncmp(tag, EXEC_TAG_PREFIX, n) != 0 || !ids_valid(tag + n))
        return false;
    return text_copy(attempt_id, cap, tag + n);
}

void executor_close(struct executor *x)
{
    if (x)
        x->ops->close(x);
}
