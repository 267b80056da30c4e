#!/usr/bin/python3
"""bench/train/gpu_model.py - what the CUDA trainer should do on an H100 or
H200, predicted from FLOPs and bytes, for the design it has and for each
change issue 36 plans, beside PyTorch + transformers + peft's step at the
same shape. Python 3's standard library only; no GPU needed.

Each kernel of a step is listed with its FLOPs, the bytes it must move
and how many launches it takes; its time is the largest of
  FLOPs / (the unit's peak x its efficiency),
  bytes / (HBM bandwidth x the copy efficiency),
  launches x the launch floor,
and the step's time is their sum plus its host-device syncs. The figures
are a prediction: scripts/gpu-check.sh's bench is the measurement, and
the first GPU run sets one against the other (docs/trainer.md, "Predicted
on an H200").

Peak figures (NVIDIA's datasheets, SXM parts; /work/.library/device/H200.md):
  H200 SXM  dense bf16 tensor 989 TFLOP/s, fp32 (CUDA cores) 67 TFLOP/s,
            HBM3e 4.8 TB/s
  H100 SXM  dense bf16 tensor 989 TFLOP/s, fp32 67 TFLOP/s, HBM3 3.35 TB/s
Efficiencies (what a kernel reaches of a peak), from measurements on the
H200s this project is lent (KINDS.md): an 8192^3 bf16 product through
PyTorch ran at 769-798 TFLOP/s on random data (0.80 of 989), a
device-to-device copy at ~4.3 TB/s (0.88 of 4.8). The rest are stated
assumptions, each in EFF below with its reason.

MFU is the honest one (/work/shared/reference/FACTS.md, the same FLOPs as
`alallo bench train`): model FLOPs per token x tokens / step time / the
dense bf16 peak (989 TFLOP/s); full fine-tuning counts 6 N + 6 L d T a
token, LoRA 4 N + 6 N_lora.

usage: gpu_model.py [--gpu H200|H100] [--mode lora|full|qlora|all]
                    [--batch B] [--seq T] [--eff KEY=VALUE ...] [--kernels]
                    [--json]
  --eff      sets one of EFF's efficiencies (e.g. attn_cur_bwd=0.2, from a
             GPU run's bench/gpu/run.sh), to see what a measured figure
             does to the prediction
  --kernels  the per-kernel table of the current design and of all the
             changes together, for each mode
  --json     one JSON object instead of the tables
"""
import argparse
import json
import sys

GPUS = {
    "H200": {"tc": 989e12, "fp32": 67e12, "bw": 4.8e12},
    "H100": {"tc": 989e12, "fp32": 67e12, "bw": 3.35e12},
}

EFF = {
    "gemm": 0.80,     # large bf16 products (cuBLASLt), measured 0.78-0.81 on an H200
    "mem": 0.88,      # streaming elementwise kernels, measured copy 4.3 of 4.8 TB/s
    "cuda_fp32": 0.50,  # rank-16 fp32 products on CUDA cores: the K loop is short,
                        # half the fp32 peak (they are memory-bound at 8192 tokens anyway)
    "nf4_fused": 0.78,  # a product that decodes NF4 tile by tile as it loads it: the
                        # decode hides under the copies at 8192 rows, taken as 0.975
                        # of a plain product (what change 4 aims at: a pipelined,
                        # cuBLAS-class kernel)
    "nf4_tiles": 0.35,  # change 4a as built (cuda_ops.cu, cuda_nf4_gemm): wmma
                        # (mma.sync, not Hopper's wgmma), 128 x 64 tiles, K steps of
                        # 32 staged synchronously (no cp.async, one buffer), each
                        # step decoding 2048 values in the block's own instructions;
                        # counted per step on an H100 SM, the staging's issue slots
                        # (~190 cycles) match the tensor work (~130-200), so about
                        # 0.35 of peak: an assumption until ops_run.sh measures it
                        # (nf4_gemm_forward / nf4_gemm_dx, --eff nf4_tiles=...)
    # attention, of the bf16 tensor peak (causal FLOPs counted once):
    # FlashAttention-2 at head dim 64 on an H100 forward ~0.35, backward ~0.25
    # (its authors' figures; PyTorch's SDPA dispatches to it)
    "attn_fa2_fwd": 0.35,
    "attn_fa2_bwd": 0.25,
    # alallo's attention after change 3 (FlashAttention-2's design in its
    # own kernel): taken at FlashAttention-2's rate, the design's aim; a
    # first version may well reach less (--eff attn_new_fwd=...)
    "attn_new_fwd": 0.35,
    "attn_new_bwd": 0.25,
    # change 3 as built so far (cuda_attn_tc.cu, "3a"): FlashAttention-2's
    # layout (mma.sync with Q, S, P, dS and the outputs in registers, the
    # walked tiles double-buffered through cp.async, no bank conflicts) but
    # the tiles land as fp32 and are rounded to bf16 in shared memory (the
    # activations are still fp32; HBM bytes follow the design's activation
    # width), and the backward keeps 7 products (S and dP twice, for bits
    # that repeat: no atomics). Taken at 0.30 forward (FlashAttention-2's
    # 0.35, less the rounding pass) and 0.22 a FLOP backward (its 0.25, less
    # the same): assumptions until the first GPU run measures them
    "attn_built_fwd": 0.30,
    "attn_built_bwd": 0.22,
    # the same kernels once q, k, v and dO are bf16 in memory (change 1i):
    # the walked tiles land as the products read them, the rounding pass
    # and the fp32 landing buffer gone, so FlashAttention-2's rate a FLOP
    # (0.35 forward, 0.25 backward), with the backward's 7 products still
    "attn_built_bf16_fwd": 0.35,
    "attn_built_bf16_bwd": 0.25,
    # alallo's current tensor-core attention (cuda_attn_tc.cu): fp32 Q/K/V
    # read with scalar loads, no asynchronous copies, S, P and the O
    # accumulator round-tripping shared memory each key tile, a 4-way bank
    # conflict in its softmax: taken as under half of FlashAttention-2's
    # rate, and its 7-product backward at the same rate per FLOP
    "attn_cur_fwd": 0.15,
    "attn_cur_bwd": 0.10,
}
LAUNCH_S = 4e-6        # a kernel's floor outside a graph (launch and gap)
GRAPH_LAUNCH_S = 1.5e-6  # inside a CUDA graph
WALK_S = 0.3e-6        # the host's walk of a launch before a replay (cuda_graph.h:
                       # its arguments noted and compared): the forward's while
                       # the GPU waits, the backward's while the GPU runs the
                       # head. Measured on the CPU emulator's build, the tiny
                       # shape, with CI beside it: 0.27 us a launch;
                       # `alallo bench train --device cuda` reports the GPU
                       # machine's as graphs.walk_s
SYNC_S = 25e-6         # a host-device sync: the queue drains, a copy, a relaunch
TORCH_OP_S = 6e-6      # PyTorch eager: a floor per kernel (dispatch overlapped)

SHAPE_1B = {"d": 2048, "L": 16, "H": 32, "KV": 8, "hd": 64, "I": 8192, "V": 128256, "r": 16}

# The designs: the current one, each change of issue 36 alone on top of it,
# all of them, and PyTorch + peft's step as it is built.
CURRENT = {
    "act": 4,            # activation bytes (fp32)
    "convert": True,     # a separate fp32 -> bf16 pass before each product
                         # ("fused": change 1a, the kernel that makes an input
                         # writes its bf16 beside it; False: none, change 1)
    "lora": "fp32",      # rank-r products in fp32 on CUDA cores, 6 a projection
    "attn": "current",   # cuda_attn_tc.cu before change 3: 7-product backward
                         # ("built": change 3 as built, "new": change 3 in
                         # full; "fa2": PyTorch's SDPA)
    "nf4": "decode",     # NF4 decoded to bf16 before each product (a whole matrix
                         # before 4b, a chunk of rows since: the same bytes)
                         # ("tiles": change 4a as built; "fused": change 4's aim)
    "graph": False,      # True: the whole step a graph; "layers" (change 5b,
                         # built): the embedding, the layers and the final norm
                         # replayed as graphs, forward and backward, their
                         # walk's host time exposed; the head and the
                         # optimizer eager
    "syncs": 38,         # host-device syncs a step (most in the chunked head)
    "torch": False,
    "gated_acc": True,   # the gated activation's backward adds into dg and du
                         # zeroed by a pass before (False: change 1c, written)
    "zeroed": "all",     # the other gradient buffers the backward adds into,
                         # zeroed by a pass each: "all" (dh, dln twice, dao,
                         # dq, dk, dv); "attention" (change 1d: the first
                         # projection of a group writes dh, dln, dao, beta 0;
                         # attention's dq, dk, dv still zeroed); "none" (1e, built:
                         # attention's backward writes them too)
    "gu_bf16": False,    # gate's and up's outputs kept as bf16, written so by
                         # their products (change 1g), else at the activations'
                         # width
    "gated_f32": True,   # the gated activation's backward writes fp32 dg and du
                         # beside their bf16 (False: change 1f, the bf16 alone;
                         # the fp32 was read only for a bias gate and up lack)
    "qkv_bf16": False,   # q, k, v written as bf16 by their products and kept so
                         # (rotary positions on bf16), dO's bf16 written by
                         # the pass that computes D, attention reading them
                         # (change 1i); else at the activations' width
    "ao_bf16": False,    # attention's output written and kept as bf16 alone
                         # (o's input and its weight gradients' and D's),
                         # no fp32 beside it nor conversion again (1k)
    "dh_bf16": False,    # down's dX product writes dh as bf16 where it is one
                         # product (a 16-bit base, LoRA folded or full), and
                         # the gated backward reads it so (change 1l)
    "res_epilogue": False,  # o's and down's products add the residual stream
                         # in their epilogue and write it (change 1m; a
                         # 16-bit base, LoRA folded or full: an NF4 base
                         # keeps the adds)
    "res_bf16": False,   # the residual stream (each layer's input, its middle,
                         # the embedding's rows) kept as bf16, the norms and
                         # residual adds reading and writing it so (change
                         # 1j); its gradient stays fp32
    "logits": 4,         # bytes a value of the head's logits as its product
                         # writes them and the loss kernel reads and writes
                         # them (2: change 1h, bf16, dlogits written over them
                         # as bf16, no conversion pass)
    "keep_in": False,    # the products' bf16 inputs (the norms' outputs with
                         # LoRA's columns beside, the gated activation's)
                         # kept per layer as the forward writes them, read
                         # by the weight gradients (full's dW, LoRA's dA)
                         # as they are: no norms or activation again in the
                         # backward (change 1n; PyTorch keeps them too)
    "dqkv_fused": False, # 1o: attention's backward writes dq, dk, dv as bf16
                         # alone, dq and dk rotated back in its epilogue (no
                         # fp32 written, no rotary pass, no conversion of dv)
    "xa_group": False,   # 2c: with LoRA folded and the inputs kept (1n), x A
                         # once a group (A stacked: q, k, v; gate, up),
                         # written straight into the kept input's columns
                         # (no copy); dB reads x A there
    "da_group": False,   # 2d: dA once a group, [t_q | t_k | t_v]^T x into a
                         # scratch, then added into each dA
    "db_pass": False,    # 2e: dB and t = dy B in one pass over dy (a kernel
                         # of its own: dB's partial sums per block of rows
                         # into a scratch, then summed in a fixed order)
    "f32_out": True,     # the norms before products and the gated activation
                         # write their fp32 output beside the bf16 copy (1a);
                         # False (change 1b): the bf16 alone, the fp32 being
                         # read only for LoRA dropout's mask
}
CHANGES = [
    ("1a conversions fused into the kernels before (built)", {"convert": "fused"}),
    ("1b norms' and activation's outputs bf16 alone (built)", {"f32_out": False}),
    ("1c gated backward writes dg and du, no zeroing (built)", {"gated_acc": False}),
    ("1d first dX product writes dh, dln, dao (built)", {"zeroed": "attention"}),
    ("1e attention's backward writes dq, dk, dv (built)", {"zeroed": "none"}),
    ("1f gated backward writes dg and du as bf16 alone (built)", {"gated_f32": False}),
    ("1g gate's and up's outputs kept as bf16 (built)", {"gu_bf16": True}),
    ("1h the head's logits as bf16 (built)", {"logits": 2}),
    ("1i q, k, v and dO as bf16, attention's tiles land so (built)", {"qkv_bf16": True}),
    ("1j the residual stream as bf16 (built)", {"res_bf16": True}),
    ("1k attention's output kept as bf16 (built)", {"ao_bf16": True}),
    ("1l dh written and read as bf16 (built)", {"dh_bf16": True}),
    ("1m residual adds in o's and down's epilogues (built)", {"res_epilogue": True}),
    ("1n products' inputs kept, not made again (built)", {"keep_in": True}),
    ("1o dq, dk, dv as bf16 from attention, rotated there (built)", {"dqkv_fused": True}),
    ("2c LoRA's x A once a group, into the kept input (built)", {"xa_group": True}),
    ("2d LoRA's dA once a group (built)", {"da_group": True}),
    ("2e LoRA's dB and dy B in one pass over dy (built)", {"db_pass": True}),
    ("1 bf16 activations", {"act": 2, "convert": False, "logits": 2, "qkv_bf16": True,
                            "res_bf16": True, "ao_bf16": True, "dh_bf16": True,
                            "res_epilogue": True}),
    ("2a LoRA in bf16, each product (built)", {"lora": "tc_each"}),
    ("2b LoRA folded into the base products (built)", {"lora": "fold"}),
    ("2 LoRA on tensor cores", {"lora": "tc"}),
    ("3a FA2-style attention, 7-product backward, fp32 tiles (built)", {"attn": "built"}),
    ("3 FA2-style attention", {"attn": "new"}),
    ("4a NF4 tiles in a wmma product (built, on request)", {"nf4": "tiles"}),
    ("4b NF4 a chunk of rows at a time (built)", {"nf4": "decode"}),
    ("4 NF4 inside the product", {"nf4": "fused"}),
    ("5a head without a download a chunk (built)", {"syncs": 8}),
    ("5b the layers as CUDA graphs (built)", {"graph": "layers"}),
    ("5 CUDA graph, head without syncs", {"graph": True, "syncs": 2}),
]
TORCH = {"act": 2, "convert": False, "lora": "peft", "attn": "fa2", "nf4": "decode", "logits": 4,
         "qkv_bf16": True, "res_bf16": True, "ao_bf16": True, "dh_bf16": True,
         "res_epilogue": False,
         "graph": False, "syncs": 2, "torch": True, "f32_out": True, "gated_acc": False,
         "keep_in": True, "xa_group": False, "da_group": False, "db_pass": False,
         "dqkv_fused": False,
         "gated_f32": True, "gu_bf16": True,
         "zeroed": "none"}


class Step:
    """The kernels of one training step and their predicted times."""

    def __init__(self, gpu, design):
        self.gpu = GPUS[gpu]
        self.design = design
        self.kernels = {}  # name -> [launches, flops, bytes, seconds]
        self.in_graph = False  # adding the layers' kernels under "graph": "layers"
        self.walked = [0, 0]   # launches walked: the forward's, the backward's
        self.part = 0          # which of the two is being added

    def add(self, name, flops=0.0, nbytes=0.0, unit="tc", eff=None, launches=1):
        g, d = self.gpu, self.design
        rate = {"tc": g["tc"], "fp32": g["fp32"]}[unit] * (
            eff if eff is not None else EFF["gemm"] if unit == "tc" else EFF["cuda_fp32"])
        graphed = d["graph"] is True or (d["graph"] == "layers" and self.in_graph)
        if d["graph"] == "layers" and self.in_graph:
            self.walked[self.part] += launches
        floor = (TORCH_OP_S if d["torch"] else GRAPH_LAUNCH_S if graphed else LAUNCH_S)
        t = max(flops / rate, nbytes / (g["bw"] * EFF["mem"]), launches * floor)
        k = self.kernels.setdefault(name, [0, 0.0, 0.0, 0.0])
        k[0] += launches
        k[1] += flops
        k[2] += nbytes
        k[3] += t

    def mem(self, name, nbytes, launches=1):
        self.add(name, 0.0, nbytes, launches=launches)

    def seconds(self):
        # the backward's walk runs beside the head, shows past it only
        head = sum(k[3] for n, k in self.kernels.items() if "head" in n)
        return (sum(k[3] for k in self.kernels.values()) + self.design["syncs"] * SYNC_S
                + self.walked[0] * WALK_S + max(0.0, self.walked[1] * WALK_S - head))

    def bytes_of(self, prefix):
        return sum(k[2] for n, k in self.kernels.items() if n.startswith(prefix))


def build_step(gpu, design, mode, B, T, s=SHAPE_1B):
    """mode: lora (16-bit base), qlora (NF4 base), full."""
    st = Step(gpu, design)
    d, L, I, V, r = s["d"], s["L"], s["I"], s["V"], s["r"]
    dkv = s["KV"] * s["hd"]
    N = B * T
    a = design["act"]
    full, nf4 = mode == "full", mode == "qlora"
    recompute = nf4  # alallo and peft both recompute each layer for QLoRA
    keep_in = design["keep_in"] and not recompute  # 1n: nothing kept to read then
    lora = None if full else design["lora"]  # full fine-tuning has no adapters
    if nf4 and lora == "fold":  # 2b folds on a bf16 base only: an NF4
        lora = "tc_each"        # product decodes W, with no room beside it
    # the seven projections: (name, in, out, the group that shares an input)
    projs = [("q", d, d, "qkv"), ("k", d, dkv, "qkv"), ("v", d, dkv, "qkv"),
             ("o", d, d, "o"), ("gate", d, I, "gu"), ("up", d, I, "gu"), ("down", I, d, "down")]

    def convert(n, kept=False):
        """A product's input made bf16: a pass of its own (fp32 read, bf16
        written) in the current design. With change 1a the kernel that makes
        the input (a norm, the gated activation, attention's forward, rotary
        positions' backward, a norm's backward) writes the bf16 beside its
        fp32 output: 2 bytes a value, no launch; kept: an input that no
        kernel makes just then (attention's output again for its weight
        gradients, dv from attention's backward, the head's gathered rows),
        still a pass (cuda_model.c)."""
        if design["convert"] == "fused" and not kept:
            st.mem("elementwise: bf16 copies beside fp32 outputs", n * 2, launches=0)
        elif design["convert"]:
            st.mem("elementwise: fp32->bf16 conversions", n * 6)

    # bytes a value of a norm's or the gated activation's output as written
    # (its bf16 copy for the products is counted by convert): the design's
    # activation width, none when the kernel writes the bf16 alone (1b)
    out_b = a if design["f32_out"] or not design["convert"] else 0
    # bytes a value of gate's or up's output as kept (1g: bf16)
    gu = 2 if design["gu_bf16"] else a
    # bytes a value of q, k, v (and dO for attention) as kept (1i: bf16)
    qkv = 2 if design["qkv_bf16"] else a
    # bytes a value of attention's output as kept (1k: bf16)
    aob = 2 if design["ao_bf16"] else a
    # bytes a value of the residual stream (1j: bf16)
    rb = 2 if design["res_bf16"] else a
    # the adds in the products' epilogues (1m), where one product makes
    # o's and down's outputs
    epi = design["res_epilogue"] and not nf4

    def weight(din, dout):
        """bytes the product reads for the base weight, after any decode"""
        if nf4 and design["nf4"] == "decode":
            st.mem("nf4: decode to a full matrix", din * dout * (0.5 + 2) + din * dout / 64 * 4)
            return din * dout * 2
        if nf4:
            return din * dout * (0.5 + 4 / 64)
        return din * dout * 2

    def product(name, m, n, k, a_in, c_out, wbytes, nf4_kind=None, extra_flops=0.0):
        """nf4_kind: the design's "nf4" for a product with an NF4 weight"""
        eff = {"fused": EFF["nf4_fused"], "tiles": EFF["nf4_tiles"]}.get(nf4_kind)
        st.add("gemm: " + name, 2.0 * m * n * k + extra_flops, m * k * a_in + wbytes + m * n * c_out,
               eff=eff)

    def fold_flops(name, dout):
        """2b: the base product's K runs r columns past x for each folded
        projection of its group up to this one (q 1, k 2, v 3; gate 1,
        up 2; o and down 1)"""
        if lora != "fold":
            return 0.0
        k = {"q": 1, "k": 2, "v": 3, "o": 1, "gate": 1, "up": 2, "down": 1}[name]
        return 2.0 * N * dout * r * k

    group_of = {"q": 3, "k": 3, "v": 3, "o": 1, "gate": 2, "up": 2, "down": 1}
    xa_group = design["xa_group"] and lora == "fold" and keep_in
    da_group = design["da_group"] and lora in ("fold", "tc_each")  # NF4 too

    def lora_forward(p, din, dout, first_of_group):
        kind = lora
        if kind == "fp32":  # x A then (x A) B added into y, fp32 on CUDA cores
            st.add("lora fp32: forward", 2.0 * N * din * r, N * din * 4 + N * r * 4, unit="fp32")
            st.add("lora fp32: forward", 2.0 * N * r * dout, N * r * 4 + N * dout * 8, unit="fp32")
        elif kind == "peft":  # lora_A, lora_B, * scaling, + result: separate kernels
            st.add("peft lora: forward products", 2.0 * N * din * r, N * din * 2 + N * r * 2)
            st.add("peft lora: forward products", 2.0 * N * r * dout, N * r * 2 + N * dout * 2)
            st.mem("peft lora: scale and add", N * dout * 2 * 5, launches=2)
        elif kind == "tc_each":  # as built: x A from the base's bf16 input
            # (bf16 out), then (x A) B added into y, each a bf16 product
            st.add("lora tc, each product: forward", 2.0 * N * din * r,
                   N * din * 2 + din * r * 2 + N * r * 2)
            st.add("lora tc, each product: forward", 2.0 * N * r * dout,
                   N * r * 2 + dout * r * 2 + N * dout * a * 2)
        elif kind == "fold" and xa_group:  # 2c: once a group, A stacked,
            # written into the kept input's columns: no copy
            if first_of_group:
                rg = r * group_of[p]
                st.add("lora folded: forward x A", 2.0 * N * din * rg,
                       N * din * 2 + din * rg * 2 + N * rg * 2)
        elif kind == "fold":  # as built (2b): x A (bf16 out) and its copy into
            # its r columns beside x; (x A) B as those columns of the base
            # product (its FLOPs counted there, by slot), no pass over y
            st.add("lora folded: forward x A", 2.0 * N * din * r,
                   N * din * 2 + din * r * 2 + N * r * 2)
            st.mem("lora folded: forward x A", N * r * 4)
        # "tc": x A in the base product (its columns beside W's), (x A) B
        # folded into it as r more K: FLOPs in the base product, no pass

    def lora_backward(p, din, dout, first_of_group):
        kind = lora
        if kind == "fp32":  # dB, d(xA), dA, dX += d(xA) A^T, fp32
            st.add("lora fp32: backward", 2.0 * N * r * dout, N * dout * 4 + N * r * 4, unit="fp32")
            st.add("lora fp32: backward", 2.0 * N * r * dout, N * dout * 4 + N * r * 4, unit="fp32")
            st.add("lora fp32: backward", 2.0 * N * din * r, N * din * 4 + N * r * 4, unit="fp32")
            st.add("lora fp32: backward", 2.0 * N * din * r, N * r * 4 + N * din * 8, unit="fp32")
        elif kind == "tc":  # grouped bf16: dB and d(xA) read dY once; dA reads x
            # once per group; dX's share rides in the base dX product (K + r)
            st.add("lora tc: backward (grouped)", 4.0 * N * r * dout, N * dout * 2 + N * r * 4,
                   launches=1 if first_of_group else 0)
            st.add("lora tc: backward (grouped)", 2.0 * N * din * r,
                   (N * din * 2 if first_of_group else 0) + N * r * 2,
                   launches=1 if first_of_group else 0)
        elif kind in ("tc_each", "fold"):  # as built: dY B (bf16 out), dB, dA,
            # dX += (dY B) A, each a bf16 product reading dY's and x's bf16
            # copies; the kept input made bf16 again for dA once per group
            # while activations are fp32 (by the recomputed norm or
            # activation with 1a; o's input, attention's output, by a pass).
            # Folded (2b): dY B beside dY, dX's share as r more K of the base
            # dX product (its FLOPs counted there), no pass over dX
            name = "lora folded: backward" if kind == "fold" else "lora tc, each product: backward"
            if first_of_group and not full and not keep_in:
                if not (p == "o" and design["ao_bf16"]):  # 1k: kept as bf16
                    convert(N * din, kept=p == "o")
            if design["db_pass"]:  # any adapter (NF4 and "each" too)
                # 2e: one kernel reads dy once for t = dy B and dB's partial
                # sums (a block a 256 rows: N / 256 partials of dout x r,
                # written and summed by a second launch); t's 4 slices of
                # out summed there too
                parts = N / 256 * dout * r * 4 * 2 + 4 * N * r * 4 * 2
                st.add(name, 4.0 * N * dout * r,
                       N * dout * 2 + N * r * 4 + dout * r * 10 + parts, launches=2)
            else:
                st.add(name, 2.0 * N * dout * r, N * dout * 2 + N * r * 2)
                st.add(name, 2.0 * N * dout * r, N * dout * 2 + N * r * 2 + dout * r * 8)
            if da_group:  # 2d: t gathered a group, dA for it in one product
                # into a scratch, added into each dA; t copied beside dy,
                # or (2e) written there too by the pass that sums it
                if design["db_pass"]:
                    st.mem(name, N * r * 2, launches=0)
                else:
                    st.mem(name, N * r * 4)
                if first_of_group:
                    rg = r * group_of[p]
                    st.add(name, 2.0 * N * din * rg,
                           N * din * 2 + N * rg * 2 + din * rg * 4 * 2 + din * rg * 8)
            else:
                st.add(name, 2.0 * N * din * r, N * din * 2 + N * r * 2 + din * r * 8)
            if kind == "tc_each":
                st.add(name, 2.0 * N * r * din, N * r * 2 + N * din * a * 2)
        else:  # peft: autograd through the four modules
            st.mem("peft lora: scale backward", N * dout * 2 * 2)
            st.add("peft lora: backward products", 2.0 * N * r * dout, N * dout * 2 + N * r * 2)
            st.add("peft lora: backward products", 2.0 * N * r * dout, N * dout * 2 + N * r * 2)
            st.add("peft lora: backward products", 2.0 * N * din * r, N * din * 2 + N * r * 2)
            st.add("peft lora: backward products", 2.0 * N * din * r, N * r * 2 + N * din * 2)
            st.mem("peft lora: dX accumulate", N * din * 2 * 3)

    def layer_forward():
        st.mem("elementwise: norms", N * d * (rb + out_b) + (N * d * 4 * 3 if design["torch"] else 0))
        convert(N * d)
        for name, din, dout, grp in projs[:3]:
            ex = 2.0 * N * r * (din + dout) if lora == "tc" else fold_flops(name, dout)
            product("projections forward", N, dout, din, 2, qkv, weight(din, dout),
                    design["nf4"] if nf4 else None, ex)
            lora_forward(name, din, dout, name == "q")
        st.mem("elementwise: rope", N * (d + dkv) * qkv * 2 * (2 if design["torch"] else 1))
        attn_forward()
        convert(N * d)  # the o product's bf16 input (1k: a second bf16 write)
        for name, din, dout, grp in projs[3:]:
            if name == "down":
                st.mem("elementwise: swiglu",
                       (N * I * gu * 2 + N * I * out_b) * (2 if design["torch"] else 1))
                convert(N * I)
            elif name == "gate":
                if not epi:
                    st.mem("elementwise: residual adds", N * d * (2 * rb + a))
                st.mem("elementwise: norms", N * d * (rb + out_b) + (N * d * 4 * 3 if design["torch"] else 0))
                convert(N * d)
            ex = 2.0 * N * r * (din + dout) if lora == "tc" else fold_flops(name, dout)
            product("projections forward", N, dout, din, 2, gu if name in ("gate", "up") else a,
                    weight(din, dout), design["nf4"] if nf4 else None, ex)
            lora_forward(name, din, dout, name in ("o", "gate", "down"))
        if not epi:
            st.mem("elementwise: residual adds", N * d * (2 * rb + a))

    def attn_flops():
        return 4.0 * B * s["H"] * T * T * s["hd"] / 2  # QK^T and PV, causal half

    def attn_rate(which):
        k = design["attn"]
        if k == "built" and design["qkv_bf16"]:
            k = "built_bf16"
        return EFF["attn_" + ("cur" if k == "current" else k) + "_" + which]

    def attn_forward():
        st.add("attention: forward", attn_flops(), N * (d + 2 * dkv) * qkv + N * d * aob,
               eff=attn_rate("fwd"))

    def attn_backward():
        products = 7 if design["attn"] in ("current", "built") else 5
        # D = rowsum(dO o O), alallo's writing dO's bf16 beside (1i)
        dob = N * d * 2 if design["qkv_bf16"] and not design["torch"] else 0
        st.mem("attention: backward", N * d * (a + aob) + dob)
        # q, k, v and dO read by both kernels, dq, dk, dv written
        st.add("attention: backward", attn_flops() * products / 2,
               N * (d + 2 * dkv) * (qkv + (0 if design["dqkv_fused"] else a)) + N * d * qkv * 2,
               eff=attn_rate("bwd"))

    def layer_backward():
        if recompute:
            layer_forward()
        elif not design["torch"] and not keep_in:
            # alallo keeps a layer's inputs, not its norms' or activation's
            # outputs: the backward makes them again where their bf16 is
            # read (the norm before gate/up and the activation for down's
            # and gate/up's weight gradients, the norm before q/k/v for
            # theirs; the bf16 copies are counted with each group's dW or
            # dA input). PyTorch keeps them.
            st.mem("elementwise: norms and activation again",
                   2 * N * d * (rb + out_b) + N * I * (2 * gu + out_b), launches=3)
        if not design["torch"]:
            # the backward's gradient buffers that products and kernels add
            # into: zeroed by a pass each, then read by their first adder
            # (dh, the two norms' dln, dao, dq, dk, dv; dg and du unless 1c)
            bufs = [(N * I + 3 * N * d, 4)] if design["zeroed"] == "all" else []
            bufs += [(N * d + 2 * N * dkv, 3)] if design["zeroed"] != "none" else []
            bufs += [(2 * N * I, 2)] if design["gated_acc"] else []
            for n_vals, n_bufs in bufs:
                st.mem("elementwise: zeroed, then read by the first adder", n_vals * 4 * 2,
                       launches=n_bufs)
        for name, din, dout, grp in reversed(projs):
            if name == "down":
                st.mem("elementwise: residual adds", N * d * a * 2)
            # dY (dv: attention's backward; 1o writes dv's bf16 alone)
            convert(N * dout, kept=name == "v" and not design["dqkv_fused"])
            ex = 2.0 * N * r * din if lora in ("tc", "fold") else 0.0
            product("projections dX", N, din, dout, 2, a, weight(din, dout),
                    design["nf4"] if nf4 else None, ex)
            if full:
                if name in ("q", "o", "gate", "down") and not keep_in:
                    if not (name == "o" and design["ao_bf16"]):  # 1k: kept as bf16
                        convert(N * din, kept=name == "o")  # the kept input again, for dW
                st.add("gemm: projections dW", 2.0 * N * din * dout,
                       N * din * 2 + N * dout * 2 + din * dout * 4)
            lora_backward(name, din, dout, name in ("q", "o", "gate", "down"))
            if name == "gate":
                # reads dh, g, u; writes dg and du at the activations'
                # width, unless the bf16 copies alone (1f, counted by convert)
                dg_b = 2 * a if design["gated_f32"] or not design["convert"] else 0
                # dh at 2 bytes where one 16-bit product wrote it (1l)
                dhb = 2 if design["dh_bf16"] and not nf4 else a
                st.mem("elementwise: swiglu backward",
                       (N * I * (dhb + 2 * gu) + N * I * dg_b) * (2 if design["torch"] else 1))
            if name == "o":  # dy, dx (read and written) fp32, x the residual
                st.mem("elementwise: norms backward", N * d * (3 * a + rb))
            if name == "q":
                if not design["dqkv_fused"]:
                    st.mem("elementwise: rope backward", N * (d + dkv) * a * 2)
        attn_backward()
        st.mem("elementwise: norms backward", N * d * (3 * a + rb))

    # the embedding, the layers, the head
    st.in_graph = True
    st.mem("elementwise: embedding", N * d * rb + N * 4)
    for _ in range(L):
        layer_forward()
    st.mem("elementwise: norms", N * d * (rb + a))
    convert(N * d, kept=True)
    st.in_graph = False
    # the head's logits (chunked): fp32, or bf16 (1h); PyTorch's product
    # writes bf16, upcast to fp32 for the loss (counted as fp32 here, with
    # the upcast's and its backward's passes beside)
    logit_bytes = design["logits"]
    product("head forward", N, V, d, 2, logit_bytes, V * d * 2)
    chunks = 8
    st.mem("head: cross-entropy", N * V * logit_bytes * 3 + (N * V * 4 * 2 if design["torch"] else 0),
           launches=chunks)
    if (design["convert"] and logit_bytes == 4) or design["torch"]:
        st.mem("elementwise: fp32->bf16 conversions", N * V * 6)  # dlogits for the products
    product("head dX", N, d, V, 2, a, V * d * 2)
    if full:
        st.add("gemm: head dW", 2.0 * N * V * d, N * V * 2 + N * d * 2 + V * d * 4)
    st.in_graph, st.part = True, 1
    for _ in range(L):
        layer_backward()
    st.in_graph = False
    n_params = (L * sum(p[1] * p[2] for p in projs) + V * d)
    if full:
        st.mem("elementwise: embedding backward", N * d * 4 * 2)
        # AdamW: fp32 master, grad, two moments, the bf16 copy; the grads
        # zeroed and summed for the norm clip. PyTorch's fused AdamW, with
        # autocast's per-step cast of each fp32 weight to bf16.
        per = 4 + 4 + 8 + 8 + 2 + 4 + 4 if not design["torch"] else 28 + 6
        st.mem("optimizer: AdamW", n_params * per, launches=4)
    else:
        n_lora = L * sum(r * (p[1] + p[2]) for p in projs)
        st.mem("optimizer: AdamW", n_lora * 40, launches=4 * 7 * L if design["torch"] else 4)
        if lora == "fold":  # 2b: scale B and scale A written beside and under
            # each W after the step (cuda_model_params_changed), one launch
            st.mem("lora folded: scale B and A beside W", n_lora * 6)
    return st


def flops_per_token(mode, T, s=SHAPE_1B):
    d, L, I, V, r = s["d"], s["L"], s["I"], s["V"], s["r"]
    dkv = s["KV"] * s["hd"]
    per_layer = d * d * 2 + d * dkv * 2 + 3 * d * I
    n = L * per_layer + V * d + L * 2 * d + d  # tied head; the norms' weights
    if mode == "full":
        return 6.0 * n + 6.0 * L * d * T
    n_lora = L * r * (4 * d + 2 * (d + dkv) + 3 * (d + I))
    return 4.0 * n + 6.0 * n_lora


def predict(gpu, design, mode, B, T):
    st = build_step(gpu, design, mode, B, T)
    sec = st.seconds()
    tok = B * T / sec
    return {"step_s": sec, "tokens_per_s": tok,
            "mfu": flops_per_token(mode, T) * tok / GPUS[gpu]["tc"],
            "elementwise_gb": st.bytes_of("elementwise") / 1e9, "step": st}


def variants():
    out = [("current design", dict(CURRENT))]
    for name, change in CHANGES:
        dsg = dict(CURRENT)
        dsg.update(change)
        out.append(("+ change " + name + " alone", dsg))
    built = dict(CURRENT)
    for name, change in CHANGES:
        if "(built)" in name:
            built.update(change)
    out.append(("every change built so far", built))
    allc = dict(CURRENT)
    for _, change in CHANGES:
        allc.update(change)
    out.append(("all five changes (2 fused)", allc))
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", default="H200", choices=sorted(GPUS))
    ap.add_argument("--mode", default="all", choices=["lora", "qlora", "full", "all"])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--eff", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--kernels", action="store_true")
    ap.add_argument("--json", action="store_true")
    o = ap.parse_args(argv)
    for kv in o.eff:
        key, _, val = kv.partition("=")
        try:
            if key not in EFF or not 0 < float(val) <= 1:
                raise ValueError
        except ValueError:
            ap.error(f"--eff {kv}: want KEY=VALUE, KEY one of {', '.join(EFF)}, 0 < VALUE <= 1")
        EFF[key] = float(val)
    modes = ["lora", "full", "qlora"] if o.mode == "all" else [o.mode]
    result = {"gpu": o.gpu, "peak": GPUS[o.gpu], "eff": EFF, "batch": o.batch, "seq": o.seq,
              "shape": "1b", "modes": {}}
    for mode in modes:
        torch = predict(o.gpu, TORCH, mode, o.batch, o.seq)
        rows = []
        for name, dsg in variants():
            p = predict(o.gpu, dsg, mode, o.batch, o.seq)
            rows.append((name, p))
        result["modes"][mode] = {
            "pytorch_peft": {k: v for k, v in torch.items() if k != "step"},
            "alallo": [dict(design=n, vs_torch=p["tokens_per_s"] / torch["tokens_per_s"],
                            **{k: v for k, v in p.items() if k != "step"}) for n, p in rows]}
        if o.json:
            continue
        label = {"lora": "16-bit LoRA", "full": "full fine-tuning", "qlora": "4-bit QLoRA"}[mode]
        print(f"== {label}, 1b shape, batch {o.batch} x {o.seq}, {o.gpu} "
              f"(bf16 {GPUS[o.gpu]['tc'] / 1e12:.0f} TFLOP/s, {GPUS[o.gpu]['bw'] / 1e12:.2f} TB/s)")
        print(f"{'design':46s} {'step ms':>8s} {'tokens/s':>9s} {'MFU':>6s} {'x torch':>8s}"
              f" {'elementwise GB':>15s}")
        print(f"{'PyTorch + peft (predicted)':46s} {torch['step_s'] * 1e3:8.1f} "
              f"{torch['tokens_per_s']:9.0f} {torch['mfu']:6.1%} {1:8.2f} "
              f"{torch['elementwise_gb']:15.1f}")
        for name, p in rows:
            print(f"{name:46s} {p['step_s'] * 1e3:8.1f} {p['tokens_per_s']:9.0f} {p['mfu']:6.1%} "
                  f"{p['tokens_per_s'] / torch['tokens_per_s']:8.2f} {p['elementwise_gb']:15.1f}")
        if o.kernels:
            for name, p in (rows[0], rows[-1], ("PyTorch + peft", torch)):
                print(f"  -- kernels, {name}")
                for kn, (launches, fl, nb, t) in sorted(p["step"].kernels.items(),
                                                         key=lambda kv: -kv[1][3]):
                    print(f"  {kn:40s} {t * 1e3:8.2f} ms {launches:6d} launches "
                          f"{fl / 1e12:8.2f} TFLOP {nb / 1e9:8.1f} GB")
                print(f"  {'host-device syncs':40s} "
                      f"{p['step'].design['syncs'] * SYNC_S * 1e3:8.2f} ms")
        print()
    if o.json:
        print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
