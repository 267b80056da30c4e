#!/usr/bin/env python3
"""bench/estimates/time_left_by_length.py - the time-left bands of real.sh
runs (DETAILS=file.json) at 20% and at 50% of the steps, split by how long
the job truly had left then: under 10 s, where the API's whole seconds
(low_s floored, high_s raised to the next second) widen a band by a second
or two on a few seconds, and 10 s or more, where they barely move it.

For each file, share and group it prints the jobs, the median width (high
/ low, as real.sh), the share held inside, and the truth's place against
the band's middle in logs, log(left / sqrt(low x high)): its mean (the
band's bias; positive when jobs ran longer than its middle) and standard
deviation (the wander no band of the pace can see). A band that holds 90%
of a wander of standard deviation s, centred, is exp(2 x 1.645 s) wide.

usage: bench/estimates/time_left_by_length.py RUN.json [RUN.json ...]
"""
import json
import math
import statistics
import sys

SPLIT_S = 10.0


def row(name, share, group, marks):
    if not marks:
        return
    width = statistics.median(a["high"] / max(a["low"], 1) for a in marks)
    inside = sum(a["low"] <= a["left"] <= a["high"] for a in marks) / len(marks)
    logs = [math.log(a["left"] / math.sqrt(max(a["low"], 0.5) * a["high"])) for a in marks]
    sd = statistics.pstdev(logs)
    print(f"{name:28s} {share:>4s} {group:>9s} {len(marks):3d} jobs  width {width:.2f}  "
          f"inside {inside:.2f}  bias {statistics.mean(logs):+.3f}  sd {sd:.3f}  "
          f"(90% of it: {math.exp(2 * 1.645 * sd):.2f} wide)")


def main(paths):
    for path in paths:
        jobs = json.load(open(path))
        name = path.rsplit("/", 1)[-1]
        for k, share in ((0, "20%"), (1, "50%")):
            marks = [j["at"][k] for j in jobs if j.get("at") and j["at"][k]]
            row(name, share, "< 10 s", [a for a in marks if a["left"] < SPLIT_S])
            row(name, share, ">= 10 s", [a for a in marks if a["left"] >= SPLIT_S])
            row(name, share, "all", marks)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    main(sys.argv[1:])
