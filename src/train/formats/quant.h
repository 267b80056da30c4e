/* quant.h - ggml's block quantization formats, written and read by alallo
 * (for quantized GGUF export and for running the same weights here).
 *
 * A row of n values (n a multiple of the block size) is stored as n / block
 * blocks, each little-endian and packed as ggml defines it:
 *   Q8_0  32 values, 34 bytes: f16 d; int8 q[32].        x = d * q
 *   Q4_0  32 values, 18 bytes: f16 d; u8 qs[16]; value j in the low nibble
 *         of qs[j], value j + 16 in the high nibble.     x = d * (q - 8)
 *   Q4_K  256 values, 144 bytes: f16 d; f16 dmin; u8 scales[12] (eight
 *         6-bit scales and eight 6-bit mins, packed as below); u8 qs[128].
 *         Sub-block s (32 values) has x = d * sc[s] * q - dmin * m[s],
 *         q in 0..15; each 64 values share 32 bytes of qs, the first 32 in
 *         the low nibbles, the next 32 in the high ones.
 *         Packing: for s < 4, scales[s] low 6 bits = sc[s], scales[s + 4]
 *         low 6 bits = m[s]; for s >= 4, scales[s + 4] = (sc[s] & 15) |
 *         (m[s] & 15) << 4, and the high 2 bits of sc[s] and m[s] go to the
 *         top 2 bits of scales[s - 4] and scales[s].
 *   Q6_K  256 values, 210 bytes: u8 ql[128] (low 4 bits); u8 qh[64] (high
 *         2 bits); int8 scales[16] (one per 16 values); f16 d.
 *         x = d * scales[i / 16] * (q - 32), q in 0..63; within each half of
 *         128 values, value l + 32 * k (l < 32, k < 4) keeps its low bits in
 *         ql[l + 32 * (k & 1)] (low nibble for k < 2, high for k >= 2) and
 *         its high bits in qh[l] at bit 2 * k.
 * The quantizers here are alallo's own (a scale from each block's largest
 * magnitude, rounded to nearest); any encoder's bytes decode the same way.
 *
 * Schemes name what `alallo export --dtype` offers: q8_0 and q4_0 store
 * every matrix in that type; q4_k_m stores most in Q4_K and the output
 * head (or the tied embedding), attn_v and ffn_down in Q6_K, as llama.cpp's
 * Q4_K_M mix does for its sensitive tensors. A matrix whose rows are not a
 * multiple of the block falls back (Q4_K to Q4_0, Q6_K to Q8_0, Q*_0 to
 * F16). Vectors stay F32.
 */
#ifndef ALALLO_TRAIN_QUANT_H
#define ALALLO_TRAIN_QUANT_H

#include <stddef.h>
#include <stdint.h>

/* ggml's tensor type numbers of the formats. */
enum quant_type { QUANT_F16 = 1, QUANT_Q4_0 = 2, QUANT_Q8_0 = 8, QUANT_Q4_K = 12, QUANT_Q6_K = 14 };

enum quant_scheme { QSCHEME_Q8_0, QSCHEME_Q4_0, QSCHEME_Q4_K_M };

/* What a matrix is to the model, for the schemes' choice. A mixture of
 * experts' router no scheme quantizes: its callers keep it F32, as
 * llama.cpp's own converter does (quant_pick treats it as other). */
enum quant_role { QROLE_OTHER, QROLE_OUTPUT, QROLE_ATTN_V, QROLE_FFN_DOWN, QROLE_ROUTER };

/* The role of a Hugging Face tensor name: lm_head (and the embedding when
 * `tied`) is the output, *.v_proj.weight attn_v, *.down_proj.weight
 * ffn_down, *.mlp.gate.weight (qwen3_moe's router) the router. */
enum quant_role quant_role_of(const char *hf_name, int tied);

/* "q8_0", "q4_0", "q4_k_m" -> 0 and *out; -1 if unknown. */
int quant_scheme_parse(const char *name, enum quant_scheme *out /* OUT */);
/* llama.cpp's general.file_type of the scheme (7, 2, 15). */
uint32_t quant_scheme_file_type(enum quant_scheme s);

/* The type a matrix of `cols` columns (values per row) with `role` gets. */
enum quant_type quant_pick(enum quant_scheme s, enum quant_role role, size_t cols);

/* Values per block (1 for F16), bytes per block. */
size_t quant_block_values(enum quant_type t);
size_t quant_block_bytes(enum quant_type t);
/* Bytes of a row of n values; 0 when n is not a multiple of the block. */
size_t quant_row_bytes(enum quant_type t, size_t n);

/* Encodes n values (a multiple of the block) into quant_row_bytes bytes. */
void quant_row(enum quant_type t, const float *x, size_t n, void *out);
/* Decodes a row of n values. */
void quant_dequant_row(enum quant_type t, const void *in, size_t n, float *y);

#endif
