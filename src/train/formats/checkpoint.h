/* checkpoint.h - the trainer's checkpoints: one folder per checkpoint,
 * written atomically, verified before a resume.
 *
 * Layout: ROOT/step-NNNNNNNN/ with
 *   state.bin  magic "ALALLOCK", version, step, optimizer step count, data
 *              cursor (epoch, position), RNG state, train loss, and the
 *              trainable parameters with both AdamW moments (fp32, little
 *              endian);
 *   meta.json  the run's settings (what the parameters are: full weights or
 *              LoRA adapters, rank, targets, precision), written by the caller;
 *   COMPLETE   "alallo-checkpoint 1" then one line per file: name, size and a
 *              64-bit checksum.
 * Written under ROOT/.tmp-step-NNNNNNNN-PID, every file and the folder
 * fsynced, COMPLETE last, then renamed into place and ROOT fsynced. A folder
 * without COMPLETE, or whose files do not match it, is not a checkpoint.
 *
 * Ownership: for writing, the caller owns every array in struct ckpt; for
 * reading, ckpt_read allocates them and ckpt_release frees them.
 */
#ifndef ALALLO_TRAIN_CHECKPOINT_H
#define ALALLO_TRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "core/rng.h"

#define CKPT_VERSION 1
#define CKPT_MAX_PATH 1024

struct ckpt {
    uint64_t step;        /* optimizer steps completed */
    uint64_t opt_t;       /* AdamW's update count */
    uint64_t epoch;       /* data cursor: epoch ... */
    uint64_t cursor;      /* ... and position in that epoch's order */
    struct rng rng;
    double train_loss;    /* loss of the last step */
    size_t n;             /* trainable parameters */
    float *params, *m, *v;
    char *meta_json;      /* NUL-terminated JSON object */
};

/* Writes checkpoint c under root (created if missing). On success returns 0
 * and writes the final folder's path into path_out. -1 with a reason. */
int ckpt_write(const char *root, const struct ckpt *c, char *path_out, size_t pathcap,
               char *err, size_t errcap);

/* Checks that `dir` holds a complete checkpoint whose files match COMPLETE.
 * 0, or -1 with a reason. */
int ckpt_verify(const char *dir, char *err, size_t errcap);

/* Finds the complete checkpoint with the highest step under root, skipping
 * incomplete or corrupt ones (each skip is reported on stderr). Returns 1
 * with its path and step, 0 when there is none (or root does not exist),
 * -1 on an error reading root. */
int ckpt_latest(const char *root, char *path_out, size_t pathcap, uint64_t *step /* OUT */,
                char *err, size_t errcap);

/* The same, among the checkpoints at step max_step or below. */
int ckpt_latest_at_most(const char *root, uint64_t max_step, char *path_out, size_t pathcap,
                        uint64_t *step /* OUT */, char *err, size_t errcap);

/* Deletes every step folder under root above `step` (complete or not).
 * For an attempt told to resume from `step`: newer ones are the work of an
 * attempt that died before reporting them, never billed and never resumed
 * from, and they would otherwise count toward ckpt_prune's `keep` and push
 * out the one resumed from. Returns the number deleted. */
int ckpt_drop_after(const char *root, uint64_t step);

/* The same, for another attempt's folder (read only): reports the step
 * folders above `step` on stderr and leaves them. Returns their number. */
int ckpt_note_after(const char *root, uint64_t step);

/* Reads a verified checkpoint (ckpt_verify first). 0, or -1 with a reason. */
int ckpt_read(const char *dir, struct ckpt *out /* OUT */, char *err, size_t errcap);
void ckpt_release(struct ckpt *c);

/* Deletes complete checkpoints beyond the newest `keep`, except the one at
 * step `hold` (0: none; the checkpoint the attempt resumed from, the last
 * one the server is sure to know of), and leftover temporary folders.
 * Returns the number deleted. */
int ckpt_prune(const char *root, int keep, uint64_t hold);

/* The checksum used in COMPLETE, computed as a stream (any split of the
 * input gives the same value). */
struct ckpt_hasher {
    uint64_t h, len;
    unsigned char pend[8];
    int npend;
};
void ckpt_hasher_init(struct ckpt_hasher *s);
void ckpt_hasher_add(struct ckpt_hasher *s, const void *buf, size_t len);
uint64_t ckpt_hasher_final(const struct ckpt_hasher *s);
/* The checksum of one buffer. */
uint64_t ckpt_hash(const void *buf, size_t len);

#endif
