/* safetensors.h - reading and writing safetensors files.
 *
 * Format: u64 little-endian header length, a JSON header
 * {"__metadata__":{...}, NAME: {"dtype","shape","data_offsets":[b,e]}}, then
 * the data buffer, row-major little-endian. Reading maps the file (mmap);
 * tensor data pointers stay valid until st_close. Every header field is
 * checked (offsets inside the buffer, shape product matching the byte size,
 * header at most 100 MiB) before any pointer is handed out.
 *
 * Alignment: the data buffer starts 8-byte aligned in files this writer
 * makes, but tensors are packed back to back, so `data` of a tensor that
 * follows an odd-sized one may be unaligned; copy with memcpy when unsure.
 * Writing keeps tensors in the order given.
 */
#ifndef ALALLO_TRAIN_SAFETENSORS_H
#define ALALLO_TRAIN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

enum st_dtype { ST_F32 = 0, ST_F16, ST_BF16, ST_I32, ST_I64, ST_U8, ST_I8, ST_DTYPE_COUNT };

#define ST_MAX_DIMS 4
#define ST_MAX_NAME 256

struct st_tensor {
    char name[ST_MAX_NAME];
    enum st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;  /* into the mapping (read) or the caller's memory (write) */
    size_t nbytes;
};

struct st_file;

/* Opens and validates `path`. NULL on failure with a one-line reason in err. */
struct st_file *st_open(const char *path, char *err, size_t errcap);
void st_close(struct st_file *f); /* NULL is fine */

size_t st_count(const struct st_file *f);
const struct st_tensor *st_at(const struct st_file *f, size_t i);
const struct st_tensor *st_find(const struct st_file *f, const char *name); /* NULL if absent */
/* Gives back the memory of the whole pages of the mapping that tensor t of
 * f (opened by st_open) lies on alone, once the caller has read it: a
 * loader that reads each tensor once then holds one tensor of the file at a
 * time, not the whole file (t->data stays readable, from the file again).
 * Nothing for a file st_parse made. */
void st_release(const struct st_file *f, const struct st_tensor *t);
/* A "__metadata__" string value, or NULL. */
const char *st_metadata(const struct st_file *f, const char *key);

/* Parses a header only (for fuzzing and tools): `buf` is the whole file. */
struct st_file *st_parse(const void *buf, size_t len, char *err, size_t errcap);

/* Writes tensors to `path` atomically (PATH.tmp, fsync, rename). metadata is
 * NULL or a NULL-terminated list of key, value, key, value, ... strings.
 * Returns 0, or -1 with a reason in err. */
int st_write(const char *path, const struct st_tensor *tensors, size_t n,
             const char *const *metadata, char *err, size_t errcap);
/* As st_write, for tensors made one at a time: a tensor whose data is NULL
 * (and nbytes not 0) gets its bytes from fill(ctx, i) when it is written.
 * What fill returns is owned by the caller and read only until the next
 * call, so one buffer serves every tensor; NULL from fill means out of
 * memory and fails the write (nothing is left at path). */
typedef const void *(*st_fill_fn)(void *ctx, size_t i);
int st_write_each(const char *path, const struct st_tensor *tensors, size_t n,
                  const char *const *metadata, st_fill_fn fill, void *ctx, char *err,
                  size_t errcap);

size_t st_dtype_size(enum st_dtype t);
const char *st_dtype_name(enum st_dtype t); /* "F32", "BF16", ... */

/* bf16/f16 <-> f32 conversions (round to nearest even). */
float st_bf16_to_f32(uint16_t h);
uint16_t st_f32_to_bf16(float f);
float st_f16_to_f32(uint16_t h);
uint16_t st_f32_to_f16(float f);

#endif
