"""The baseline of bench/data/run.sh: torchvision's ImageFolder through a DataLoader with the
ImageNet training transforms, as users run it. Prints one JSON line like
deepool-bench-image-pipeline's.

    .venv/bin/python bench/data/torchvision_loader.py ROOT [--threads T] [--batch B]
        [--batches N] [--warmup W] [--to-uint8]

--threads is the DataLoader's num_workers (worker processes). --to-uint8 stops the transform at
PILToTensor (uint8, no float conversion or normalisation), the work deepool's source does on the
CPU; without it the transform ends with ToTensor and Normalize, as the ImageNet recipe does."""
import argparse
import json
import time

import torch
from torch.utils.data import DataLoader, RandomSampler
from torchvision import datasets, transforms


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root")
    parser.add_argument("--threads", type=int, default=1, help="DataLoader workers")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--batches", type=int, default=8, help="batches timed")
    parser.add_argument("--warmup", type=int, default=1, help="batches before timing")
    parser.add_argument("--side", type=int, default=224)
    parser.add_argument("--to-uint8", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    steps = [transforms.RandomResizedCrop(args.side), transforms.RandomHorizontalFlip()]
    if args.to_uint8:
        steps.append(transforms.PILToTensor())
    else:
        steps += [transforms.ToTensor(),
                  transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]
    dataset = datasets.ImageFolder(args.root, transforms.Compose(steps))
    # One shuffled "epoch" of exactly the batches used (RandomSampler chains permutations when
    # asked for more samples than the folder has), as shuffle=True samples: a small folder's
    # epoch ends would otherwise stall the workers mid-run, which ImageNet's rarely do.
    images = args.batch * (args.warmup + args.batches)
    loader = DataLoader(dataset, batch_size=args.batch,
                        sampler=RandomSampler(dataset, num_samples=images),
                        num_workers=args.threads, pin_memory=False, persistent_workers=True)
    batches = iter(loader)
    for _ in range(args.warmup):  # also waits for the workers to start
        next(batches)
    # The workers started together, so batches come in rounds of T; with N a multiple of T the
    # span timed is whole rounds, the steady state's rate.
    start = time.perf_counter()
    for _ in range(args.batches):
        next(batches)
    seconds = time.perf_counter() - start
    print(json.dumps({"images_per_s": round(args.batch * args.batches / seconds, 1),
                      "threads": args.threads, "batch": args.batch,
                      "images": args.batch * args.batches, "seconds": round(seconds, 3)}))


if __name__ == "__main__":
    main()
