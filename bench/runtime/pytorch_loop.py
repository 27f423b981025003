#!/usr/bin/env python3
"""The one-device baseline a PyTorch user would run beside deepool-train: a plain eager loop.

Trains one model on one device with deepool-train's settings and prints one JSON line (issue 41
point 10, issue 43 point 6):

  .venv/bin/python bench/runtime/pytorch_loop.py --model resnet50 --device cuda --batch 32
      [--precision fp32|tf32|bf16] [--seq-len T] [--iterations 40] [--warmup 10]
      [--optimizer sgd|adamw] [--lr L] [--momentum M] [--weight-decay W]
      [--num-classes 1000] [--image-size N] [--peak-tflops P]

Models: any torchvision classification model by name (resnet50, vit_b_16, inception_v3 with its
auxiliary classifier weighted 0.4, as deepool's zoo), vit_tiny (torchvision's VisionTransformer
at the zoo's vit_tiny sizes, 32x32), and gpt2 / gpt_tiny (gpt2_small.py beside this script: the
zoo's GPT-2 small with lm_head tied to wte, and its untied tiny form; --seq-len defaults to the
context, 1,024 and 64).

As deepool-train: random weights (seed 1); a synthetic batch of the model's input shape (images
N(0, 1) float32 with int64 labels below --num-classes; GPT int64 token ids and next-token labels
below the vocabulary) held in pinned host memory on CUDA and copied to the device every
iteration, as a DataLoader with pin_memory does; the mean cross entropy. Precision as deepool's
(docs/runtime.md, "Precision"; default bf16 on cuda, fp32 on cpu): fp32 forbids TF32, tf32
allows it in cuBLAS and cuDNN, bf16 runs the forward and the loss under torch.autocast(bf16)
with fp32 weights, gradients and optimizer state (TF32 allowed, as deepool's math mode). The
optimizer takes deepool-train's defaults: lr 0.01; SGD momentum 0 and weight decay 0; AdamW
betas (0.9, 0.999), eps 1e-8, weight decay 0.01 (torch's).

Output: median_iteration_ms over the iterations after --warmup (each ends with
torch.cuda.synchronize on CUDA, as deepool-train's end when the device has finished),
samples_per_s, tokens_per_s (GPT), peak_memory_bytes (torch.cuda.max_memory_allocated on CUDA,
the process's VmHWM on CPU: what deepool-train's iteration events report), and for GPT
flops_per_iteration = 6 x parameters x tokens (the tied matrix counted once; attention's own
FLOPs left out) and, with --peak-tflops, mfu = those FLOPs / (ms x peak). An unknown model is an
error (exit code 1) naming the ones known. scripts/gpu-node-test.sh puts it beside deepool-train
on a GPU node.
"""
import argparse
import contextlib
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_small  # noqa: E402

GPTS = {"gpt2": gpt2_small.build_gpt2, "gpt_tiny": gpt2_small.build_gpt_tiny}
VIT_TINY = {"image_size": 32, "patch_size": 8, "num_layers": 2, "num_heads": 2, "hidden_dim": 32,
            "mlp_dim": 64}
DEFAULT_LR = 0.01
ADAMW_WEIGHT_DECAY = 0.01


class Workload:
    """A model with its synthetic batch and loss: `inputs`, `labels` on the host; `loss(out, y)`;
    `tokens` per sample (GPT) or None."""

    def __init__(self, module, inputs, labels, loss, tokens=None):
        self.module, self.inputs, self.labels, self.loss, self.tokens = (module, inputs, labels,
                                                                         loss, tokens)


def mean_cross_entropy(out, labels):
    return F.cross_entropy(out.float().reshape(-1, out.size(-1)), labels.reshape(-1))


def inception_loss(out, labels):
    return (F.cross_entropy(out.logits.float(), labels)
            + 0.4 * F.cross_entropy(out.aux_logits.float(), labels))


def torchvision_models():
    try:
        import torchvision
    except ImportError:
        return None
    return torchvision.models


def known_models():
    models = torchvision_models()
    names = sorted(GPTS) + ["vit_tiny"]
    if models is None:
        names.append("torchvision's models (torchvision is not installed for this Python)")
    else:
        names.append("torchvision's: " + ", ".join(sorted(models.list_models(module=models))))
    return names


def make_workload(args):
    """The Workload for args.model, or None when there is no such model."""
    generator = torch.Generator().manual_seed(2)
    torch.manual_seed(1)
    if args.model in GPTS:
        module = GPTS[args.model]()
        context = module.transformer.wpe.num_embeddings
        vocab = module.transformer.wte.num_embeddings
        length = args.seq_len or context
        if length > context:
            raise ValueError(f"--seq-len {length} is longer than {args.model}'s context {context}")
        window = torch.randint(0, vocab, (args.batch, length + 1), generator=generator)
        return Workload(module, window[:, :-1].contiguous(), window[:, 1:].contiguous(),
                        mean_cross_entropy, tokens=length)
    models = torchvision_models()
    if args.model == "vit_tiny" and models is not None:
        from torchvision.models.vision_transformer import VisionTransformer

        module, size = VisionTransformer(num_classes=args.num_classes, **VIT_TINY), 32
    elif models is not None and args.model in models.list_models(module=models):
        kwargs = {"num_classes": args.num_classes}
        inception = args.model == "inception_v3"
        if inception:
            kwargs.update(aux_logits=True, init_weights=False)
        module = models.get_model(args.model, **kwargs)
        size = args.image_size or (299 if inception else 224)
    else:
        return None
    inputs = torch.randn(args.batch, 3, size, size, generator=generator)
    labels = torch.randint(0, args.num_classes, (args.batch,), generator=generator)
    loss = inception_loss if args.model == "inception_v3" else mean_cross_entropy
    return Workload(module, inputs, labels, loss)


def make_optimizer(args, module):
    lr = DEFAULT_LR if args.lr is None else args.lr
    if args.optimizer == "sgd":
        return torch.optim.SGD(module.parameters(), lr=lr, momentum=args.momentum or 0.0,
                               weight_decay=args.weight_decay or 0.0)
    decay = ADAMW_WEIGHT_DECAY if args.weight_decay is None else args.weight_decay
    return torch.optim.AdamW(module.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8,
                             weight_decay=decay)


def set_math_mode(precision):
    """deepool's SetMathMode: TF32 forbidden at fp32, allowed at tf32 and bf16."""
    allow = precision != "fp32"
    torch.backends.cuda.matmul.allow_tf32 = allow
    torch.backends.cudnn.allow_tf32 = allow


def peak_memory_bytes(device):
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def train(args, workload, device):
    """The iterations' wall times in ms."""
    module = workload.module.to(device).train()
    optimizer = make_optimizer(args, module)
    inputs, labels = workload.inputs, workload.labels
    if device.type == "cuda":
        inputs, labels = inputs.pin_memory(), labels.pin_memory()
        torch.cuda.reset_peak_memory_stats(device)
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if args.precision == "bf16"
                else contextlib.nullcontext())
    times = []
    for _ in range(args.iterations):
        begin = time.perf_counter()
        x = inputs.to(device, non_blocking=True)
        y = labels.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            loss = workload.loss(module(x), y)
        loss.backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(1000 * (time.perf_counter() - begin))
    return times


def report(args, workload, device, times):
    median = statistics.median(times[args.warmup:])
    result = {"model": args.model, "device": str(device), "precision": args.precision,
              "optimizer": args.optimizer, "batch": args.batch, "iterations": args.iterations,
              "warmup": args.warmup, "torch": torch.__version__, "median_iteration_ms": median,
              "samples_per_s": args.batch * 1000 / median,
              "peak_memory_bytes": peak_memory_bytes(device)}
    parameters = sum(p.numel() for p in workload.module.parameters())  # a tie counted once
    result["parameters"] = parameters
    if workload.tokens is not None:
        tokens = args.batch * workload.tokens
        result.update(seq_len=workload.tokens, tokens_per_s=tokens * 1000 / median,
                      flops_per_iteration=6 * parameters * tokens)
        if args.peak_tflops:
            result["mfu"] = result["flops_per_iteration"] / (median / 1000 * args.peak_tflops
                                                             * 1e12)
    result["iteration_ms"] = times
    return result


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True,
                        help="resnet50, vit_b_16, gpt2, vit_tiny, gpt_tiny or a torchvision name")
    parser.add_argument("--device", default="cuda", help="cpu, cuda or cuda:K (default cuda)")
    parser.add_argument("--precision", choices=["fp32", "tf32", "bf16"],
                        help="default bf16 on cuda, fp32 on cpu (deepool-train's)")
    parser.add_argument("--batch", type=int, default=32, help="samples per iteration")
    parser.add_argument("--seq-len", type=int, default=0, help="GPT: tokens per sample "
                        "(default the context: 1024 for gpt2)")
    parser.add_argument("--iterations", type=int, default=40, help="iterations in all")
    parser.add_argument("--warmup", type=int, default=10, help="first iterations not counted")
    parser.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    parser.add_argument("--lr", type=float, help=f"default {DEFAULT_LR}")
    parser.add_argument("--momentum", type=float, help="SGD momentum (default 0)")
    parser.add_argument("--weight-decay", type=float,
                        help=f"default 0 (sgd), {ADAMW_WEIGHT_DECAY} (adamw)")
    parser.add_argument("--num-classes", type=int, default=1000, help="image models' classes")
    parser.add_argument("--image-size", type=int, default=0,
                        help="torchvision models: input side (default 299 for inception_v3, "
                        "else 224)")
    parser.add_argument("--peak-tflops", type=float, default=0.0,
                        help="the device's peak TFLOP/s at this precision, for mfu")
    args = parser.parse_args(argv)
    if args.batch < 1 or args.warmup < 0 or args.iterations <= args.warmup or args.seq_len < 0:
        parser.error("need --batch >= 1, --iterations > --warmup >= 0 and --seq-len >= 0")
    if args.optimizer == "adamw" and args.momentum:
        parser.error("--momentum is SGD's")
    args.precision = args.precision or ("bf16" if args.device.startswith("cuda") else "fp32")
    return args


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("pytorch_loop: --device cuda, but torch sees no usable GPU")
    try:
        workload = make_workload(args)
    except ValueError as e:
        sys.exit(f"pytorch_loop: {e}")
    if workload is None:
        sys.exit(f"pytorch_loop: unknown model {args.model!r}; known: "
                 + "; ".join(known_models()))
    set_math_mode(args.precision)
    times = train(args, workload, device)
    print(json.dumps(report(args, workload, device, times)))


if __name__ == "__main__":
    main()
