/* rng.h - alallo's own random numbers: xoshiro256** seeded by
 * splitmix64. The trainer (weight init, data order, sampling) and the fleet
 * simulation both draw from it. Pure.
 *
 * Own code rather than rand() so that a run is reproducible from its seed on
 * any libc, and so that the whole state (four 64-bit words) can be saved in a
 * checkpoint and restored for a bit-exact resume. The simulation's JSON for a
 * given seed depends on every bit of this sequence: changing the generator
 * changes every figure it prints. Not for cryptography.
 * The caller owns the struct; nothing is allocated.
 */
#ifndef ALALLO_CORE_RNG_H
#define ALALLO_CORE_RNG_H

#include <stdint.h>

struct rng {
    uint64_t s[4];
};

/* Seeds all four words from `seed` through splitmix64 (never all zero). */
void rng_seed(struct rng *r, uint64_t seed);

/* Next 64 random bits. */
uint64_t rng_next(struct rng *r);

/* Uniform float in [0, 1) with 24 random bits. */
float rng_uniform(struct rng *r);

/* Uniform integer in [0, n) for n >= 1, without modulo bias. */
uint64_t rng_below(struct rng *r, uint64_t n);

/* Standard normal (Box-Muller; one value per call, deterministic). */
float rng_normal(struct rng *r);

/* Two independent standard normals from one Box-Muller draw (half the
 * cost of two rng_normal calls; used to initialise large tensors). */
void rng_normal2(struct rng *r, float out[2]);

/* A seed derived from a parent seed and a stream number, so that
 * independent streams (data order per epoch, weight init per tensor) never
 * depend on how many numbers another stream drew. */
uint64_t rng_derive(uint64_t seed, uint64_t stream);

#endif
