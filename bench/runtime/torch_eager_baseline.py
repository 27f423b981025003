#!/usr/bin/env python3
"""The one-device baseline a PyTorch user would run: torchvision's model trained eagerly.

Trains MODEL (torchvision's, random weights) on one device with SGD (lr 0.01, momentum 0 unless
--momentum: deepool-train's defaults), on a fixed synthetic batch held in pinned host memory and
copied to the device each iteration (as a DataLoader with pin_memory does), and prints the
median wall time of an iteration after the warm-up, in ms. Each iteration ends when the device has finished it, as
deepool-train's do. inception_v3 keeps its auxiliary classifier (loss weight 0.4, as deepool's
zoo). cuDNN runs with PyTorch's defaults (no autotuning), as deepool's runtime does.

  python3 bench/runtime/torch_eager_baseline.py MODEL BATCH [--device cuda] [--iterations 40]
      [--warmup 10] [--image-size N] [--num-classes 1000] [--momentum 0] [--json]

scripts/gpu-node-test.sh puts it beside deepool-train on a GPU node.
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a torchvision model name, e.g. resnet50")
    parser.add_argument("batch", type=int, help="the batch size")
    parser.add_argument("--device", default="cuda", help="cpu, cuda or cuda:K (default cuda)")
    parser.add_argument("--iterations", type=int, default=40, help="iterations in all")
    parser.add_argument("--warmup", type=int, default=10, help="first iterations not counted")
    parser.add_argument("--image-size", type=int, default=0,
                        help="input height and width (0: 299 for inception_v3, else 224)")
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--momentum", type=float, default=0.0, help="SGD momentum")
    parser.add_argument("--json", action="store_true", help="print a JSON object, not the ms")
    args = parser.parse_args()
    if args.batch < 1 or args.iterations <= args.warmup or args.warmup < 0:
        parser.error("need batch >= 1 and iterations > warmup >= 0")
    try:
        import torchvision
    except ImportError:
        sys.exit("torch_eager_baseline: torchvision is not installed for this Python")

    if not callable(getattr(torchvision.models, args.model, None)):
        sys.exit(f"torch_eager_baseline: torchvision has no model {args.model!r}")
    device = torch.device(args.device)
    inception = args.model == "inception_v3"
    size = args.image_size or (299 if inception else 224)
    kwargs = {"num_classes": args.num_classes}
    if inception:
        kwargs.update(aux_logits=True, init_weights=False)
    torch.manual_seed(1)
    model = getattr(torchvision.models, args.model)(**kwargs).to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=args.momentum)
    inputs = torch.randn(args.batch, 3, size, size)
    labels = torch.randint(0, args.num_classes, (args.batch,))
    if device.type == "cuda":
        inputs, labels = inputs.pin_memory(), labels.pin_memory()

    def finish():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    times = []
    for iteration in range(args.iterations):
        begin = time.perf_counter()
        x = inputs.to(device, non_blocking=True)
        y = labels.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        out = model(x)
        if inception:
            loss = F.cross_entropy(out.logits, y) + 0.4 * F.cross_entropy(out.aux_logits, y)
        else:
            loss = F.cross_entropy(out, y)
        loss.backward()
        optimizer.step()
        finish()
        if iteration >= args.warmup:
            times.append(1000 * (time.perf_counter() - begin))
    median = statistics.median(times)
    if args.json:
        print(json.dumps({"model": args.model, "batch": args.batch, "device": str(device),
                          "torch": torch.__version__, "median_iteration_ms": median,
                          "iteration_ms": times}))
    else:
        print(f"{median:.2f}")


if __name__ == "__main__":
    main()
