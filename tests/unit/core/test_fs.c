/* test_fs.c - the shared file-system steps: mkdir -p, rm -rf that never
 * follows a link, copying, and durable replacement. Each test works under
 * its own folder in /tmp and removes it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fs.h"

static char base[256];

static int setup(void **state)
{
    (void)state;
    snprintf(base, sizeof base, "/tmp/alallo-test-fs-%ld", (long)getpid());
    fs_remove_tree(base);
    return mkdir(base, 0700);
}

static int teardown(void **state)
{
    (void)state;
    return fs_remove_tree(base);
}

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void get(const char *path, char *out, size_t cap)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    fclose(f);
}

static void mkdirs_makes_every_level(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/a/b/c", base);
    assert_int_equal(fs_mkdirs(path, 0700), 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(fs_mkdirs(path, 0700), 0); /* already there */
    char file[512], under[600];
    snprintf(file, sizeof file, "%s/a/file", base);
    put(file, "x");
    snprintf(under, sizeof under, "%s/d", file);
    assert_int_equal(fs_mkdirs(under, 0700), -1);
    char huge[FS_MAX_PATH + 10];
    memset(huge, 'a', sizeof huge - 1);
    huge[sizeof huge - 1] = '\0';
    assert_int_equal(fs_mkdirs(huge, 0700), -1);
    assert_int_equal(errno, ENAMETOOLONG);
}

static void remove_tree_keeps_what_links_point_to(void **state)
{
    (void)state;
    char tree[512], deep[600], keep[512], keep_file[600], link[600];
    snprintf(tree, sizeof tree, "%s/tree", base);
    snprintf(deep, sizeof deep, "%s/x/y", tree);
    assert_int_equal(fs_mkdirs(deep, 0700), 0);
    snprintf(deep, sizeof deep, "%s/x/y/f", tree);
    put(deep, "data");
    snprintf(keep, sizeof keep, "%s/keep", base);
    assert_int_equal(mkdir(keep, 0700), 0);
    snprintf(keep_file, sizeof keep_file, "%s/precious", keep);
    put(keep_file, "stay");
    snprintf(link, sizeof link, "%s/x/to-keep", tree);
    assert_int_equal(symlink(keep, link), 0);

    assert_int_equal(fs_remove_tree(tree), 0);
    assert_int_equal(access(tree, F_OK), -1);
    assert_int_equal(access(keep_file, F_OK), 0);
    assert_int_equal(fs_remove_tree(tree), 0); /* gone already */
    assert_int_equal(fs_remove_tree(keep_file), 0); /* a single file */
    assert_int_equal(access(keep_file, F_OK), -1);
}

static void copy_and_durable_write_replace_whole_files(void **state)
{
    (void)state;
    char a[512], b[512], buf[64];
    snprintf(a, sizeof a, "%s/a.txt", base);
    snprintf(b, sizeof b, "%s/b.txt", base);
    put(a, "hello");
    put(b, "a longer old text");
    assert_int_equal(fs_copy_file(a, b), 0);
    get(b, buf, sizeof buf);
    assert_string_equal(buf, "hello");
    char missing[512];
    snprintf(missing, sizeof missing, "%s/none", base);
    assert_int_equal(fs_copy_file(missing, b), -1);

    assert_int_equal(fs_write_durably(a, "new\n", 4, 0600), 0);
    get(a, buf, sizeof buf);
    assert_string_equal(buf, "new\n");
    struct stat st;
    assert_int_equal(stat(a, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", a);
    assert_int_equal(access(tmp, F_OK), -1);
    char nodir[512];
    snprintf(nodir, sizeof nodir, "%s/no/such/file", base);
    assert_int_equal(fs_write_durably(nodir, "x", 1, 0600), -1);
    assert_int_equal(fs_sync_parent(a), 0);
    char line[8];
    put(b, "token\r\nnext\n");
    assert_int_equal(fs_read_line(b, line, sizeof line), 0);
    assert_string_equal(line, "token");
    put(b, "\n");
    assert_int_equal(fs_read_line(b, line, sizeof line), -1);
    assert_int_equal(fs_read_line(missing, line, sizeof line), -1);
    assert_int_equal(fs_sync_dir(base), 0);
    assert_int_equal(fs_sync_dir(nodir), -1);
}

static void write_all_writes_everything(void **state)
{
    (void)state;
    char p[512], buf[64];
    snprintf(p, sizeof p, "%s/w", base);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(fs_write_all(fd, "abc", 3), 0);
    assert_int_equal(fs_write_all(fd, "", 0), 0);
    close(fd);
    get(p, buf, sizeof buf);
    assert_string_equal(buf, "abc");
    assert_int_equal(fs_write_all(-1, "abc", 3), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(mkdirs_makes_every_level, setup, teardown),
        cmocka_unit_test_setup_teardown(remove_tree_keeps_what_links_point_to, setup, teardown),
        cmocka_unit_test_setup_teardown(copy_and_durable_write_replace_whole_files, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(write_all_writes_everything, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
