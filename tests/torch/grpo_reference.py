#!/usr/bin/python3
"""grpo_reference.py - alallo's GRPO loss and gradients against PyTorch.

Reads the model folder, the samples, rewards, old-policy shifts, group size
and beta that `alallo train --dump-grpo` was given, and its dump; computes
in float64, with reference.py's decoder, the objective of GRPO (Shao et
al. 2024, "DeepSeekMath", eq. 3, outcome supervision) as docs/rft.md
states it:

  A_i   = (r_i - mean(r_group)) / (std(r_group) + 1e-4), std over the
          group (population); 0 for a group whose rewards are all alike
  rho   = pi(o_t) / pi_old(o_t)
  kl_t  = pi_ref(o_t) / pi(o_t) - log(pi_ref(o_t) / pi(o_t)) - 1
  loss  = mean_i  mean_t [ -min(rho A_i, clip(rho, 1 - 0.2, 1 + 0.2) A_i)
                           + beta kl_t ]

with autograd for every gradient (each tensor in full fine-tuning, each
adapter's A and B with LoRA, the base frozen). pi_old's log-probabilities
are this script's own plus the given shifts (the k-th answer token of the
batch taking the k-th shift, cycled); the reference is the base without
the adapters (LoRA) or REF_DIR's model (full fine-tuning). The inputs must
exercise every branch: tokens above and below the clip's range with
advantages of both signs, tokens inside it, and a group whose rewards are
alike; else it fails, so the check cannot quietly lose its power.

usage: grpo_reference.py MODEL_DIR DUMP.safetensors BETA GROUP REWARDS SHIFTS SAMPLES [REF_DIR]
Exit status: 0 all within tolerance, 1 a mismatch, 2 torch or numpy missing.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
    from reference import checker, forward, make_trained, read_safetensors
except ImportError as e:  # the test must fail loudly, never skip
    print(f"grpo_reference.py: {e}: install Debian's python3-torch and python3-numpy",
          file=sys.stderr)
    sys.exit(2)

EPS = 0.2  # the clip's half-width (GRPO_CLIP)


def parse_samples(s):
    out = []
    for part in s.split(";"):
        prompt, answer = ([int(x) for x in p.split(",")] for p in part.split("/"))
        out.append((prompt, answer))
    return out


def answer_logps(cfg, params, prompt, answer):
    """log pi(o_t | prompt, o_<t) for each of the answer's tokens."""
    ids = torch.tensor(prompt + answer)
    logp = torch.log_softmax(forward(cfg, params, ids)[:-1], dim=-1)
    per_tok = logp.gather(1, ids[1:].unsqueeze(1)).squeeze(1)
    return per_tok[len(prompt) - 1:]


def advantages(rewards, group):
    r = torch.tensor(rewards, dtype=torch.float64).reshape(-1, group)
    mean = r.mean(dim=1, keepdim=True)
    std = r.std(dim=1, unbiased=False, keepdim=True)
    adv = torch.where(std > 1e-9, (r - mean) / (std + 1e-4), torch.zeros_like(r))
    return adv.reshape(-1)


def main():
    if len(sys.argv) not in (8, 9):
        print(__doc__, file=sys.stderr)
        return 2
    model_dir, dump_path, beta_s, group_s, rewards_s, shifts_s, samples_s = sys.argv[1:8]
    ref_dir = sys.argv[8] if len(sys.argv) == 9 else None
    beta, group = float(beta_s), int(group_s)
    rewards = [float(x) for x in rewards_s.split(",")]
    shifts = [float(x) for x in shifts_s.split(",")]
    samples = parse_samples(samples_s)
    cfg = json.load(open(f"{model_dir}/config.json"))
    params = read_safetensors(f"{model_dir}/model.safetensors")
    dump = read_safetensors(dump_path)
    lora = "lora_scale" in dump
    if ref_dir:
        rcfg, rparams = json.load(open(f"{ref_dir}/config.json")), \
            read_safetensors(f"{ref_dir}/model.safetensors")
    else:
        rcfg, rparams = cfg, dict(params)  # the base, before the adapters join it
    trained = make_trained(params, dump, lora, lambda t: t.clone())

    adv = advantages(rewards, group)
    per_sample, logps, olds, refs, kls = [], [], [], [], []
    k = 0
    seen = set()
    clipped = 0
    for i, (prompt, answer) in enumerate(samples):
        logp = answer_logps(cfg, params, prompt, answer)
        n = logp.shape[0]
        shift = torch.tensor([shifts[(k + j) % len(shifts)] for j in range(n)],
                             dtype=torch.float64)
        k += n
        old = logp.detach() + shift
        ratio = torch.exp(logp - old)
        a = float(adv[i])
        surrogate = torch.min(ratio * a, torch.clamp(ratio, 1 - EPS, 1 + EPS) * a)
        term = -surrogate
        if beta > 0:
            with torch.no_grad():
                ref = answer_logps(rcfg, rparams, prompt, answer)
            x = ref - logp  # log(pi_ref / pi)
            kl = torch.exp(x) - x - 1
            term = term + beta * kl
            refs.append(ref)
            kls.append(kl.detach())
        per_sample.append(term.mean())
        logps.append(logp.detach())
        olds.append(old)
        for rv in ratio.detach().tolist():
            side = "above" if rv > 1 + EPS else "below" if rv < 1 - EPS else "inside"
            sign = "+" if a > 0 else "-" if a < 0 else "0"
            seen.add((side, sign))
            clipped += int((a >= 0 and rv > 1 + EPS) or (a < 0 and rv < 1 - EPS))
    loss = torch.stack(per_sample).mean()
    loss.backward()

    want = {(side, sign) for side in ("above", "below", "inside") for sign in "+-"}
    missing = sorted(want - seen) + ([] if any(s[1] == "0" for s in seen)
                                     else ["a group of equal rewards"])
    if missing:
        print(f"grpo_reference.py: the inputs do not exercise every branch of the objective: "
              f"missing {missing}", file=sys.stderr)
        return 1

    failures = []
    check = checker(failures)

    n_tok = sum(t.shape[0] for t in logps)
    check("loss", dump["loss"].reshape(()), loss.detach(), 1e-5)
    check("adv", dump["adv"], adv, 1e-5)
    check("logp", dump["logp"], torch.cat(logps), 1e-5)
    check("old_logp", dump["old_logp"], torch.cat(olds), 1e-5)
    check("clipped", dump["clipped"].reshape(()),
          torch.tensor(clipped / n_tok, dtype=torch.float64), 1e-6)
    if beta > 0:
        check("ref_logp", dump["ref_logp"], torch.cat(refs), 1e-5)
        check("kl", dump["kl"].reshape(()), torch.cat(kls).mean(), 1e-5)
    elif "ref_logp" in dump:
        failures.append("ref_logp (dumped with beta 0)")
    for name, t in trained.items():
        grad = t.grad if t.grad is not None else torch.zeros_like(t)
        check("grad " + name, dump["grad." + name], grad, 1e-4)
    if failures:
        print(f"grpo_reference.py: {len(failures)} mismatches: {', '.join(failures[:5])}",
              file=sys.stderr)
        return 1
    print(f"grpo_reference.py: alallo's GRPO matches PyTorch {torch.__version__} (float64) on "
          f"{len(samples)} answers ({n_tok} tokens, {clipped} clipped) and {len(trained)} "
          f"{'adapter ' if lora else ''}tensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
