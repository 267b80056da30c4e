/* gguf.h - writing and reading GGUF v3 files (the format llama.cpp runs).
 *
 * Layout: "GGUF", u32 version 3, u64 tensor count, u64 key/value count; the
 * key/value pairs (key: u64 length + bytes; u32 value type; value); the
 * tensor infos (name, u32 n_dims, u64 dims fastest-first, u32 ggml type,
 * u64 offset into the data section); padding; then the data section, each
 * tensor starting at a multiple of the alignment (general.alignment, 32 by
 * default). All little-endian.
 *
 * Writing: collect key/values and tensors, then gguf_write emits the file
 * atomically (PATH.tmp, fsync, rename), asking each tensor's fill callback
 * for its bytes one tensor at a time, so memory stays at one tensor.
 * Reading maps the file and checks every count, length and offset before
 * any value is handed out; strings are copied and NUL-terminated.
 *
 * Ownership: the writer copies keys, strings and arrays it is given; the
 * reader owns its tables and mapping until gguf_close.
 */
#ifndef ALALLO_TRAIN_GGUF_H
#define ALALLO_TRAIN_GGUF_H

#include <stddef.h>
#include <stdint.h>

/* Value types of key/value pairs. */
enum gguf_vtype {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5,
    GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_U64 = 10,
    GGUF_I64 = 11, GGUF_F64 = 12, GGUF_VTYPE_COUNT
};

/* Tensor types (ggml's numbering); only these are written or read. The
 * block types (quant.h) need rows (ne[0]) of whole blocks. */
enum gguf_ttype {
    GGUF_T_F32 = 0, GGUF_T_F16 = 1, GGUF_T_Q4_0 = 2, GGUF_T_Q8_0 = 8, GGUF_T_Q4_K = 12,
    GGUF_T_Q6_K = 14, GGUF_T_BF16 = 30
};

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

/* ---- writing ------------------------------------------------------------- */

struct gguf_writer;

/* Produces a tensor's `nbytes` bytes (ggml layout, little-endian) into out.
 * Returns 0, or -1 to abort the write. */
typedef int (*gguf_fill_fn)(void *ctx, void *out, size_t nbytes);

struct gguf_writer *gguf_writer_new(void);
void gguf_writer_free(struct gguf_writer *w); /* NULL is fine */

/* Each adds one key/value pair in order; 0, or -1 on allocation failure. */
int gguf_set_u32(struct gguf_writer *w, const char *key, uint32_t v);
int gguf_set_i32(struct gguf_writer *w, const char *key, int32_t v);
int gguf_set_f32(struct gguf_writer *w, const char *key, float v);
int gguf_set_bool(struct gguf_writer *w, const char *key, int v);
int gguf_set_str(struct gguf_writer *w, const char *key, const char *v);
int gguf_set_arr_str(struct gguf_writer *w, const char *key, const char *const *v, size_t n);
int gguf_set_arr_i32(struct gguf_writer *w, const char *key, const int32_t *v, size_t n);
int gguf_set_arr_f32(struct gguf_writer *w, const char *key, const float *v, size_t n);

/* Adds a tensor. `ne` holds n_dims sizes, fastest-varying first (for a
 * row-major [rows, cols] matrix: ne = {cols, rows}). fill is called once,
 * during gguf_write, with ctx. 0, or -1 (bad type, rank or name). */
int gguf_add_tensor(struct gguf_writer *w, const char *name, enum gguf_ttype type, int n_dims,
                    const uint64_t *ne, gguf_fill_fn fill, void *ctx);

/* Writes the file. 0, or -1 with a one-line reason in err. */
int gguf_write(struct gguf_writer *w, const char *path, char *err, size_t errcap);

/* ---- reading ------------------------------------------------------------- */

struct gguf_file;

struct gguf_tensor_info {
    char *name;
    enum gguf_ttype type;
    int n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    const void *data; /* into the mapping */
    size_t nbytes;
};

struct gguf_file *gguf_open(const char *path, char *err, size_t errcap);
/* Parses a whole file image in memory (kept by the caller while in use). */
struct gguf_file *gguf_parse(const void *buf, size_t len, char *err, size_t errcap);
void gguf_close(struct gguf_file *f); /* NULL is fine */

uint32_t gguf_version(const struct gguf_file *f);
size_t gguf_kv_count(const struct gguf_file *f);
const char *gguf_kv_key(const struct gguf_file *f, size_t i);
/* Index of `key`, or -1. */
long gguf_find(const struct gguf_file *f, const char *key);
enum gguf_vtype gguf_kv_type(const struct gguf_file *f, size_t i);
/* Scalars of any integer, float or bool type, converted. */
int64_t gguf_kv_int(const struct gguf_file *f, size_t i);
double gguf_kv_float(const struct gguf_file *f, size_t i);
const char *gguf_kv_str(const struct gguf_file *f, size_t i); /* NULL unless a string */
/* Arrays: element type and count; elements read as integer, float or string. */
enum gguf_vtype gguf_arr_type(const struct gguf_file *f, size_t i);
size_t gguf_arr_len(const struct gguf_file *f, size_t i);
int64_t gguf_arr_int(const struct gguf_file *f, size_t i, size_t k);
double gguf_arr_float(const struct gguf_file *f, size_t i, size_t k);
const char *gguf_arr_str(const struct gguf_file *f, size_t i, size_t k);

size_t gguf_tensor_count(const struct gguf_file *f);
const struct gguf_tensor_info *gguf_tensor_at(const struct gguf_file *f, size_t i);
const struct gguf_tensor_info *gguf_tensor_find(const struct gguf_file *f, const char *name);

#endif
