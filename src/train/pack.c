/* pack.c - first fit decreasing into rows (pack.h). */
#include "train/pack.h"

int pack_rows(const size_t *len, int n, size_t cap, int packing, int *row, size_t *off,
              struct pack_layout *out)
{
    if (n < 1 || n > PACK_MAX_EXAMPLES || cap < 2)
        return -1;
    size_t real = 0;
    for (int i = 0; i < n; i++) {
        if (len[i] < 1 || len[i] > cap)
            return -1;
        real += len[i];
    }
    size_t fill[PACK_MAX_EXAMPLES];
    int order[PACK_MAX_EXAMPLES];
    int rows = 0;
    if (!packing) {
        for (int i = 0; i < n; i++) {
            row[i] = i;
            off[i] = 0;
            fill[i] = len[i];
        }
        rows = n;
    } else {
        /* Insertion sort by length, longest first; stable, so equal lengths
         * keep their order and the layout is a function of the input. */
        for (int i = 0; i < n; i++) {
            int j = i;
            while (j > 0 && len[order[j - 1]] < len[i]) {
                order[j] = order[j - 1];
                j--;
            }
            order[j] = i;
        }
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
    }
    size_t T = 2;
    for (int r = 0; r < rows; r++)
        if (fill[r] > T)
            T = fill[r];
    out->rows = rows;
    out->T = (int)T;
    out->real = real;
    return 0;
}
