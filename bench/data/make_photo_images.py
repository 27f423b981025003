"""Writes an ImageNet-like folder of JPEGs for bench/data/run.sh, generated, not downloaded.

They resemble photographs in what decoding costs: 400-500 x 300-400 pixels (a fifth portrait),
quality 90, 4:2:0, about 100 KB each (ImageNet's average is about 110 KB). The content is a
smooth colour field, luminance texture (photographs spend most of their bits on luminance
detail), a few flat shapes with soft edges and mild sensor-like noise. Deterministic by --seed.

    .venv/bin/python bench/data/make_photo_images.py OUT [--classes 8] [--per-class 64] [--seed 0]
"""
import argparse
import os

import numpy as np
from PIL import Image, ImageDraw, ImageFilter


def field(rng, width, height, cell, channels):
    """Random values on a grid of cell-pixel cells, upsampled smoothly; zero mean, +-128."""
    small = (rng.random((max(2, height // cell), max(2, width // cell), channels)) * 255)
    small = Image.fromarray(small.astype(np.uint8).squeeze(), "RGB" if channels == 3 else "L")
    up = np.asarray(small.resize((width, height), Image.BICUBIC), np.float32)
    return up.reshape(height, width, channels) - 128


def photo(rng):
    width, height = int(rng.integers(400, 501)), int(rng.integers(300, 401))
    if rng.random() < 0.2:
        width, height = height, width
    pixels = (128 + field(rng, width, height, 40, 3) + 0.7 * field(rng, width, height, 6, 1)
              + 1.5 * field(rng, width, height, 2, 1))
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(3, 8))):
        x, y, r = int(rng.integers(0, width)), int(rng.integers(0, height)), int(rng.integers(10, 80))
        draw.ellipse((x - r, y - r, x + r, y + r), fill=tuple(int(c) for c in rng.integers(0, 256, 3)))
    pixels = np.asarray(image.filter(ImageFilter.GaussianBlur(0.4)), np.float32)
    pixels += rng.normal(0, 6, pixels.shape)
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--classes", type=int, default=8)
    parser.add_argument("--per-class", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    total = 0
    for c in range(args.classes):
        folder = os.path.join(args.out, f"class{c:03d}")
        os.makedirs(folder, exist_ok=True)
        for n in range(args.per_class):
            path = os.path.join(folder, f"{n:05d}.jpg")
            photo(rng).save(path, quality=90, subsampling="4:2:0")
            total += os.path.getsize(path)
    count = args.classes * args.per_class
    print(f"wrote {count} JPEGs to {args.out}, mean {total / count / 1000:.0f} KB")


if __name__ == "__main__":
    main()
