#!/usr/bin/env python3
"""bench/estimates/price_replay.py - replays the jobs of real.sh runs
(DETAILS=file.json) under two rules for the price range's measured ends,
and prints, for each file and rule, how many paid inside and the median
width (high / low).

Each job's ends before their margins are read back from what it was shown
(terms.price_margin holds the logs each end moved by). In its order, each
job gets the ends the rule makes from the jobs before it, then adds its own
spreads: the net price against the lower end, and (the price before the
cap not being in the file) the net price against the upper end.

  logs:        spread = log(end / price); end moved by the spread's
               95th percentile (estimator.c's ring_margin: recency-weighed,
               pulled towards 0 by 5 entries)
  half-widths: the same spread divided by the range's half-width,
               0.5 log(high / low); end moved by that times its own range's

usage: bench/estimates/price_replay.py RUN.json [RUN.json ...]
"""
import json
import math
import sys

HALF_LIFE = 32.0  # estimator.h EST_HALF_LIFE
PULL = 5.0        # estimator.c MARGIN_PRIOR
COVER = 0.95      # estimator.h EST_PRICE_COVER


def quantile(vals, q):
    """estimator.c's weighted quantile of (value, weight) pairs."""
    vals = sorted(vals)
    total = sum(w for _, w in vals)
    span = total - 0.5 * (vals[0][1] + vals[-1][1])
    if len(vals) == 1 or span <= 0:
        return vals[-1][0]
    below = prev = 0.0
    for i, (v, w) in enumerate(vals):
        p = (below + 0.5 * (w - vals[0][1])) / span
        if p >= q:
            if i == 0 or p <= prev:
                return v
            f = (q - prev) / (p - prev)
            return vals[i - 1][0] * (1 - f) + v * f
        prev = p
        below += w
    return vals[-1][0]


def margin(ring):
    if not ring:
        return 0.0
    n = len(ring)
    vals = [(x, 2 ** (-(n - 1 - i) / HALF_LIFE)) for i, x in enumerate(ring)]
    s = sum(w for _, w in vals)
    ne = s * s / sum(w * w for _, w in vals)
    return ne * quantile(vals, COVER) / (ne + PULL)


def replay(jobs, in_halves):
    lows, highs, inside, widths = [], [], 0, []
    for j in jobs:
        if j.get('status') != 'succeeded' or not j.get('price_low'):
            continue
        pm = j['terms']['price_margin']
        plo = j['price_low'] * math.exp(pm['low'])
        phi = j['price_high'] * math.exp(pm['high'])
        paid = j['paid']
        centre, half = math.sqrt(plo * phi), 0.5 * math.log(phi / plo)
        unit = half if in_halves else 1.0
        if not half > 0:
            continue
        low = min(plo * math.exp(-unit * margin(lows)), centre)
        high = max(phi * math.exp(-unit * max(0.0, -margin(highs))), centre)
        lows.append(math.log(plo / paid) / unit)
        highs.append(math.log(paid / phi) / unit)
        inside += low * 0.9999 <= paid <= high * 1.0001
        widths.append(high / low)
    widths.sort()
    return len(widths), inside, widths[len(widths) // 2] if widths else float('nan')


for path in sys.argv[1:]:
    with open(path) as f:
        jobs = json.load(f)
    for name, halves in (('logs', False), ('half-widths', True)):
        n, inside, width = replay(jobs, halves)
        print(f'{path}: {name:11s} {inside}/{n} inside ({inside / max(n, 1):.2f}), median width {width:.2f}')
