#!/usr/bin/python3
"""bench/train/gpu_targets.py - the GPU trainer's figures set against issue
15's targets, from one run of scripts/gpu-check.sh: its bench.json (the
JSON lines of `alallo bench train --device cuda`) and torch.json
(bench/train/torch_gpu_ref.py's object). Per shape (124m, 1b):

  16-bit LoRA   alallo tokens/s / PyTorch + peft tokens/s     target >= 1.3
  full          alallo MFU against the bf16 peak of its run   target >= 0.40
  4-bit LoRA    peak GPU memory / 16-bit LoRA's               target <= 0.45
                tokens/s / 16-bit LoRA's                      target >= 0.6

One line each, "met", "NOT met" or "no figure" (a run missing or failed),
with the numbers; then, where the run has it, 16-bit LoRA with LoRA's
products apart (ALALLO_CUDA_LORA=each, "lora":"each") against folded into
the base products, the default, and the short passes (1 x 256 tokens)
with CUDA graphs on against off (ALALLO_CUDA_GRAPHS; the median of each
side's rounds). Exit 0 always: a target not met is a
finding to report, not a failure of the check.

usage: gpu_targets.py BENCH_JSON TORCH_JSON
"""
import json
import sys


def bench_runs(path, short=None):
    """The issue's runs (batch 4 x 2048) by key; the others (the short
    passes of the graphs' comparison) appended to short."""
    runs = {}
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    d = json.loads(line)
                except ValueError:
                    continue
                if "shape" in d and "tokens_per_s" in d and (d.get("batch"), d.get("seq")) != (
                        4, 2048):
                    if short is not None:
                        short.append(d)
                    continue
                if "shape" in d and "tokens_per_s" in d:
                    apart = d.get("lora") == "each" and d["precision"] == "16-bit"
                    runs[(d["shape"], d["precision"], d["adapter"], d.get("attention"),
                          "each" if apart else None)] = d
    except OSError:
        pass
    return runs


def torch_runs(path):
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError):
        return {}
    return {(r["shape"], r["mode"]): r for r in d.get("results", []) if "tokens_per_s" in r}


def verdict(ok):
    return "met" if ok else "NOT met"


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    short = []
    a, t = bench_runs(argv[1], short), torch_runs(argv[2])
    for shape in ("124m", "1b"):
        lora = a.get((shape, "16-bit", "lora", "bf16", None))
        qlora = a.get((shape, "4-bit", "lora", "bf16", None))
        full = a.get((shape, "16-bit", "full", "bf16", None))
        each = a.get((shape, "16-bit", "lora", "bf16", "each"))
        ref = t.get((shape, "lora"))
        if lora and ref:
            x = lora["tokens_per_s"] / ref["tokens_per_s"]
            print("target %s 16-bit LoRA vs PyTorch + peft: %.2fx (%.0f / %.0f tokens/s), "
                  ">= 1.3x: %s" % (shape, x, lora["tokens_per_s"], ref["tokens_per_s"],
                                   verdict(x >= 1.3)))
        else:
            print("target %s 16-bit LoRA vs PyTorch + peft: no figure" % shape)
        if full:
            print("target %s full fine-tuning MFU: %.3f, >= 0.40: %s"
                  % (shape, full["mfu"], verdict(full["mfu"] >= 0.40)))
        else:
            print("target %s full fine-tuning MFU: no figure" % shape)
        if lora and qlora:
            mem = qlora["gpu_mem_train_peak_bytes"] / lora["gpu_mem_train_peak_bytes"]
            speed = qlora["tokens_per_s"] / lora["tokens_per_s"]
            print("target %s 4-bit LoRA (recompute %s): memory %.2fx of 16-bit LoRA (%.2f / "
                  "%.2f GiB), <= 0.45x: %s; speed %.2fx, >= 0.6x: %s"
                  % (shape, str(qlora.get("recompute")).lower(), mem,
                     qlora["gpu_mem_train_peak_bytes"] / 2 ** 30,
                     lora["gpu_mem_train_peak_bytes"] / 2 ** 30, verdict(mem <= 0.45), speed,
                     verdict(speed >= 0.6)))
        else:
            print("target %s 4-bit LoRA memory and speed: no figure" % shape)
        if lora and each:
            print("%s 16-bit LoRA folded (%s) against apart: %.2fx (%.0f / %.0f tokens/s)"
                  % (shape, lora.get("lora"), lora["tokens_per_s"] / each["tokens_per_s"],
                     lora["tokens_per_s"], each["tokens_per_s"]))
    on = sorted(d["tokens_per_s"] for d in short if d.get("graphs", {}).get("replayed"))
    off = sorted(d["tokens_per_s"] for d in short if not d.get("graphs", {}).get("replayed"))
    if on and off:
        med_on, med_off = on[len(on) // 2], off[len(off) // 2]
        walk = [d["graphs"].get("walk_s", 0.0) / d["steps"] for d in short
                if d.get("graphs", {}).get("replayed")]
        print("short pass (%s, %d x %d) CUDA graphs on against off: %.2fx (%.0f / %.0f "
              "tokens/s, medians of %d and %d rounds; the walk %.1f us a step)"
              % (short[0]["shape"], short[0]["batch"], short[0]["seq"], med_on / med_off,
                 med_on, med_off, len(on), len(off), 1e6 * sum(walk) / len(walk)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
