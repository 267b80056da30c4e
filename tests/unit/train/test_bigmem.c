/* test_bigmem.c - the trainer's large blocks: zeroed like calloc, marked
 * for huge pages on Linux (the mapping's VmFlags carry "hg"), left alone
 * when ALALLO_HUGEPAGES=0. */
#define _DEFAULT_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "train/kernels/bigmem.h"

/* 1 when the mapping holding p has the huge-page advice (VmFlags "hg"),
 * 0 when not, -1 when /proc/self/smaps cannot tell. */
static int advised(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512];
    int inside = 0, found = -1;
    uintptr_t a = (uintptr_t)p;
    while (fgets(line, sizeof line, f)) {
        unsigned long s, e;
        if (sscanf(line, "%lx-%lx ", &s, &e) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = a >= s && a < e;
            continue;
        }
        if (inside && strncmp(line, "VmFlags:", 8) == 0) {
            found = strstr(line, " hg") != NULL;
            break;
        }
    }
    fclose(f);
    return found;
}

static void zeroed_like_calloc(void **state)
{
    (void)state;
    size_t n = (size_t)5 << 20; /* 20 MiB of floats */
    float *x = bigmem_calloc(n, sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i += 4099)
        assert_true(x[i] == 0.0f);
    x[n - 1] = 1.0f;
    free(x);
    assert_null(bigmem_calloc(SIZE_MAX / 2, 4)); /* n * size overflows */
    char *small = bigmem_calloc(3, 5);
    assert_non_null(small);
    for (int i = 0; i < 15; i++)
        assert_int_equal(small[i], 0);
    free(small);
    bigmem_mark(NULL, (size_t)8 << 20); /* NULL is allowed */
}

static void large_blocks_are_marked(void **state)
{
    (void)state;
#if defined(__linux__)
    size_t bytes = (size_t)16 << 20;
    char *big = bigmem_calloc(bytes, 1);
    assert_non_null(big);
    /* the 2 MiB-aligned inside: its first page is past the start */
    char *in = (char *)(((uintptr_t)big + ((size_t)2 << 20)) & ~(((uintptr_t)2 << 20) - 1));
    int got = advised(in);
    if (got < 0) {
        printf("skip: /proc/self/smaps has no VmFlags here\n");
        free(big);
        skip();
    }
    assert_int_equal(got, 1);
    free(big);
#else
    printf("skip: huge-page advice is Linux's\n");
    skip();
#endif
}

static void off_switch_leaves_blocks_unmarked(void **state)
{
    (void)state;
#if defined(__linux__)
    /* in a child, so that the environment change stays there */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("ALALLO_HUGEPAGES", "0", 1);
        char *big = bigmem_calloc((size_t)16 << 20, 1);
        char *in = big + ((size_t)4 << 20);
        _exit(big && advised(in) == 0 ? 0 : 1);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
#else
    skip();
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(zeroed_like_calloc),
        cmocka_unit_test(large_blocks_are_marked),
        cmocka_unit_test(off_switch_leaves_blocks_unmarked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
