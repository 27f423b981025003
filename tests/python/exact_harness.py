"""Training in deepool against PyTorch's own eager training of the same nn.Module
(exact_training_test.py; issue 41, point 8).

Both sides start from the weights `deepool import --weights` wrote and read the same batches:
a CIFAR-10 binary file or a token file that deepool-train reads with --data, and that this module
reads the way worker/runtime/data/ does (docs/runtime.md, "Data sets"):
- cifar10: row r of iteration i is record (i mod N * (B mod N) + r) mod N (data.cc, RecordIndex),
  its bytes / 255 less CIFAR's mean, over its standard deviation, in float32;
- tokens: row r of iteration i is the window of T + 1 tokens starting at
  UniformBelow(mt19937_64(SeedMix(SeedMix(seed, i), r)), N - T) (token_file.cc, seed_mix.h),
  inputs its first T ids and labels its last T.
deepool's checkpoint (--checkpoint) is then compared with the module's state_dict after the same
steps of torch.optim, every parameter and buffer."""
import json
import math
import os
import subprocess

import numpy as np
import torch
import torch.nn.functional as F

from importer_harness import DEEPOOL

DEEPOOL_TRAIN = os.path.join(os.path.dirname(DEEPOOL), "deepool-train")

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)
CIFAR_RECORD = 1 + 3 * 32 * 32

MASK64 = (1 << 64) - 1

# The GPT form's attention keys: deepool's (nn.MultiheadAttention's) and the module's own
# (docs/models.md, "Transformers").
ATTENTION_RENAMES = {"in_proj_weight": "c_attn.weight", "in_proj_bias": "c_attn.bias",
                     "out_proj.weight": "c_proj.weight", "out_proj.bias": "c_proj.bias"}


# --- the data sets, as deepool reads them --------------------------------------------------------

def write_cifar(path, records, seed):
    """A CIFAR-10 binary batch of random images and labels (label byte, then R, G, B planes)."""
    generator = np.random.default_rng(seed)
    data = generator.integers(0, 256, size=(records, CIFAR_RECORD), dtype=np.uint8)
    data[:, 0] = generator.integers(0, 10, size=records, dtype=np.uint8)
    data.tofile(path)


def cifar_batches(path, global_batch, iterations):
    """[(inputs [B, 3, 32, 32] float32, labels [B] int64)] for iterations 0..iterations-1."""
    data = np.fromfile(path, dtype=np.uint8).reshape(-1, CIFAR_RECORD)
    records = data.shape[0]
    mean = torch.tensor(CIFAR_MEAN, dtype=torch.float32).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR_STD, dtype=torch.float32).view(1, 3, 1, 1)
    batches = []
    for i in range(iterations):
        rows = [(i % records * (global_batch % records) + r) % records
                for r in range(global_batch)]
        images = torch.from_numpy(data[rows, 1:].copy()).view(-1, 3, 32, 32)
        labels = torch.from_numpy(data[rows, 0].astype(np.int64))
        batches.append(((images.to(torch.float32) / 255.0 - mean) / std, labels))
    return batches


def _mix(x):
    """SplitMix64's finaliser (seed_mix.h, Mix)."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def _seed_mix(a, b):
    return _mix(_mix(a) ^ b)


def _mt19937_64_outputs(seed):
    """Every output of std::mt19937_64(seed), in order (a generator; for rejected draws)."""
    n, m = 312, 156
    state = [seed & MASK64]
    for i in range(1, n):
        previous = state[-1]
        state.append((6364136223846793005 * (previous ^ (previous >> 62)) + i) & MASK64)
    upper, lower = MASK64 ^ ((1 << 31) - 1), (1 << 31) - 1
    while True:
        for i in range(n):
            x = (state[i] & upper) | (state[(i + 1) % n] & lower)
            state[i] = state[(i + m) % n] ^ (x >> 1) ^ (0xB5026F5AA96619E9 if x & 1 else 0)
        for y in state:
            y ^= (y >> 29) & 0x5555555555555555
            y ^= (y << 17) & 0x71D67FFFEDA60000
            y ^= (y << 37) & 0xFFF7EEE000000000
            yield y ^ (y >> 43)


def _uniform_below(seed, bound):
    """seed_mix.h's UniformBelow on a fresh mt19937_64(seed): draws below 2^64 mod bound are
    rejected."""
    limit = (1 << 64) % bound
    for draw in _mt19937_64_outputs(seed):
        if draw >= limit:
            return draw % bound
    raise AssertionError("unreachable")


def write_tokens(path, count, vocabulary, seed):
    """A flat file of little-endian uint16 token ids below `vocabulary`."""
    generator = np.random.default_rng(seed)
    generator.integers(0, vocabulary, size=count).astype("<u2").tofile(path)


def token_batches(path, length, global_batch, iterations, seed=0):
    """[(inputs [B, T] int64, labels [B, T] int64)] for iterations 0..iterations-1."""
    tokens = np.fromfile(path, dtype="<u2").astype(np.int64)
    batches = []
    for i in range(iterations):
        starts = [_uniform_below(_seed_mix(_seed_mix(seed, i), r), len(tokens) - length)
                  for r in range(global_batch)]
        windows = torch.from_numpy(np.stack([tokens[s:s + length + 1] for s in starts]))
        batches.append((windows[:, :length].contiguous(), windows[:, 1:].contiguous()))
    return batches


# --- PyTorch's own training ----------------------------------------------------------------------

def make_optimizer(recipe, module):
    """torch.optim's optimizer for a recipe: {"optimizer": "sgd"|"adamw", "lr", "momentum",
    "weight_decay", "decay_1d" (False: parameters of at most one dimension in a second param
    group without weight decay, as nanoGPT writes it)}."""
    decayed = [p for p in module.parameters() if recipe.get("decay_1d", True) or p.dim() >= 2]
    undecayed = [p for p in module.parameters() if not recipe.get("decay_1d", True) and p.dim() < 2]
    groups = [{"params": decayed}] + ([{"params": undecayed, "weight_decay": 0.0}]
                                       if undecayed else [])
    if recipe["optimizer"] == "sgd":
        return torch.optim.SGD(groups, lr=recipe["lr"], momentum=recipe["momentum"],
                               weight_decay=recipe["weight_decay"])
    return torch.optim.AdamW(groups, lr=recipe["lr"], weight_decay=recipe["weight_decay"])


def lr_factor(recipe, steps):
    """The schedule of docs/runtime.md ("Training recipes") as a LambdaLR factor: linear warm-up
    over recipe["warmup"] iterations, then recipe["schedule"] (constant, linear or cosine) down to
    recipe["min_lr"] at the last of `steps` iterations."""
    warmup, kind = recipe.get("warmup", 0), recipe.get("schedule", "constant")
    floor = recipe.get("min_lr", 0.0) / recipe["lr"]

    def factor(i):
        if i < warmup:
            return i / warmup
        if kind == "constant":
            return 1.0
        p = min(1.0, (i - warmup) / max(1, steps - warmup))
        if kind == "linear":
            return floor + (1 - floor) * (1 - p)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p))
    return factor


def eager_training(module, batches, recipe):
    """Trains `module` in training mode one optimizer step per batch with the mean cross entropy
    (over samples, or over every token for [B, T, V] logits), the recipe's schedule and, with
    recipe["clip"], clip_grad_norm_; returns its state_dict and the gradient norms before
    clipping."""
    module.train()
    optimizer = make_optimizer(recipe, module)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(recipe, len(batches)))
    norms = []
    for inputs, labels in batches:
        optimizer.zero_grad()
        logits = module(inputs)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1))
        loss.backward()
        if recipe.get("clip"):
            norms.append(torch.nn.utils.clip_grad_norm_(module.parameters(), recipe["clip"]))
        optimizer.step()
        scheduler.step()
    state = {key: value.detach().clone() for key, value in module.state_dict().items()}
    return state, norms


# --- deepool's training --------------------------------------------------------------------------

def deepool_train(graph, init, data, global_batch, iterations, recipe, checkpoint, ranks=None,
                  plan=None):
    """Runs deepool-train; returns the CompletedProcess."""
    command = [DEEPOOL_TRAIN, "--graph", graph, "--init", init, "--data", data,
               "--global-batch", str(global_batch), "--iterations", str(iterations),
               "--optimizer", recipe["optimizer"], "--lr", str(recipe["lr"]),
               "--weight-decay", str(recipe["weight_decay"]), "--checkpoint", checkpoint]
    if recipe["optimizer"] == "sgd":
        command += ["--momentum", str(recipe["momentum"])]
    if not recipe.get("decay_1d", True):
        command += ["--no-decay-1d"]
    if "schedule" in recipe:
        command += ["--lr-schedule", recipe["schedule"], "--warmup-iterations",
                    str(recipe.get("warmup", 0)), "--min-lr", str(recipe.get("min_lr", 0.0))]
    if recipe.get("clip"):
        command += ["--clip-grad-norm", str(recipe["clip"])]
    if ranks is not None:
        command += ["--ranks", str(ranks)]
    if plan is not None:
        command += ["--plan", plan]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def planner_plan(graph, global_batch, devices, path, *flags):
    """`deepool plan --json` written to `path`; returns the plan."""
    text = subprocess.check_output([DEEPOOL, "plan", "--graph", graph, "--global-batch",
                                    str(global_batch), "--gpus", str(devices), "--json", *flags])
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.decode())
    return json.loads(text)


def uneven_plan(graph, path, first=((0, 1, 2), (1, 2, 3))):
    """A hand-made plan over 3 ranks at a global batch of 6: the first third of the layers on
    `first`'s ranks with its shares (by default ranks 0-2 with 1, 2, 3), the middle third on
    ranks 1 and 2 with shares 4 and 2, the rest on rank 2 alone; written to `path`."""
    with open(graph, encoding="utf-8") as f:
        names = [layer["name"] for layer in json.load(f)["layers"]]
    third = max(1, len(names) // 3)
    layers = []
    for i, name in enumerate(names):
        if i < third:
            layers.append({"layer": name, "devices": list(first[0]), "samples": list(first[1])})
        elif i < 2 * third:
            layers.append({"layer": name, "devices": [1, 2], "samples": [4, 2]})
        else:
            layers.append({"layer": name, "devices": [2], "samples": [6]})
    plan = {"format": "deepool.plan", "version": 1, "model": "uneven", "global_batch": 6,
            "num_devices": 3, "layers": layers}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(plan, f)
    return plan


# --- comparing -----------------------------------------------------------------------------------

def module_keys(state):
    """deepool's state_dict keys renamed to the module's (the GPT form's attention)."""
    renamed = {}
    for key, value in state.items():
        for ours, theirs in ATTENTION_RENAMES.items():
            if key.endswith(".attn." + ours):
                key = key[: -len(ours)] + theirs
                break
        renamed[key] = value
    return renamed


def layer_scales(state):
    """The largest |entry| over each layer's floating tensors (the key less its last part), the
    scale its tensors' differences are measured against: a bias or running mean that starts at
    zero is judged at its layer's scale rather than against its own few steps of movement."""
    scales = {}
    for key, value in state.items():
        if value.is_floating_point() and value.numel() > 0:
            layer = key.rsplit(".", 1)[0]
            scales[layer] = max(scales.get(layer, 0.0), value.abs().max().item())
    return scales


def differences(expected, actual, tolerance):
    """Where `actual` (deepool's) is not within `tolerance` of `expected` (PyTorch's), key by key:
    integer buffers exactly, floating tensors by max |a - e| over the layer's scale
    (layer_scales); [] when they agree."""
    problems = []
    scales = layer_scales(expected)
    for key in sorted(set(expected) | set(actual)):
        if key not in actual:
            problems.append(f"{key}: missing from deepool's checkpoint")
            continue
        if key not in expected:
            problems.append(f"{key}: not in the module's state_dict")
            continue
        e, a = expected[key], actual[key]
        if e.shape != a.shape:
            problems.append(f"{key}: shape {tuple(a.shape)}, expected {tuple(e.shape)}")
        elif not e.is_floating_point():
            if not torch.equal(e, a.to(e.dtype)):
                problems.append(f"{key}: {a.tolist()}, expected {e.tolist()}")
        else:
            relative = relative_difference(e, a, scales[key.rsplit(".", 1)[0]])
            if relative > tolerance:
                problems.append(f"{key}: {relative:.3g} relative")
    return problems


def relative_difference(expected, actual, scale):
    """max |actual - expected| / scale (0 for a zero scale and equal tensors)."""
    worst = (actual.double() - expected.double()).abs().max().item() if expected.numel() else 0.0
    return worst / scale if scale > 0 else worst


def largest_difference(expected, actual):
    """The largest relative difference over the floating tensors both hold."""
    scales = layer_scales(expected)
    return max((relative_difference(e, actual[key], scales[key.rsplit(".", 1)[0]])
                for key, e in expected.items()
                if key in actual and e.is_floating_point() and e.numel()), default=0.0)


def read_checkpoint(path):
    """deepool-train's --checkpoint PATH: PATH when one rank held every layer, else the union of
    the ranks' PATH.rank<R> files, each holding its layers (docs/runtime.md). A tensor that
    several ranks hold must be the same on each (their gradients were all-reduced); returns the
    state_dict and the keys whose copies differ."""
    if os.path.exists(path):
        return torch.load(path), []
    state, disagreeing = {}, []
    rank = 0
    while os.path.exists(f"{path}.rank{rank}"):
        for key, value in torch.load(f"{path}.rank{rank}").items():
            if key in state and not torch.equal(state[key], value):
                disagreeing.append(f"{key} (rank {rank})")
            state.setdefault(key, value)
        rank += 1
    if rank == 0:
        raise FileNotFoundError(f"{path}: no checkpoint, nor {path}.rank0")
    return state, disagreeing
