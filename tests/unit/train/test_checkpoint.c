/* test_checkpoint.c - checkpoint folders: write and read back exactly,
 * find the latest, skip torn / corrupt / unmarked ones, prune. */
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

#include "core/fs.h"
#include "train/formats/checkpoint.h"

static char root[256];

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "/tmp/alallo-test-ckpt-%ld", (long)getpid());
    fs_remove_tree(root);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fs_remove_tree(root);
    return 0;
}

static void fill(struct ckpt *c, uint64_t step, size_t n, float *p, float *m, float *v)
{
    memset(c, 0, sizeof *c);
    c->step = step;
    c->opt_t = step;
    c->epoch = 2;
    c->cursor = 7;
    rng_seed(&c->rng, step);
    c->train_loss = 1.25 + (double)step;
    c->n = n;
    for (size_t i = 0; i < n; i++) {
        p[i] = (float)i * 0.5f + (float)step;
        m[i] = -(float)i;
        v[i] = (float)i * 2.0f;
    }
    c->params = p;
    c->m = m;
    c->v = v;
    c->meta_json = "{\"adapter\":\"lora\"}";
}

static void write_read_exact(void **state)
{
    (void)state;
    enum { N = 1001 }; /* odd: the checksum's tail handling matters */
    float p[N], m[N], v[N];
    struct ckpt c, r;
    fill(&c, 40, N, p, m, v);
    char path[CKPT_MAX_PATH], err[300];
    assert_int_equal(ckpt_write(root, &c, path, sizeof path, err, sizeof err), 0);
    char want[300];
    snprintf(want, sizeof want, "%s/step-00000040", root);
    assert_string_equal(path, want);
    assert_int_equal(ckpt_verify(path, err, sizeof err), 0);
    assert_int_equal(ckpt_read(path, &r, err, sizeof err), 0);
    assert_int_equal(r.step, 40);
    assert_int_equal(r.opt_t, 40);
    assert_int_equal(r.epoch, 2);
    assert_int_equal(r.cursor, 7);
    assert_memory_equal(&r.rng, &c.rng, sizeof r.rng);
    assert_true(r.train_loss == c.train_loss);
    assert_int_equal(r.n, N);
    assert_memory_equal(r.params, p, sizeof p);
    assert_memory_equal(r.m, m, sizeof m);
    assert_memory_equal(r.v, v, sizeof v);
    assert_string_equal(r.meta_json, "{\"adapter\":\"lora\"}");
    ckpt_release(&r);
    /* no temporary folders are left */
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s/.tmp-step-00000040-%ld", root, (long)getpid());
    struct stat sb;
    assert_int_not_equal(stat(tmp, &sb), 0);
}

static void corrupt_byte(const char *path, long off)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, off, SEEK_SET);
    int ch = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(ch ^ 0x10, f);
    fclose(f);
}

static void latest_skips_bad_ones(void **state)
{
    (void)state;
    enum { N = 64 };
    float p[N], m[N], v[N];
    struct ckpt c;
    char path[CKPT_MAX_PATH], err[300], f[400];
    uint64_t step = 0;
    assert_int_equal(ckpt_latest(root, path, sizeof path, &step, err, sizeof err), 0);
    for (uint64_t s = 10; s <= 40; s += 10) {
        fill(&c, s, N, p, m, v);
        assert_int_equal(ckpt_write(root, &c, path, sizeof path, err, sizeof err), 0);
    }
    assert_int_equal(ckpt_latest(root, path, sizeof path, &step, err, sizeof err), 1);
    assert_int_equal(step, 40);
    /* 40: a flipped bit in the weights */
    snprintf(f, sizeof f, "%s/step-00000040/state.bin", root);
    corrupt_byte(f, 200);
    assert_int_equal(ckpt_verify(path, err, sizeof err), -1);
    assert_non_null(strstr(err, "state.bin does not match"));
    /* 30: truncated */
    snprintf(f, sizeof f, "%s/step-00000030/state.bin", root);
    assert_int_equal(truncate(f, 100), 0);
    /* 50: a folder without COMPLETE (as if renamed by hand mid-write) */
    snprintf(f, sizeof f, "%s/step-00000050", root);
    assert_int_equal(mkdir(f, 0755), 0);
    assert_int_equal(ckpt_latest(root, path, sizeof path, &step, err, sizeof err), 1);
    assert_int_equal(step, 20);
    /* 20: meta.json edited */
    snprintf(f, sizeof f, "%s/step-00000020/meta.json", root);
    corrupt_byte(f, 2);
    assert_int_equal(ckpt_latest(root, path, sizeof path, &step, err, sizeof err), 1);
    assert_int_equal(step, 10);
    /* a leftover temporary folder of a dead attempt is pruned; so are the
     * complete ones beyond the newest `keep` complete (40, 30, 20, 10: all
     * have COMPLETE; keep 2 leaves 40 and 30) */
    snprintf(f, sizeof f, "%s/.tmp-step-00000060-999999", root);
    assert_int_equal(mkdir(f, 0755), 0);
    int deleted = ckpt_prune(root, 2, 0);
    assert_int_equal(deleted, 3);
    struct stat sb;
    assert_int_not_equal(stat(f, &sb), 0);
    snprintf(f, sizeof f, "%s/step-00000050", root);
    assert_int_equal(stat(f, &sb), 0); /* not complete: not counted, not deleted */
    /* rewriting an existing step replaces it */
    fill(&c, 40, N, p, m, v);
    assert_int_equal(ckpt_write(root, &c, path, sizeof path, err, sizeof err), 0);
    assert_int_equal(ckpt_latest(root, path, sizeof path, &step, err, sizeof err), 1);
    assert_int_equal(step, 40);
}

/* An attempt told to resume from step 20 finds 20 even with newer
 * checkpoints beside it, removes those (the work of an attempt that died
 * before reporting them), and its pruning never removes step 20. */
static void resume_from_a_named_step(void **state)
{
    (void)state;
    enum { N = 64 };
    float p[N], m[N], v[N];
    struct ckpt c;
    char path[CKPT_MAX_PATH], err[300];
    uint64_t step = 0;
    for (uint64_t s = 10; s <= 40; s += 10) {
        fill(&c, s, N, p, m, v);
        assert_int_equal(ckpt_write(root, &c, path, sizeof path, err, sizeof err), 0);
    }
    assert_int_equal(ckpt_latest_at_most(root, 25, path, sizeof path, &step, err, sizeof err), 1);
    assert_int_equal(step, 20);
    assert_int_equal(ckpt_latest_at_most(root, 5, path, sizeof path, &step, err, sizeof err), 0);
    assert_int_equal(ckpt_drop_after(root, 20), 2);
    assert_int_equal(ckpt_latest(root, path, sizeof path, &step, err, sizeof err), 1);
    assert_int_equal(step, 20);
    /* three newer ones written after the resume: keep 2 would drop 20, the
     * one the server knows; `hold` keeps it (10 goes) */
    for (uint64_t s = 30; s <= 50; s += 10) {
        fill(&c, s, N, p, m, v);
        assert_int_equal(ckpt_write(root, &c, path, sizeof path, err, sizeof err), 0);
    }
    assert_int_equal(ckpt_prune(root, 2, 20), 2);
    assert_int_equal(ckpt_latest_at_most(root, 20, path, sizeof path, &step, err, sizeof err), 1);
    assert_int_equal(step, 20);
    assert_int_equal(ckpt_latest_at_most(root, 19, path, sizeof path, &step, err, sizeof err), 0);
}

static void hash_is_split_invariant(void **state)
{
    (void)state;
    unsigned char buf[100];
    for (int i = 0; i < 100; i++)
        buf[i] = (unsigned char)(i * 7);
    uint64_t whole = ckpt_hash(buf, 100);
    struct ckpt_hasher h;
    ckpt_hasher_init(&h);
    ckpt_hasher_add(&h, buf, 3);
    ckpt_hasher_add(&h, buf + 3, 50);
    ckpt_hasher_add(&h, buf + 53, 47);
    assert_true(ckpt_hasher_final(&h) == whole);
    /* a shorter input with the same bytes differs (length is mixed in) */
    unsigned char z[16] = {0};
    assert_true(ckpt_hash(z, 8) != ckpt_hash(z, 16));
    buf[99] ^= 1;
    assert_true(ckpt_hash(buf, 100) != whole);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(write_read_exact, setup, teardown),
        cmocka_unit_test_setup_teardown(latest_skips_bad_ones, setup, teardown),
        cmocka_unit_test_setup_teardown(resume_from_a_named_step, setup, teardown),
        cmocka_unit_test(hash_is_split_invariant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
