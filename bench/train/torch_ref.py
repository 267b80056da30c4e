#!/usr/bin/python3
"""bench/train/torch_ref.py - the PyTorch reference beside `alallo bench train`:
the same 124m decoder shape (hidden 768, 12 layers, 12 heads, SwiGLU 2048,
vocabulary 50257, tied head, RMSNorm, rotary positions), random tokens,
batch 4 x 64, AdamW, LoRA r 16 / alpha 32 on all seven projections.

Configurations: full fp32, full with bf16 autocast (fp32 master weights,
bf16 products: mixed precision, as alallo's avx512bf16 path trains a full
fine-tune), LoRA fp32, LoRA with bf16 autocast (the frozen base and the
activations in bf16 products, as PyTorch users run 16-bit LoRA on a CPU). Prints one JSON object per configuration: tokens_per_s over the
steps after the first.

usage: torch_ref.py [--threads N] [--steps N] [--configs full,full-bf16,lora,lora-bf16]
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

H, L, NH, FF, V = 768, 12, 12, 2048, 50257


class LoRA(nn.Module):
    def __init__(self, base, r, alpha):
        super().__init__()
        self.base = base
        self.base.weight.requires_grad_(False)
        self.a = nn.Parameter(torch.randn(r, base.in_features) / math.sqrt(base.in_features))
        self.b = nn.Parameter(torch.zeros(base.out_features, r))
        self.scale = alpha / r

    def forward(self, x):
        return self.base(x) + (x @ self.a.t() @ self.b.t()) * self.scale


def rms(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, cos, sin):
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1 = nn.Parameter(torch.ones(H))
        self.n2 = nn.Parameter(torch.ones(H))
        self.q, self.k, self.v, self.o = (nn.Linear(H, H, bias=False) for _ in range(4))
        self.g, self.u = nn.Linear(H, FF, bias=False), nn.Linear(H, FF, bias=False)
        self.d = nn.Linear(FF, H, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        h = rms(x, self.n1)
        q = self.q(h).view(B, T, NH, -1).transpose(1, 2)
        k = self.k(h).view(B, T, NH, -1).transpose(1, 2)
        v = self.v(h).view(B, T, NH, -1).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1]) + mask
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H)
        x = x + self.o(y)
        h = rms(x, self.n2)
        return x + self.d(F.silu(self.g(h)) * self.u(h))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, H)
        nn.init.normal_(self.emb.weight, std=0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.nf = nn.Parameter(torch.ones(H))

    def forward(self, ids):
        B, T = ids.shape
        hd = H // NH
        pos = torch.arange(T, dtype=torch.float32)[:, None]
        inv = 10000.0 ** (-torch.arange(0, hd, 2, dtype=torch.float32) / hd)
        cos, sin = torch.cos(pos * inv), torch.sin(pos * inv)
        mask = torch.full((T, T), float("-inf")).triu(1)
        x = self.emb(ids)
        for b in self.blocks:
            x = b(x, cos, sin, mask)
        return rms(x, self.nf) @ self.emb.weight.t()


def run(config, steps, B=4, T=64):
    torch.manual_seed(1)
    m = Model()
    if not config.startswith("full"):
        for p in m.parameters():
            p.requires_grad_(False)
        for b in m.blocks:
            for name in ("q", "k", "v", "o", "g", "u", "d"):
                setattr(b, name, LoRA(getattr(b, name), 16, 32))
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5)
    ids = torch.randint(0, V, (B, T + 1))
    t0 = None
    for s in range(steps):
        if s == 1:
            t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=config.endswith("-bf16")):
            logits = m(ids[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, V), ids[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    wall = time.perf_counter() - t0
    return {"framework": f"pytorch {torch.__version__}", "config": config,
            "threads": torch.get_num_threads(), "batch": B, "seq": T, "steps": steps,
            "tokens_per_s": B * T * (steps - 1) / wall, "final_loss": loss.item(),
            "trainable_params": sum(p.numel() for p in params)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--configs", default="full,full-bf16,lora,lora-bf16")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    for c in a.configs.split(","):
        print(json.dumps(run(c, a.steps)), flush=True)


if __name__ == "__main__":
    main()
