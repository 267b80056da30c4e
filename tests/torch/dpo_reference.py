#!/usr/bin/python3
"""dpo_reference.py - alallo's DPO loss and gradients against PyTorch.

Reads the policy and the reference model folders, the pairs and beta that
`alallo train --dump-dpo` was given, and its dump; recomputes in float64 with
reference.py's decoder: each sequence's log-probability (the answer's tokens
only), the DPO loss mean(-log sigmoid(beta * ((pc - rc) - (pr - rr)))), and
its gradient for every tensor of the policy; compares.

usage: dpo_reference.py POLICY_DIR REF_DIR DUMP.safetensors BETA PAIRS
Exit status: 0 all within tolerance, 1 a mismatch, 2 torch or numpy missing.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
    from reference import checker, forward, read_safetensors
except ImportError as e:  # the test must fail loudly, never skip
    print(f"dpo_reference.py: {e}: install Debian's python3-torch and python3-numpy",
          file=sys.stderr)
    sys.exit(2)


def parse_pairs(s):
    pairs = []
    for p in s.split(";"):
        prompt, chosen, rejected = ([int(x) for x in part.split(",")] for part in p.split("/"))
        pairs.append((prompt, chosen, rejected))
    return pairs


def seq_logp(cfg, params, prompt, answer):
    ids = torch.tensor(prompt + answer)
    logits = forward(cfg, params, ids)
    logp = torch.log_softmax(logits[:-1], dim=-1)
    tgt = ids[1:]
    per_tok = logp.gather(1, tgt.unsqueeze(1)).squeeze(1)
    return per_tok[len(prompt) - 1:].sum()  # the answer's tokens only


def main():
    if len(sys.argv) != 6:
        print(__doc__, file=sys.stderr)
        return 2
    pol_dir, ref_dir, dump_path, beta_s, pairs_s = sys.argv[1:]
    beta = float(beta_s)
    cfg = json.load(open(f"{pol_dir}/config.json"))
    rcfg = json.load(open(f"{ref_dir}/config.json"))
    params = read_safetensors(f"{pol_dir}/model.safetensors")
    rparams = read_safetensors(f"{ref_dir}/model.safetensors")
    for t in params.values():
        t.requires_grad_(True)
    pairs = parse_pairs(pairs_s)
    logps, refs, losses = [], [], []
    for prompt, chosen, rejected in pairs:
        pc = seq_logp(cfg, params, prompt, chosen)
        pr = seq_logp(cfg, params, prompt, rejected)
        with torch.no_grad():
            rc = seq_logp(rcfg, rparams, prompt, chosen)
            rr = seq_logp(rcfg, rparams, prompt, rejected)
        z = beta * ((pc - rc) - (pr - rr))
        losses.append(-torch.nn.functional.logsigmoid(z))
        logps += [pc, pr]
        refs += [rc, rr]
    loss = torch.stack(losses).mean()
    loss.backward()
    dump = read_safetensors(dump_path)
    failures = []
    check = checker(failures)

    check("loss", dump["loss"].reshape(()), loss.detach(), 1e-5)
    check("logp", dump["logp"], torch.stack(logps).detach(), 1e-5)
    check("ref_logp", dump["ref_logp"], torch.stack(refs), 1e-5)
    for name, t in params.items():
        check("grad " + name, dump["grad." + name], t.grad, 1e-4)
    if failures:
        print(f"dpo_reference.py: {len(failures)} mismatches: {', '.join(failures[:5])}",
              file=sys.stderr)
        return 1
    print(f"dpo_reference.py: alallo's DPO matches PyTorch {torch.__version__} (float64) on "
          f"{len(pairs)} pairs and {len(params)} tensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
