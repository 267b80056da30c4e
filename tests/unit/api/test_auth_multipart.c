/* test_auth_multipart.c - API keys and bearer tokens; multipart bodies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "api/auth.h"
#include "api/multipart.h"

static void keys(void **state)
{
    (void)state;
    char a[KEYS_MAX], b[KEYS_MAX], ha[KEYS_HASH_HEX], hb[KEYS_HASH_HEX], ha2[KEYS_HASH_HEX];
    assert_int_equal(keys_new_api_key(a, sizeof a), 0);
    assert_int_equal(keys_new_api_key(b, sizeof b), 0);
    assert_int_equal(strncmp(a, "sk-alallo-", 10), 0);
    assert_int_equal(strlen(a), 10 + 64);
    assert_string_not_equal(a, b);
    keys_hash(a, ha);
    keys_hash(a, ha2);
    keys_hash(b, hb);
    assert_string_equal(ha, ha2);
    assert_string_not_equal(ha, hb);
    assert_null(strstr(ha, a + 10)); /* the hash is not the key */
    char small[20];
    assert_int_equal(keys_new_api_key(small, sizeof small), -1);
}

static void bearer(void **state)
{
    (void)state;
    char t[KEYS_MAX];
    assert_true(auth_bearer("Bearer abc", t, sizeof t));
    assert_string_equal(t, "abc");
    assert_true(auth_bearer("bearer   abc  ", t, sizeof t));
    assert_string_equal(t, "abc");
    assert_false(auth_bearer("Basic abc", t, sizeof t));
    assert_false(auth_bearer("Bearer ", t, sizeof t));
    assert_false(auth_bearer(NULL, t, sizeof t));
    char tiny[4];
    assert_false(auth_bearer("Bearer abcdef", tiny, sizeof tiny));
    assert_true(keys_equal("abc", "abc"));
    assert_false(keys_equal("abc", "abd"));
    assert_false(keys_equal("abc", "abcd"));
    assert_false(keys_equal("", ""));
}

static void boundary(void **state)
{
    (void)state;
    char b[MULTIPART_BOUNDARY_MAX];
    assert_int_equal(multipart_boundary("multipart/form-data; boundary=----abc123", b), 0);
    assert_string_equal(b, "----abc123");
    assert_int_equal(multipart_boundary("multipart/form-data; charset=x; boundary=\"a;b c\"", b), 0);
    assert_string_equal(b, "a;b c");
    assert_int_equal(multipart_boundary("application/json", b), -1);
    assert_int_equal(multipart_boundary("multipart/form-data", b), -1);
    char longb[200] = "multipart/form-data; boundary=";
    memset(longb + strlen(longb), 'x', 100);
    assert_int_equal(multipart_boundary(longb, b), -1);
}

static void parts(void **state)
{
    (void)state;
    const char body[] = "preamble\r\n--B\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n"
                        "fine-tune\r\n--B\r\nContent-Disposition: form-data; name=\"file\"; "
                        "filename=\"my; data.jsonl\"\r\nContent-Type: application/octet-stream\r\n"
                        "\r\nline1\r\nline2\r\n\r\n--B--\r\n";
    struct multipart_part p[4];
    int n;
    char err[200];
    assert_int_equal(multipart_parse(body, sizeof body - 1, "B", p, 4, &n, err, sizeof err), 0);
    assert_int_equal(n, 2);
    const struct multipart_part *f = multipart_find(p, n, "file");
    assert_non_null(f);
    assert_string_equal(f->filename, "my; data.jsonl");
    assert_string_equal(f->content_type, "application/octet-stream");
    assert_int_equal(f->len, strlen("line1\r\nline2\r\n"));
    assert_memory_equal(f->data, "line1\r\nline2\r\n", f->len);
    const struct multipart_part *pu = multipart_find(p, n, "purpose");
    assert_int_equal(pu->len, 9);
    assert_string_equal(pu->filename, "");
    assert_null(multipart_find(p, n, "nope"));
}

static void malformed(void **state)
{
    (void)state;
    struct multipart_part p[2];
    int n;
    char err[200];
    const char *cut = "--B\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nabc";
    assert_int_equal(multipart_parse(cut, strlen(cut), "B", p, 2, &n, err, sizeof err), -1);
    assert_non_null(strstr(err, "closing boundary"));
    const char *noname = "--B\r\nContent-Type: text/plain\r\n\r\nabc\r\n--B--";
    assert_int_equal(multipart_parse(noname, strlen(noname), "B", p, 2, &n, err, sizeof err), -1);
    assert_int_equal(multipart_parse(NULL, 0, "B", p, 2, &n, err, sizeof err), -1);
    assert_non_null(strstr(err, "empty"));
    const char *none = "just some bytes";
    assert_int_equal(multipart_parse(none, strlen(none), "B", p, 2, &n, err, sizeof err), -1);
    const char *three = "--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n"
                        "--B\r\nContent-Disposition: form-data; name=\"b\"\r\n\r\n2\r\n"
                        "--B\r\nContent-Disposition: form-data; name=\"c\"\r\n\r\n3\r\n--B--";
    assert_int_equal(multipart_parse(three, strlen(three), "B", p, 2, &n, err, sizeof err), -1);
    assert_non_null(strstr(err, "too many"));
    /* A delimiter-like string inside the data does not end the part unless
     * it is a whole delimiter line. */
    const char *inner = "--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx--B y\r\n--B--";
    assert_int_equal(multipart_parse(inner, strlen(inner), "B", p, 2, &n, err, sizeof err), 0);
    assert_int_equal(p[0].len, 6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(keys),  cmocka_unit_test(bearer),    cmocka_unit_test(boundary),
        cmocka_unit_test(parts), cmocka_unit_test(malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
