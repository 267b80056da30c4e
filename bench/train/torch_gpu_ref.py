#!/usr/bin/python3
"""bench/train/torch_gpu_ref.py - the PyTorch + transformers + peft reference
on the GPU beside `alallo bench train --device cuda` (issue 15; run by
scripts/gpu-check.sh).

Shapes (random initialisation, nothing downloaded):
  1b    Llama-3.2-1B-class: hidden 2048, 16 layers, 32 heads / 8 KV heads,
        FFN 8192, vocabulary 128256, tied head, context 2048
  124m  alallo's 124m shape: hidden 768, 12 layers, 12 heads, FFN 2048,
        vocabulary 50257, tied head
Modes:
  lora   16-bit LoRA: bf16 frozen base, LoRA r 16 / alpha 32 on all seven
         projections (peft keeps the adapters in fp32), bf16 autocast
  qlora  4-bit QLoRA: NF4 base through bitsandbytes, the same LoRA, with
         gradient checkpointing per layer (peft's kbit default, and what
         alallo's 4-bit LoRA does on a GPU); only when bitsandbytes imports
         (else the result says it was skipped and why)
  full   full fine-tuning: fp32 master weights, bf16 autocast, AdamW
Each runs `--warmup` untimed steps then `--steps` timed ones on random
tokens (batch x seq), AdamW (fused), SDPA attention. Reported per run:
tokens_per_s, step_s, mfu against the bf16 peak measured in the same run
(an 8192^3 torch.matmul, 3 warm-ups, mean of 10), peak GPU memory
(torch.cuda.max_memory_allocated), the first and last loss. FLOPs per token
as alallo's bench counts them: full 6 N + 6 L d T, LoRA 4 N + 6 N_lora
(N the base parameters, embeddings included).

One JSON object on stdout, also when stopped by SIGTERM (a timeout: the
runs not finished say so); progress on stderr. --dry-run prints the plan
(shapes, modes, batch, what would be measured) without importing torch.

usage: torch_gpu_ref.py [--shapes 1b,124m] [--modes lora,qlora,full]
                        [--batch B] [--seq T] [--steps N] [--warmup N]
                        [--budget-s S] [--dry-run]
"""
import argparse
import json
import math
import os
import signal
import sys
import tempfile
import time

SHAPES = {
    "1b": dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, intermediate_size=8192, vocab_size=128256,
               max_position_embeddings=2048, tie_word_embeddings=True,
               rope_theta=500000.0, rms_norm_eps=1e-5),
    "124m": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 num_key_value_heads=12, intermediate_size=2048, vocab_size=50257,
                 max_position_embeddings=2048, tie_word_embeddings=True,
                 rope_theta=10000.0, rms_norm_eps=1e-5),
}
MODES = ("lora", "qlora", "full")
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LORA_R, LORA_ALPHA = 16, 32


def log(*a):
    print("torch_gpu_ref:", *a, file=sys.stderr, flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", default="1b,124m")
    p.add_argument("--modes", default="lora,qlora,full")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--budget-s", type=float, default=0,
                   help="start no new run after this many seconds (0: no limit)")
    p.add_argument("--dry-run", action="store_true")
    a = p.parse_args(argv)
    a.shapes = [s for s in a.shapes.split(",") if s]
    a.modes = [m for m in a.modes.split(",") if m]
    bad = [s for s in a.shapes if s not in SHAPES] + [m for m in a.modes if m not in MODES]
    if bad:
        p.error("unknown shape or mode: %s (shapes %s; modes %s)"
                % (", ".join(bad), ", ".join(SHAPES), ", ".join(MODES)))
    if a.batch < 1 or a.steps < 1 or a.warmup < 0 or not 8 <= a.seq <= 2048:
        p.error("--batch and --steps at least 1, --warmup at least 0, --seq from 8 to 2048")
    return a


def base_params(c):
    """Parameters of the decoder (embeddings once: the head is tied)."""
    d, f, L, V = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    kv = d // c["num_attention_heads"] * c["num_key_value_heads"]
    per_layer = 2 * d * d + 2 * d * kv + 3 * d * f + 2 * d
    return V * d + L * per_layer + d


def lora_params(c):
    d, f, L = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    kv = d // c["num_attention_heads"] * c["num_key_value_heads"]
    shapes = [(d, d), (d, kv), (d, kv), (d, d), (d, f), (d, f), (f, d)]  # (in, out)
    return L * sum(LORA_R * (i + o) for i, o in shapes)


def flops_per_token(c, mode, seq):
    n = base_params(c)
    if mode == "full":
        return 6.0 * n + 6.0 * c["num_hidden_layers"] * c["hidden_size"] * seq
    return 4.0 * n + 6.0 * lora_params(c)


def plan(a):
    runs = []
    for s in a.shapes:
        for m in a.modes:
            c = SHAPES[s]
            runs.append(dict(shape=s, mode=m, batch=a.batch, seq=a.seq,
                             params=base_params(c),
                             trainable_params=base_params(c) if m == "full" else lora_params(c),
                             flops_per_token=flops_per_token(c, m, a.seq)))
    return runs


def measure_peak(torch, n=8192, warmup=3, iters=10):
    a = torch.rand(n, n, device="cuda", dtype=torch.bfloat16) * 2 - 1
    b = torch.rand(n, n, device="cuda", dtype=torch.bfloat16) * 2 - 1
    for _ in range(warmup):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0.record()
    for _ in range(iters):
        torch.matmul(a, b)
    t1.record()
    t1.synchronize()
    ms = t0.elapsed_time(t1) / iters
    del a, b
    torch.cuda.empty_cache()
    return 2.0 * n ** 3 / (ms * 1e-3), ms


def build_model(torch, run, tmp):
    """The model of one run, on the GPU, and its trainable parameters."""
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(**SHAPES[run["shape"]], attn_implementation="sdpa")
    mode = run["mode"]
    if mode == "qlora":
        import bitsandbytes  # noqa: F401  (the caller checked it imports)
        from transformers import BitsAndBytesConfig
        # from_pretrained is the way to a 4-bit model: save a random bf16 one first.
        path = os.path.join(tmp, run["shape"])
        if not os.path.isdir(path):
            torch.manual_seed(0)
            LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(path)
        q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                               bnb_4bit_compute_dtype=torch.bfloat16,
                               bnb_4bit_use_double_quant=False)
        model = LlamaForCausalLM.from_pretrained(path, quantization_config=q,
                                                 torch_dtype=torch.bfloat16,
                                                 attn_implementation="sdpa", device_map={"": 0})
    else:
        torch.manual_seed(0)
        with torch.device("cuda"):
            model = LlamaForCausalLM(cfg)
        if mode == "lora":
            model = model.to(torch.bfloat16)
    if mode == "qlora":
        # as peft's prepare_model_for_kbit_training does by default, and as
        # alallo's GPU trainer does for 4-bit LoRA (ALALLO_CUDA_RECOMPUTE=auto)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if mode in ("lora", "qlora"):
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=LORA_R, lora_alpha=LORA_ALPHA,
                                                 lora_dropout=0.0, target_modules=TARGETS,
                                                 task_type="CAUSAL_LM"))
    model.config.use_cache = False
    model.train()
    return model, [p for p in model.parameters() if p.requires_grad]


def run_one(torch, run, a, peak, tmp):
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model, params = build_model(torch, run, tmp)
    opt = torch.optim.AdamW(params, lr=1e-5, fused=True)
    g = torch.Generator(device="cuda").manual_seed(1)
    ids = torch.randint(0, SHAPES[run["shape"]]["vocab_size"], (a.batch, a.seq),
                        device="cuda", generator=g)
    losses = []

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(a.warmup):
        losses.append(step().item())
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    timed = [step() for _ in range(a.steps)]
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    losses += [x.item() for x in timed]
    tokens = a.batch * a.seq * a.steps
    tps = tokens / wall
    out = dict(run, tokens_per_s=tps, step_s=wall / a.steps,
               mfu=tps * run["flops_per_token"] / peak,
               peak_mem_bytes=torch.cuda.max_memory_allocated(),
               trainable_params=sum(p.numel() for p in params),
               loss_first=losses[0], loss_last=losses[-1])
    del model, params, opt, ids
    torch.cuda.empty_cache()
    return out


class Stopped(Exception):
    """SIGTERM (a timeout): print what was measured so far."""


def on_term(signum, frame):
    raise Stopped()


def main(argv=None):
    a = parse_args(argv)
    signal.signal(signal.SIGTERM, on_term)
    runs = plan(a)
    if a.dry_run:
        print(json.dumps(dict(dry_run=True, warmup=a.warmup, steps=a.steps,
                              budget_s=a.budget_s, runs=runs)))
        return 0
    t_start = time.perf_counter()
    try:
        import torch
    except ImportError as e:
        print(json.dumps(dict(error="PyTorch does not import: %s" % e)))
        return 1
    if not torch.cuda.is_available():
        print(json.dumps(dict(error="no GPU visible to PyTorch (CUDA_VISIBLE_DEVICES=%s)"
                              % os.environ.get("CUDA_VISIBLE_DEVICES", "unset"))))
        return 1
    import peft
    import transformers
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        import bitsandbytes
        bnb = getattr(bitsandbytes, "__version__", "?")
        bnb_error = None
    except Exception as e:  # any import failure: say which
        bnb, bnb_error = None, "%s: %s" % (type(e).__name__, e)
    peak, peak_ms = measure_peak(torch)
    prop = torch.cuda.get_device_properties(0)
    log("%s, bf16 peak %.0f TFLOP/s measured" % (prop.name, peak / 1e12))
    result = dict(gpu=prop.name, gpu_mem_bytes=prop.total_memory,
                  torch=torch.__version__, transformers=transformers.__version__,
                  peft=peft.__version__, bitsandbytes=bnb,
                  peak_bf16_flops=peak, peak_method="torch.matmul bf16 8192^3, random "
                  "inputs: mean of 10 after 3 warm-ups (%.3f ms each)" % peak_ms,
                  warmup=a.warmup, steps=a.steps, results=[])
    with tempfile.TemporaryDirectory(prefix="torch-gpu-ref-") as tmp:
        for run in runs:
            if a.budget_s and time.perf_counter() - t_start > a.budget_s:
                result["results"].append(dict(run, skipped="out of time (--budget-s %g)"
                                              % a.budget_s))
                continue
            if run["mode"] == "qlora" and bnb_error:
                result["results"].append(dict(run, skipped="bitsandbytes does not import ("
                                              + bnb_error + ")"))
                continue
            log("%s %s: batch %d x %d ..." % (run["shape"], run["mode"], a.batch, a.seq))
            if result.get("stopped"):
                result["results"].append(dict(run, skipped="stopped by SIGTERM"))
                continue
            try:
                r = run_one(torch, run, a, peak, tmp)
                log("  %.0f tokens/s, MFU %.1f%%, peak %.1f GiB, loss %.3f -> %.3f"
                    % (r["tokens_per_s"], 100 * r["mfu"], r["peak_mem_bytes"] / 2 ** 30,
                       r["loss_first"], r["loss_last"]))
            except Stopped:
                result["stopped"] = True
                r = dict(run, error="stopped by SIGTERM during the run")
            except Exception as e:  # one run's failure (out of memory ...) is reported
                r = dict(run, error="%s: %s" % (type(e).__name__, str(e)[:500]))
                log("  failed:", r["error"])
                torch.cuda.empty_cache()
            result["results"].append(r)
    result["wall_s"] = time.perf_counter() - t_start
    print(json.dumps(result))
    return 0 if all("error" not in r for r in result["results"]) else 1


if __name__ == "__main__":
    sys.exit(main())
