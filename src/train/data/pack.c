/* pack.c - first fit decreasing into rows (pack.h). */
#include "train/data/pack.h"

#include <string.h>

/* First fit decreasing of the examples in `order` into rows of at most
 * cap tokens. Returns the rows used; *T gets the longest row. */
static int first_fit(const size_t *len, const int *order, int n, size_t cap, int *row,
                     size_t *off, size_t *T)
{
    size_t fill[PACK_MAX_EXAMPLES];
    int rows = 0;
    for (int k = 0; k < n; k++) {
        int i = order[k], r = 0;
        while (r < rows && fill[r] + len[i] > cap)
            r++;
        if (r == rows)
            fill[rows++] = 0;
        row[i] = r;
        off[i] = fill[r];
        fill[r] += len[i];
    }
    *T = 0;
    for (int r = 0; r < rows; r++)
        if (fill[r] > *T)
            *T = fill[r];
    return rows;
}

int pack_rows(const size_t *len, int n, size_t cap, int packing, int *row, size_t *off,
              struct pack_layout *out)
{
    if (n < 1 || n > PACK_MAX_EXAMPLES || cap < 2)
        return -1;
    size_t real = 0, longest = 0;
    for (int i = 0; i < n; i++) {
        if (len[i] < 1 || len[i] > cap)
            return -1;
        real += len[i];
        if (len[i] > longest)
            longest = len[i];
    }
    /* One example a row: the layout packing must beat. */
    for (int i = 0; i < n; i++) {
        row[i] = i;
        off[i] = 0;
    }
    int best_rows = n;
    size_t best_T = longest;
    if (packing) {
        /* Insertion sort by length, longest first; stable, so equal lengths
         * keep their order and the layout is a function of the input. */
        int order[PACK_MAX_EXAMPLES];
        for (int i = 0; i < n; i++) {
            int j = i;
            while (j > 0 && len[order[j - 1]] < len[i]) {
                order[j] = order[j - 1];
                j--;
            }
            order[j] = i;
        }
        /* Row lengths to try: the context, and the lengths that would hold
         * everything in R rows for R growing geometrically. The cheapest
         * layout (rows x longest row, then the shorter rows) wins. */
        int r2[PACK_MAX_EXAMPLES];
        size_t o2[PACK_MAX_EXAMPLES];
        size_t last = 0;
        for (int R = 0; R <= n; R = R + 1 + R / 4) {
            size_t c = R == 0 ? cap : (real + (size_t)R - 1) / (size_t)R;
            if (c < longest)
                c = longest;
            if (c > cap || c == last)
                continue;
            last = c;
            size_t T;
            int rows = first_fit(len, order, n, c, r2, o2, &T);
            size_t cost = (size_t)rows * T, best = (size_t)best_rows * best_T;
            if (cost < best || (cost == best && T < best_T)) {
                best_rows = rows;
                best_T = T;
                memcpy(row, r2, (size_t)n * sizeof *row);
                memcpy(off, o2, (size_t)n * sizeof *off);
            }
        }
    }
    out->rows = best_rows;
    out->T = best_T < 2 ? 2 : (int)best_T;
    out->real = real;
    return 0;
}
