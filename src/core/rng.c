/* rng.c - xoshiro256** and splitmix64 (see rng.h). */
#include "core/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void rng_seed(struct rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
    if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3]))
        r->s[0] = 1; /* the all-zero state is a fixed point */
}

uint64_t rng_next(struct rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

float rng_uniform(struct rng *r)
{
    return (float)(rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

uint64_t rng_below(struct rng *r, uint64_t n)
{
    /* Rejection keeps every value equally likely. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do {
        x = rng_next(r);
    } while (x >= limit);
    return x % n;
}

float rng_normal(struct rng *r)
{
    /* u1 in (0,1] so that log never sees zero. */
    double u1 = ((double)(rng_next(r) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void rng_normal2(struct rng *r, float out[2])
{
    double u1 = ((double)(rng_next(r) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    double rad = sqrt(-2.0 * log(u1)), s, co;
    sincos(6.283185307179586 * u2, &s, &co);
    out[0] = (float)(rad * co);
    out[1] = (float)(rad * s);
}

uint64_t rng_derive(uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ (stream * 0xd1b54a32d192ed03ULL);
    splitmix64(&x);
    return splitmix64(&x);
}
