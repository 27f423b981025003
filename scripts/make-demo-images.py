#!/usr/bin/env python3
"""Writes a small learnable image data set in the ImageFolder layout, generated, not downloaded.

    .venv/bin/python scripts/make-demo-images.py OUT [--per-class 150] [--val-per-class 50]
                                                  [--size 64] [--seed 0]

OUT/train/<class>/<n>.jpg and OUT/val/<class>/<n>.jpg (some as .png), four classes of texture
that survive random crops and flips: horizontal stripes, vertical stripes, diagonal stripes and
a checkerboard, each with a random period, phase, pair of colours and pixel noise. A small CNN
separates them (docs/models.md, "Image folders"). Needs Pillow (in the project's .venv)."""
import argparse
import os
import random
import sys

from PIL import Image

CLASSES = ("checkerboard", "diagonal", "horizontal", "vertical")


def texture(kind, x, y, period, phase):
    if kind == "horizontal":
        t = y
    elif kind == "vertical":
        t = x
    elif kind == "diagonal":
        t = x + y
    else:
        return ((x + phase) // period + (y + phase) // period) % 2
    return ((t + phase) // period) % 2


def draw(kind, size, rng):
    period = rng.randint(3, 8)
    phase = rng.randint(0, 2 * period)
    colours = [tuple(rng.randint(0, 255) for _ in range(3)) for _ in range(2)]
    while sum(abs(a - b) for a, b in zip(*colours)) < 150:  # keep the texture visible
        colours[1] = tuple(rng.randint(0, 255) for _ in range(3))
    image = Image.new("RGB", (size, size))
    pixels = image.load()
    for y in range(size):
        for x in range(size):
            base = colours[texture(kind, x, y, period, phase)]
            pixels[x, y] = tuple(min(255, max(0, c + rng.randint(-20, 20))) for c in base)
    return image


def write(root, count, size, rng):
    for kind in CLASSES:
        folder = os.path.join(root, kind)
        os.makedirs(folder, exist_ok=True)
        for n in range(count):
            image = draw(kind, size, rng)
            if n % 10 == 9:
                image.save(os.path.join(folder, f"{n:05d}.png"))
            else:
                image.save(os.path.join(folder, f"{n:05d}.jpg"), quality=rng.randint(70, 95))


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="folder to write train/ and val/ into")
    parser.add_argument("--per-class", type=int, default=150, help="training images per class")
    parser.add_argument("--val-per-class", type=int, default=50,
                        help="validation images per class")
    parser.add_argument("--size", type=int, default=64, help="image side in pixels")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.per_class < 1 or args.val_per_class < 0 or args.size < 8:
        parser.error("--per-class must be >= 1, --val-per-class >= 0 and --size >= 8")
    rng = random.Random(args.seed)
    write(os.path.join(args.out, "train"), args.per_class, args.size, rng)
    if args.val_per_class:
        write(os.path.join(args.out, "val"), args.val_per_class, args.size, rng)
    print(f"wrote {len(CLASSES)} classes to {args.out}/train"
          + (f" and {args.out}/val" if args.val_per_class else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
