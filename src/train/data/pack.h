/* pack.h - laying one step's examples out as the rows of a batch.
 *
 * Without packing every example gets a row of its own and the rows are
 * padded to the longest. With packing (the default, docs/trainer.md) the
 * step's examples are placed first fit in decreasing length (ties in
 * order) into rows of at most `cap` tokens, so short examples share a row
 * instead of paying for padding; a few row lengths up to `cap` are tried
 * and the layout computing the fewest positions (rows x longest row, then
 * the shorter rows) is kept, one example a row included, so packing never
 * computes more than padding would. The step's examples are the same either
 * way (batch_size examples of the epoch's order), so the data order, the
 * number of steps and exact resume do not change; attention and rotary
 * positions stay inside each example (model_forward_backward_packed), so a
 * packed step computes the same loss and gradient as an unpacked one.
 *
 * Pure: no allocation, no I/O.
 */
#ifndef ALALLO_TRAIN_PACK_H
#define ALALLO_TRAIN_PACK_H

#include <stddef.h>

#define PACK_MAX_EXAMPLES 1024 /* examples of one step (batch_size's limit) */

struct pack_layout {
    int rows;     /* rows used, 1..n */
    int T;        /* the longest row, at least 2 */
    size_t real;  /* tokens of the examples: the rest of rows*T is padding */
};

/* Places n examples (1..PACK_MAX_EXAMPLES) of lengths len[] (each 1..cap)
 * into rows. row[i] OUT: example i's row; off[i] OUT: its first position in
 * the row. packing 0: example i alone in row i. Returns 0, or -1 when an
 * argument is out of range (nothing written to *out then). */
int pack_rows(const size_t *len, int n, size_t cap, int packing, int *row /* OUT (n) */,
              size_t *off /* OUT (n) */, struct pack_layout *out /* OUT */);

#endif
