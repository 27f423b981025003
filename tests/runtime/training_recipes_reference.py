"""Reference values for tests/runtime/training_recipes_test.cc, computed by torch itself.

Run: .venv/bin/python tests/runtime/training_recipes_reference.py
Prints the learning rates torch.optim.lr_scheduler.LambdaLR gives with the schedules of
docs/runtime.md ("Training recipes"), written as a PyTorch user writes them, and the weights
torch.optim.AdamW leaves with nanoGPT's param groups (no weight decay for p.dim() < 2).
"""
import math

import torch


def schedule(kind, warmup, total, min_ratio):
    def factor(i):
        if i < warmup:
            return i / warmup
        if kind == "constant":
            return 1.0
        p = min(1.0, (i - warmup) / max(1, total - warmup))
        if kind == "linear":
            return min_ratio + (1 - min_ratio) * (1 - p)
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * p))
    return factor


def lrs(kind, warmup, total, lr, min_lr, steps):
    w = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([w], lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule(kind, warmup, total, min_lr / lr))
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


for kind, warmup, total, lr, min_lr, steps in [("cosine", 3, 10, 0.5, 0.05, 12),
                                                ("linear", 2, 6, 0.1, 0.0, 7),
                                                ("constant", 4, 10, 0.2, 0.0, 6)]:
    print(kind, warmup, total, lr, min_lr, ", ".join(repr(x) for x in lrs(kind, warmup, total, lr, min_lr, steps)))

torch.manual_seed(0)
weight = torch.tensor([[0.5, -1.0], [2.0, 0.25]], dtype=torch.float64, requires_grad=True)
bias = torch.tensor([1.0, -2.0], dtype=torch.float64, requires_grad=True)
groups = [{"params": [p for p in (weight, bias) if p.dim() >= 2], "weight_decay": 0.2},
          {"params": [p for p in (weight, bias) if p.dim() < 2], "weight_decay": 0.0}]
opt = torch.optim.AdamW(groups, lr=0.1, betas=(0.9, 0.999), eps=1e-8)
for t in range(3):
    opt.zero_grad()
    weight.grad = torch.tensor([[0.1 * (t + 1), -0.2], [0.3, 0.05 * t]], dtype=torch.float64)
    bias.grad = torch.tensor([0.5, -0.1 * (t + 1)], dtype=torch.float64)
    opt.step()
print("adamw weight", [repr(x) for x in weight.detach().flatten().tolist()])
print("adamw bias", [repr(x) for x in bias.detach().flatten().tolist()])
