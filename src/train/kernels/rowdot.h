/* rowdot.h - y = x W^T + b for a few rows x and an fp32 W, each output one
 * dot product in one fixed order, whatever the number of rows, the tiling
 * or the threads: a row gets the same bits in a batch of many as alone.
 * That is what lets the resident engine batch decode steps and still give
 * the answers `alallo generate` gives (train/run/decode.h).
 *
 * The order of a dot product of n floats: 16 lanes (two groups of 8, each
 * lane a running sum of products, one multiply then one add per step),
 * then their sum in a fixed tree, then the tail one by one. The products
 * are done in register tiles (two weight rows by two x rows; four weight
 * rows by one x row when there is one row) so that each weight and each x
 * value loaded serves several outputs, and the next block's weight rows
 * are fetched from memory while a block's products run (a decode step
 * reads each weight once from memory); every tile keeps that order. Where
 * the CPU has AVX-512, each product's 16 lanes are one register and the
 * fetching is left to the hardware (faster there, the same bits), and the
 * rows go in groups of two to four against four weight rows, each group
 * against a block while it is in the caches: a short prompt's rows run
 * 1.4x to 1.6x the packed product at 21 rows on the 1B shape's products,
 * which is why the decode path sends short prompts here too
 * (bench/serve/prefill_flops.sh).
 *
 * Ownership: everything is the caller's; nothing is kept.
 */
#ifndef ALALLO_TRAIN_ROWDOT_H
#define ALALLO_TRAIN_ROWDOT_H

/* The dot product of a and b (n floats) in the order above. */
float rowdot(const float *a, const float *b, int n);

/* y[i * out + o] = rowdot(x + i * in, w + o * in, in) + (bias ? bias[o] :
 * 0) for rows i < n and outputs o < out; OpenMP threads share the outputs
 * when the product is large enough. */
void rowdot_times_wt(float *y, const float *x, int n, const float *w, const float *bias,
                     int out, int in);

#endif
