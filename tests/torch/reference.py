#!/usr/bin/python3
"""reference.py - alallo's own PyTorch reference for the trainer's math.

Reads a model folder written by alallo (config.json + model.safetensors),
builds the same Llama-style decoder in PyTorch in float64 (RMSNorm, rotary
embeddings in the rotate-half convention, grouped-query causal attention,
SwiGLU, tied or untied head, optional q/k/v bias), runs forward and backward
on the given token ids with the loss on every position after the first, and
compares with the dump `alallo train --dump-grads` wrote: the loss, the
logits, and the gradient of every tensor.

usage: reference.py MODEL_DIR DUMP.safetensors IDS   (IDS: "1,2,3,...")
Exit status: 0 all within tolerance, 1 a mismatch, 2 torch or numpy missing.
"""
import json
import struct
import sys

try:
    import numpy as np
    import torch
except ImportError as e:  # the test must fail loudly, never skip
    print(f"reference.py: {e}: install Debian's python3-torch and python3-numpy", file=sys.stderr)
    sys.exit(2)

DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64}


def read_safetensors(path):
    """Parses a safetensors file with nothing but json and numpy."""
    with open(path, "rb") as f:
        raw = f.read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen])
    data = raw[8 + hlen:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        if t["dtype"] == "BF16":
            u16 = np.frombuffer(data[b:e], dtype=np.uint16).astype(np.uint32) << 16
            arr = u16.view(np.float32)
        else:
            arr = np.frombuffer(data[b:e], dtype=DTYPES[t["dtype"]])
        out[name] = torch.tensor(arr.reshape(t["shape"]).astype(np.float64))
    return out


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def forward(cfg, p, ids):
    T = ids.shape[0]
    C = cfg["hidden_size"]
    H = cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads", H)
    hd = cfg.get("head_dim", C // H)
    eps = cfg.get("rms_norm_eps", 1e-6)
    theta = cfg.get("rope_theta", 10000.0)
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    cos = torch.cat((ang, ang), -1).cos()
    sin = torch.cat((ang, ang), -1).sin()
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    x = p["model.embed_tokens.weight"][ids]
    for l in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{l}."
        h = rms_norm(x, p[pre + "input_layernorm.weight"], eps)

        def proj(name, inp):
            y = inp @ p[pre + name + ".weight"].T
            b = p.get(pre + name + ".bias")
            return y + b if b is not None else y

        q = proj("self_attn.q_proj", h).view(T, H, hd).transpose(0, 1)
        k = proj("self_attn.k_proj", h).view(T, KV, hd).transpose(0, 1)
        v = proj("self_attn.v_proj", h).view(T, KV, hd).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // KV, dim=0)
        v = v.repeat_interleave(H // KV, dim=0)
        att = torch.softmax(q @ k.transpose(1, 2) / hd ** 0.5 + mask, dim=-1)
        o = (att @ v).transpose(0, 1).reshape(T, H * hd)
        x = x + proj("self_attn.o_proj", o)
        h = rms_norm(x, p[pre + "post_attention_layernorm.weight"], eps)
        g = proj("mlp.gate_proj", h)
        u = proj("mlp.up_proj", h)
        x = x + proj("mlp.down_proj", torch.nn.functional.silu(g) * u)
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else p["lm_head.weight"]
    return x @ head.T


def rel_err(a, b):
    return float((a - b).norm() / max(float(b.norm()), 1e-30))


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    model_dir, dump_path, ids_s = sys.argv[1:]
    cfg = json.load(open(f"{model_dir}/config.json"))
    params = read_safetensors(f"{model_dir}/model.safetensors")
    for t in params.values():
        t.requires_grad_(True)
    ids = torch.tensor([int(s) for s in ids_s.split(",")])
    logits = forward(cfg, params, ids)
    loss = torch.nn.functional.cross_entropy(logits[:-1], ids[1:])
    loss.backward()
    dump = read_safetensors(dump_path)
    failures = []

    def check(name, got, want, tol):
        e = rel_err(got, want)
        status = "ok" if e <= tol else "MISMATCH"
        print(f"{name:60s} rel err {e:.2e} (tolerance {tol:.0e}) {status}")
        if e > tol:
            failures.append(name)

    check("loss", dump["loss"].reshape(()), loss.detach(), 1e-5)
    check("logits", dump["logits"], logits.detach(), 1e-5)
    for name, t in params.items():
        check("grad " + name, dump["grad." + name], t.grad, 1e-4)
    if failures:
        print(f"reference.py: {len(failures)} mismatches: {', '.join(failures[:5])}",
              file=sys.stderr)
        return 1
    print(f"reference.py: alallo matches PyTorch {torch.__version__} (float64) on "
          f"{len(params)} tensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
