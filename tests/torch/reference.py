#!/usr/bin/python3
"""reference.py - alallo's own PyTorch reference for the trainer's math.

Reads a model folder written by alallo (config.json + model.safetensors),
builds the same Llama-style decoder in PyTorch in float64 (RMSNorm, rotary
embeddings in the rotate-half convention, grouped-query causal attention,
SwiGLU, tied or untied head, optional q/k/v bias), runs forward and backward
with each family's published differences, written here from the families'
definitions (not from alallo's code): Llama 3's rope_scaling ("llama3":
low frequencies slowed by `factor`, a smooth ramp between low_freq_factor
and high_freq_factor), Qwen2's q/k/v biases, Mistral's sliding window, and
Gemma's RMSNorm by (1 + w), GeGLU with the tanh GELU, embeddings times
sqrt(hidden); Gemma 2 adds norms after attention and after the MLP, scores
scaled by query_pre_attn_scalar^-0.5 and tanh soft-capping of scores and
logits; Qwen3 has no q/k/v biases and normalizes each head of q and of k
(RMSNorm over head_dim with q_norm / k_norm, one scale shared by the heads)
before the rotation; SmolLM3 leaves the rotation out of the layers whose
no_rope_layers entry is 0; Gemma 3 ("gemma3_text") has Gemma 2's norms, no
soft-capping unless its config sets it, RMSNorm by (1 + w) of each head of
q and of k (q_norm / k_norm) before the rotation, sliding-window attention on
the layers layer_types calls "sliding_attention" (else all but every
sliding_window_pattern-th) with their own rotary base rope_local_base_freq
and no scaling, and rope_theta with a "linear" rope_scaling (frequencies
divided by factor) on the full-attention layers; Gemma 2's window is on its
even layers (0, 2, ...), Mistral's on every layer; Qwen3-MoE ("qwen3_moe") has Qwen3's attention
and replaces the MLP of its sparse layers (every decoder_sparse_step-th,
less mlp_only_layers) by a router
(mlp.gate.weight), the top num_experts_per_tok experts of its softmax,
their weights renormalised when norm_topk_prob, each expert a SwiGLU
(mlp.experts.E.{gate,up,down}_proj); the objective adds
router_aux_loss_coef times the load-balancing loss over all sparse layers'
router logits together (moe_aux_loss below). Phi-3 ("phi3", Phi-4-mini)
holds q, k and v as the rows of one self_attn.qkv_proj and gate and up as
the halves of mlp.gate_up_proj, split after the product; the rotation
turns the first head_dim * partial_rotary_factor dims of each head (rotate
half within them) and the rest pass; its "longrope" rope_scaling divides
frequency i by short_factor[i] (long_factor[i] past
original_max_position_embeddings) and multiplies cos and sin by the
attention factor (attention_factor, else sqrt(1 + ln(s) / ln(orig)) for
s = max_position_embeddings / original_max_position_embeddings > 1).
on the given token ids with the loss on every position after the first, and
compares with the dump `alallo train --dump-grads` wrote: the loss, the
logits, and the gradient of every tensor (full fine-tuning) or, when the
dump holds LoRA adapters (`--lora-rank`), of every adapter's A and B with
the base frozen and W + scale * B A in place of each projection.

usage: reference.py MODEL_DIR DUMP.safetensors IDS      (IDS: "1,2,3,...")
       reference.py --bf16 [--device cpu|cuda] MODEL_DIR DUMP IDS [MODEL_DIR DUMP IDS ...]
Exit status: 0 all within tolerance, 1 a mismatch, 2 torch or numpy missing
(or, with --device cuda, no GPU visible to torch).

--bf16 is the comparison with bf16 training as PyTorch users run it: the
parameters in float32 (a dump's "base.*" tensors, the bf16 or NF4-decoded
base alallo trained on, in place of model.safetensors's), the pass under
torch.autocast(bfloat16) on --device, through transformers'
AutoModelForCausalLM and peft's LoRA where those two import, else through
this file's own forward above. A dump from the GPU has no logits; the loss
and the gradients are checked within bf16 tolerances (BF16_TOL below),
not float64's.
"""
import json
import math
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


def llama3_inv_freq(inv, rs):
    """Llama 3.1's frequency scaling, from Meta's published apply_scaling."""
    factor = rs["factor"]
    low = rs.get("low_freq_factor", 1.0)
    high = rs.get("high_freq_factor", 4.0)
    old = rs.get("original_max_position_embeddings", 8192)
    out = []
    for f in inv.tolist():
        wavelen = 2 * math.pi / f
        if wavelen < old / high:
            out.append(f)
        elif wavelen > old / low:
            out.append(f / factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return torch.tensor(out, dtype=torch.float64)


def softcap(x, cap):
    return cap * torch.tanh(x / cap) if cap else x


def moe_sparse(cfg, l):
    """Whether layer l's MLP is the experts (Qwen3-MoE's rule)."""
    if cfg.get("model_type") != "qwen3_moe" or cfg.get("num_experts", 0) <= 0:
        return False
    step = cfg.get("decoder_sparse_step", 1)
    return l not in cfg.get("mlp_only_layers", []) and (l + 1) % step == 0


def moe_mlp(cfg, p, pre, h, router_logits):
    """The sparse MLP: softmax router, top-k, (normalised) weights, experts."""
    E, k = cfg["num_experts"], cfg["num_experts_per_tok"]
    logits = h @ p[pre + "mlp.gate.weight"].T
    router_logits.append(logits)
    probs = torch.softmax(logits, dim=-1)
    w, sel = torch.topk(probs, k, dim=-1)
    if cfg.get("norm_topk_prob"):
        w = w / w.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(h)
    for e in range(E):
        tok, slot = torch.where(sel == e)
        if tok.numel() == 0:
            continue
        x = h[tok]
        ex = pre + f"mlp.experts.{e}."
        y = torch.nn.functional.silu(x @ p[ex + "gate_proj.weight"].T) * (x @ p[ex + "up_proj.weight"].T)
        y = y @ p[ex + "down_proj.weight"].T
        out = out.index_add(0, tok, y * w[tok, slot, None])
    return out


def moe_aux_loss(cfg, router_logits):
    """The load-balancing loss: E * sum_e (fraction of choices of e) * (mean
    probability of e), over every sparse layer's tokens taken together."""
    E, k = cfg["num_experts"], cfg["num_experts_per_tok"]
    probs = torch.softmax(torch.cat(router_logits, dim=0), dim=-1)
    _, sel = torch.topk(probs, k, dim=-1)
    chosen = torch.nn.functional.one_hot(sel, E).to(probs.dtype).mean(dim=0)  # (k, E)
    return (chosen * probs.mean(dim=0)[None]).sum() * E


def forward(cfg, p, ids, router_logits=None):
    T = ids.shape[0]
    C = cfg["hidden_size"]
    H = cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads", H)
    hd = cfg.get("head_dim", C // H)
    eps = cfg.get("rms_norm_eps", 1e-6)
    theta = cfg.get("rope_theta", 10000.0)
    family = cfg.get("model_type", "llama")
    gemma = family in ("gemma", "gemma2", "gemma3_text")
    gemma2 = family in ("gemma2", "gemma3_text")  # the sandwich norms, the scalar, the caps
    gemma3 = family == "gemma3_text"
    dev = p["model.embed_tokens.weight"].device
    # the parameters' type: float64, or float32 under --bf16's autocast
    fdt = p["model.embed_tokens.weight"].dtype

    rot = int(hd * cfg.get("partial_rotary_factor", 1.0))  # Phi-3 turns part of each head

    def rope_tables(base, rs):
        inv = 1.0 / (base ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot))
        mscale = 1.0
        if rs and rs.get("rope_type", rs.get("type")) in ("longrope", "su"):
            orig = cfg.get("original_max_position_embeddings",
                           rs.get("original_max_position_embeddings", cfg["max_position_embeddings"]))
            ext = rs["long_factor"] if T > orig else rs["short_factor"]
            inv = inv / torch.tensor(ext, dtype=torch.float64)
            s = cfg["max_position_embeddings"] / orig
            mscale = rs.get("attention_factor") or (
                math.sqrt(1 + math.log(s) / math.log(orig)) if s > 1 else 1.0)
        elif rs and rs.get("rope_type", rs.get("type")) == "linear":
            inv = inv / rs["factor"]
        elif rs:
            assert rs.get("rope_type", rs.get("type")) == "llama3", rs
            inv = llama3_inv_freq(inv, rs)
        ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
        return ((torch.cat((ang, ang), -1).cos() * mscale).to(dev, fdt),
                (torch.cat((ang, ang), -1).sin() * mscale).to(dev, fdt))

    rope_global = rope_tables(theta, cfg.get("rope_scaling"))
    # Gemma 3's local layers: their own base, never scaled
    rope_local = rope_tables(cfg.get("rope_local_base_freq", 10000.0), None) if gemma3 else rope_global
    causal = torch.full((T, T), float("-inf"), dtype=fdt, device=dev).triu(1)
    window = cfg.get("sliding_window") if cfg.get("use_sliding_window", True) else None
    local_mask = causal
    if window:  # a query sees the last `window` positions only
        local_mask = causal + torch.full((T, T), float("-inf"), dtype=fdt, device=dev).tril(-window)
    L = cfg["num_hidden_layers"]
    if gemma3:
        types = cfg.get("layer_types") or [
            "sliding_attention" if (i + 1) % cfg.get("sliding_window_pattern", 6) else "full_attention"
            for i in range(L)]
        sliding = [t == "sliding_attention" for t in types]
    elif family == "gemma2":
        sliding = [i % 2 == 0 for i in range(L)]
    else:
        sliding = [True] * L
    scale = (cfg.get("query_pre_attn_scalar", hd) if gemma2 else hd) ** -0.5
    attn_cap = cfg.get("attn_logit_softcapping") if gemma2 else None
    final_cap = cfg.get("final_logit_softcapping") if gemma2 else None

    def norm(x, name):
        w = p[name]
        return rms_norm(x, 1.0 + w if gemma else w, eps)

    x = p["model.embed_tokens.weight"][ids]
    if gemma:
        x = x * C ** 0.5
    for l in range(L):
        pre = f"model.layers.{l}."
        cos, sin = rope_local if sliding[l] else rope_global
        mask = local_mask if sliding[l] else causal
        h = norm(x, pre + "input_layernorm.weight")

        def proj(name, inp):
            y = inp @ p[pre + name + ".weight"].T
            b = p.get(pre + name + ".bias")
            return y + b if b is not None else y

        if family == "phi3":  # one product, split into q, k, v
            qkv = proj("self_attn.qkv_proj", h)
            qv, kv_, vv = qkv.split([H * hd, KV * hd, KV * hd], dim=-1)
        else:
            qv, kv_ = proj("self_attn.q_proj", h), proj("self_attn.k_proj", h)
            vv = None
        q = qv.reshape(T, H, hd)
        k = kv_.reshape(T, KV, hd)
        if family in ("qwen3", "qwen3_moe", "gemma3_text"):  # per head, before the rotation
            q = norm(q, pre + "self_attn.q_norm.weight")
            k = norm(k, pre + "self_attn.k_norm.weight")
        q = q.transpose(0, 1)
        k = k.transpose(0, 1)
        v = (vv if vv is not None else proj("self_attn.v_proj", h)).reshape(T, KV, hd).transpose(0, 1)
        if family != "smollm3" or cfg["no_rope_layers"][l]:
            qr, qp = q[..., :rot], q[..., rot:]
            kr, kp = k[..., :rot], k[..., rot:]
            q = torch.cat((qr * cos + rotate_half(qr) * sin, qp), -1)
            k = torch.cat((kr * cos + rotate_half(kr) * sin, kp), -1)
        k = k.repeat_interleave(H // KV, dim=0)
        v = v.repeat_interleave(H // KV, dim=0)
        att = torch.softmax(softcap(q @ k.transpose(1, 2) * scale, attn_cap) + mask, dim=-1)
        o = proj("self_attn.o_proj", (att @ v).transpose(0, 1).reshape(T, H * hd))
        if gemma2:
            x = x + norm(o, pre + "post_attention_layernorm.weight")
            h = norm(x, pre + "pre_feedforward_layernorm.weight")
        else:
            x = x + o
            h = norm(x, pre + "post_attention_layernorm.weight")
        if moe_sparse(cfg, l):
            m = moe_mlp(cfg, p, pre, h, router_logits if router_logits is not None else [])
        else:
            if family == "phi3":  # gate and up: the two halves of one product
                g, u = proj("mlp.gate_up_proj", h).chunk(2, dim=-1)
            else:
                g = proj("mlp.gate_proj", h)
                u = proj("mlp.up_proj", h)
            if gemma:
                act = torch.nn.functional.gelu(g, approximate="tanh")
            else:
                act = torch.nn.functional.silu(g)
            m = proj("mlp.down_proj", act * u)
        x = x + (norm(m, pre + "post_feedforward_layernorm.weight") if gemma2 else m)
    x = norm(x, "model.norm.weight")
    head = p["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else p["lm_head.weight"]
    return softcap(x @ head.T, final_cap)


def rel_err(a, b):
    return float((a - b).norm() / max(float(b.norm()), 1e-30))


def checker(failures):
    """check(name, got, want, tol): prints the relative error of got from
    want and adds name to failures when it is above tol."""
    def check(name, got, want, tol):
        e = rel_err(got, want)
        status = "ok" if e <= tol else "MISMATCH"
        print(f"{name:60s} rel err {e:.2e} (tolerance {tol:.0e}) {status}")
        if e > tol:
            failures.append(name)
    return check


PARTS = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn",
         "o_proj": "self_attn", "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}


# Relative tolerances of --bf16 (relative L2 for the gradients), sized on
# the CPU by running this file's own forward under CPU autocast against
# alallo's CPU pass on the same bf16 and NF4 bases (docs/trainer.md, "GPU",
# "Against PyTorch"): each keeps a factor of 3 or more over what was seen,
# and the GPU's own distance from the CPU (test_cuda_model.c: 7e-5 on the
# loss, 9e-3 on the gradients, emulated) fits inside that factor.
BF16_TOL = {"loss": 1e-2, "grad": 1e-1, "all": 5e-2}


def make_trained(params, dump, lora, copy):
    """What trains, by name, each a leaf that wants its gradient. LoRA: the
    base frozen, W + scale * B A on every projection (params changed in
    place), the adapters as alallo started them (copy(t) of the dump's);
    full fine-tuning: every tensor of params."""
    if not lora:
        for t in params.values():
            t.requires_grad_(True)
        return params
    scale = float(dump["lora_scale"].reshape(()))
    trained = {}
    for name, t in dump.items():
        if name.startswith("lora.") and name.endswith(".A"):
            _, layer, proj, _ = name.split(".")
            a = copy(t).requires_grad_(True)
            b = copy(dump[name[:-1] + "B"]).requires_grad_(True)
            trained[name], trained[name[:-1] + "B"] = a, b
            key = f"model.layers.{layer}.{PARTS[proj]}.{proj}.weight"
            if key in params:
                params[key] = params[key] + scale * (b @ a)
            else:  # Phi-3: the adapter moves its rows of the fused tensor
                key, off = fused_rows(params, layer, proj)
                w = params[key]
                n = b.shape[0]
                params[key] = torch.cat((w[:off], w[off:off + n] + scale * (b @ a), w[off + n:]))
    return trained


def fused_rows(params, layer, proj):
    """Where projection proj of a Phi-3 layer lies in its fused tensor:
    (name, first row). q, k, v in qkv_proj (q as wide as o_proj's input,
    k and v halves of the rest); gate and up the halves of gate_up_proj."""
    pre = f"model.layers.{layer}."
    if proj in ("gate_proj", "up_proj"):
        key = pre + "mlp.gate_up_proj.weight"
        return key, 0 if proj == "gate_proj" else params[key].shape[0] // 2
    key = pre + "self_attn.qkv_proj.weight"
    q = params[pre + "self_attn.o_proj.weight"].shape[1]
    kvw = (params[key].shape[0] - q) // 2
    return key, {"q_proj": 0, "k_proj": q, "v_proj": q + kvw}[proj]


def hf_pass(model_dir, cfg, params, dump, ids, lora, device):
    """The pass through transformers + peft; None when they do not import.
    Returns (loss, {dump name: gradient})."""
    try:
        import transformers
        import peft
    except ImportError:
        return None
    config = transformers.AutoConfig.from_pretrained(model_dir)
    try:  # eager: the plain softmax attention, as alallo's (no fused kernels)
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    except TypeError:  # a transformers older than the option
        model = transformers.AutoModelForCausalLM.from_config(config)
    model = model.float()
    state = {k: v.float() for k, v in params.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if k != "lm_head.weight" or not cfg.get("tie_word_embeddings")]
    if missing or unexpected:
        raise SystemExit(f"reference.py: transformers' model does not take alallo's tensors: "
                         f"missing {missing[:3]}, unexpected {unexpected[:3]}")
    if cfg.get("tie_word_embeddings"):
        model.tie_weights()
    names = {}
    if lora:
        r = dump[next(n for n in dump if n.startswith("lora.") and n.endswith(".A"))].shape[0]
        scale = float(dump["lora_scale"].reshape(()))
        model = peft.get_peft_model(model, peft.LoraConfig(
            r=r, lora_alpha=scale * r, lora_dropout=0.0, bias="none",
            target_modules=list(PARTS)))
    model.to(device)  # first: the parameters named below are the device's
    if lora:
        mods = dict(model.named_modules())
        for name, t in dump.items():
            if name.startswith("lora.") and name[-2:] in (".A", ".B"):
                _, layer, proj, ab = name.split(".")
                mod = mods[f"base_model.model.model.layers.{layer}.{PARTS[proj]}.{proj}"]
                w = (mod.lora_A if ab == "A" else mod.lora_B)["default"].weight
                with torch.no_grad():
                    w.copy_(t.float())
                names[name] = w
    else:
        for n, w in model.named_parameters():
            w.requires_grad_(True)
            names[n] = w
    x = ids.to(device)[None]
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(input_ids=x, labels=x)
    out.loss.backward()
    grads = {n: w.grad.detach().double().cpu() for n, w in names.items()}
    if not lora and cfg.get("tie_word_embeddings"):
        grads.pop("lm_head.weight", None)  # the same tensor as the embedding
    return float(out.loss), grads


def own_pass(cfg, params, dump, ids, lora, device):
    """This file's forward under autocast: the --bf16 reference where
    transformers or peft is missing (Debian's python3-torch)."""
    p = {k: v.float().to(device) for k, v in params.items()}
    trained = make_trained(p, dump, lora, lambda t: t.float().to(device))
    x = ids.to(device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        logits = forward(cfg, p, x)
    loss = torch.nn.functional.cross_entropy(logits[:-1].float(), x[1:])
    loss.backward()
    return float(loss), {n: t.grad.detach().double().cpu() for n, t in trained.items()}


def main_bf16(argv):
    device = "cpu"
    if argv[:1] == ["--device"]:
        device, argv = argv[1], argv[2:]
    if not argv or len(argv) % 3 or device not in ("cpu", "cuda"):
        print(__doc__, file=sys.stderr)
        return 2
    if device == "cuda" and not torch.cuda.is_available():
        print("reference.py: --device cuda: torch sees no GPU", file=sys.stderr)
        return 2
    # several comparisons in one run: the imports (seconds each) once
    rc = 0
    for i in range(0, len(argv), 3):
        print(f"reference.py --bf16: {argv[i]}", flush=True)
        rc = max(rc, compare_bf16(device, *argv[i:i + 3]))
    return rc


def compare_bf16(device, model_dir, dump_path, ids_s):
    cfg = json.load(open(f"{model_dir}/config.json"))
    params = read_safetensors(f"{model_dir}/model.safetensors")
    dump = read_safetensors(dump_path)
    for name, t in dump.items():  # the base alallo trained on
        if name.startswith("base."):
            params[name[5:]] = t
    ids = torch.tensor([int(s) for s in ids_s.split(",")])
    lora = "lora_scale" in dump
    torch.manual_seed(0)
    got = hf_pass(model_dir, cfg, params, dump, ids, lora, device)
    how = "transformers + peft" if got is not None else "reference.py's own forward"
    if got is None:
        got = own_pass(cfg, params, dump, ids, lora, device)
    loss, grads = got
    failures = []
    worst = 0.0
    e = abs(float(dump["loss"].reshape(())) - loss) / abs(loss)
    print(f"{'loss':60s} rel err {e:.2e} (tolerance {BF16_TOL['loss']:.0e})")
    if e > BF16_TOL["loss"]:
        failures.append("loss")
    for name, g in grads.items():
        e = rel_err(dump["grad." + name], g)
        worst = max(worst, e)
        status = "ok" if e <= BF16_TOL["grad"] else "MISMATCH"
        print(f"{'grad ' + name:60s} rel err {e:.2e} (tolerance {BF16_TOL['grad']:.0e}) {status}")
        if e > BF16_TOL["grad"]:
            failures.append(name)
    if not grads:
        failures.append("no gradients compared")
    else:  # every gradient as one vector: the bound that small tensors cannot dodge
        mine = torch.cat([dump["grad." + n].reshape(-1) for n in grads])
        e = rel_err(mine, torch.cat([g.reshape(-1) for g in grads.values()]))
        print(f"{'every gradient together':60s} rel err {e:.2e} (tolerance {BF16_TOL['all']:.0e})")
        if e > BF16_TOL["all"]:
            failures.append("every gradient together")
    if failures:
        print(f"reference.py: {len(failures)} mismatches: {', '.join(failures[:5])}",
              file=sys.stderr)
        return 1
    print(f"reference.py: alallo matches PyTorch {torch.__version__} ({how}, bf16 autocast on "
          f"{device}) on {len(grads)} {'adapter ' if lora else ''}tensors; worst gradient "
          f"rel err {worst:.2e}")
    return 0


def main():
    if sys.argv[1:2] == ["--bf16"]:
        return main_bf16(sys.argv[2:])
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    model_dir, dump_path, ids_s = sys.argv[1:]
    cfg = json.load(open(f"{model_dir}/config.json"))
    params = read_safetensors(f"{model_dir}/model.safetensors")
    dump = read_safetensors(dump_path)
    ids = torch.tensor([int(s) for s in ids_s.split(",")])
    lora = "lora_scale" in dump
    trained = make_trained(params, dump, lora, lambda t: t.clone())
    router_logits = []
    logits = forward(cfg, params, ids, router_logits)
    loss = torch.nn.functional.cross_entropy(logits[:-1], ids[1:])
    if router_logits:
        loss = loss + cfg.get("router_aux_loss_coef", 0.001) * moe_aux_loss(cfg, router_logits)
    loss.backward()
    failures = []
    check = checker(failures)

    check("loss", dump["loss"].reshape(()), loss.detach(), 1e-5)
    check("logits", dump["logits"], logits.detach(), 1e-5)
    for name, t in trained.items():
        # an expert no token chose is outside the graph: its gradient is zero
        grad = t.grad if t.grad is not None else torch.zeros_like(t)
        check("grad " + name, dump["grad." + name], grad, 1e-4)
    if failures:
        print(f"reference.py: {len(failures)} mismatches: {', '.join(failures[:5])}",
              file=sys.stderr)
        return 1
    print(f"reference.py: alallo matches PyTorch {torch.__version__} (float64) on "
          f"{len(trained)} {'adapter ' if lora else ''}tensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
