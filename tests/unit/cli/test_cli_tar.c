/* test_cli_tar.c - unpacking folder exports: a real ustar archive made by
 * tar(1), and archives that try to escape the folder or carry links. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli_tar.h"

static char dir[256];

static int make_dir(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/alallo-test-tar-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int remove_dir(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void slurp(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
}

static void unpacks_what_tar_packed(void **state)
{
    (void)state;
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && mkdir -p src/sub && printf '{\"a\":1}' > src/config.json && "
             "head -c 3000 /dev/urandom > src/model.safetensors && echo deep > src/sub/x.txt && "
             ": > src/empty && cd src && tar --format=ustar -cf ../good.tar *",
             dir);
    assert_int_equal(system(cmd), 0);
    char tar[300], out[300], err[300] = "";
    snprintf(tar, sizeof tar, "%s/good.tar", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    if (cli_untar(tar, out, err, sizeof err) != 0)
        fail_msg("untar: %s", err);
    snprintf(cmd, sizeof cmd, "cd '%s' && diff -r src out", dir);
    assert_int_equal(system(cmd), 0);
    char text[64], path[400];
    snprintf(path, sizeof path, "%s/sub/x.txt", out);
    slurp(path, text, sizeof text);
    assert_string_equal(text, "deep\n");
    /* The target must not exist yet. */
    assert_int_equal(cli_untar(tar, out, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot create"));
}

/* One ustar member header. */
static void header(unsigned char h[512], const char *name, char type, size_t size)
{
    memset(h, 0, 512);
    snprintf((char *)h, 100, "%s", name);
    memcpy(h + 100, "0000644", 7);
    memcpy(h + 108, "0000000", 7);
    memcpy(h + 116, "0000000", 7);
    char sz[32];
    snprintf(sz, sizeof sz, "%011zo", size & 077777777777);
    memcpy(h + 124, sz, 11);
    memcpy(h + 136, "00000000000", 11);
    h[156] = (unsigned char)type;
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
}

static int try_archive(const char *name, char type, const char *content, char *err, size_t cap)
{
    char tar[300], out[300];
    snprintf(tar, sizeof tar, "%s/bad.tar", dir);
    snprintf(out, sizeof out, "%s/bad-out", dir);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
    assert_int_equal(system(cmd), 0);
    FILE *f = fopen(tar, "wb");
    unsigned char h[512], block[512];
    size_t n = strlen(content);
    header(h, name, type, n);
    fwrite(h, 1, 512, f);
    memset(block, 0, 512);
    memcpy(block, content, n);
    fwrite(block, 1, 512, f);
    memset(block, 0, 512);
    fwrite(block, 1, 512, f);
    fwrite(block, 1, 512, f);
    fclose(f);
    return cli_untar(tar, out, err, cap);
}

static void refuses_escapes_links_and_damage(void **state)
{
    (void)state;
    char err[300];
    assert_int_equal(try_archive("fine.txt", '0', "ok", err, sizeof err), 0);
    assert_int_equal(try_archive("../evil.txt", '0', "x", err, sizeof err), -1);
    assert_non_null(strstr(err, "unsafe name"));
    char evil[400];
    snprintf(evil, sizeof evil, "%s/evil.txt", dir);
    assert_int_not_equal(access(evil, F_OK), 0);
    assert_int_equal(try_archive("/tmp/abs.txt", '0', "x", err, sizeof err), -1);
    assert_int_equal(try_archive("a/../../b", '0', "x", err, sizeof err), -1);
    assert_int_equal(try_archive("a//b", '0', "x", err, sizeof err), -1);
    assert_int_equal(try_archive("link", '2', "", err, sizeof err), -1);
    assert_non_null(strstr(err, "unsupported entry"));
    assert_int_equal(try_archive("dev", '3', "", err, sizeof err), -1);

    /* A broken checksum and a truncated archive. */
    char tar[300], out[300];
    snprintf(tar, sizeof tar, "%s/broken.tar", dir);
    snprintf(out, sizeof out, "%s/broken-out", dir);
    FILE *f = fopen(tar, "wb");
    unsigned char h[512];
    header(h, "x.txt", '0', 2000);
    h[0] = 'y'; /* checksum no longer matches */
    fwrite(h, 1, 512, f);
    fclose(f);
    assert_int_equal(cli_untar(tar, out, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a ustar archive"));
    f = fopen(tar, "wb");
    header(h, "x.txt", '0', 2000);
    fwrite(h, 1, 512, f);
    fwrite("short", 1, 5, f);
    fclose(f);
    snprintf(out, sizeof out, "%s/broken-out2", dir);
    assert_int_equal(cli_untar(tar, out, err, sizeof err), -1);
    assert_non_null(strstr(err, "truncated"));
    /* No end marker at all. */
    f = fopen(tar, "wb");
    fclose(f);
    snprintf(out, sizeof out, "%s/broken-out3", dir);
    assert_int_equal(cli_untar(tar, out, err, sizeof err), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(unpacks_what_tar_packed),
        cmocka_unit_test(refuses_escapes_links_and_damage),
    };
    return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
