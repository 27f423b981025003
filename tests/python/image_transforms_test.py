"""deepool's image decoding and transforms equal torchvision's (docs/runtime.md, "Data sets").

The C++ library (worker/runtime/data/images/) runs through deepool-image-tool; the reference is
what torchvision's ImageFolder recipe does with the PIL backend on the same files, on the same
crop rectangles and flips."""
import io
import os
import random
import subprocess
import tempfile
import unittest

import numpy as np
import torchvision.transforms.functional as F
from PIL import Image
from torchvision.transforms import CenterCrop, InterpolationMode, Resize

DEEPOOL = os.environ.get("DEEPOOL_BIN", os.path.join(os.path.dirname(__file__), "..", "..",
                                                     "build", "bin", "deepool"))
TOOL = os.environ.get("DEEPOOL_IMAGE_TOOL",
                      os.path.join(os.path.dirname(DEEPOOL), "deepool-image-tool"))


def photo(width, height, seed, mode="RGB"):
    """A photograph-like image: smooth colour fields, a few shapes and pixel noise."""
    rng = np.random.default_rng(seed)
    small = (rng.random((max(2, height // 40), max(2, width // 40), 3)) * 255).astype(np.uint8)
    image = Image.fromarray(small).resize((width, height), Image.BICUBIC)
    pixels = np.asarray(image).astype(np.int16)
    for _ in range(3):
        y, x = rng.integers(0, height), rng.integers(0, width)
        pixels[max(0, y - 20):y + 20, max(0, x - 30):x + 30] = rng.integers(0, 255, 3)
    pixels += rng.integers(-12, 13, pixels.shape, dtype=np.int16)
    rgb = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    return rgb.convert(mode) if mode != "RGB" else rgb


def encode(image, fmt, **options):
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


class ImageToolCase(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def file(self, name, data):
        path = os.path.join(self.dir.name, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def tool(self, *args, shape):
        result = subprocess.run([TOOL, *map(str, args)], capture_output=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr.decode())
        return np.frombuffer(result.stdout, dtype=np.uint8).reshape(shape)

    def assertClose(self, ours, theirs, levels, what):
        difference = np.abs(ours.astype(np.int16) - np.asarray(theirs).astype(np.int16))
        self.assertLessEqual(int(difference.max()), levels,
                             f"{what}: max difference {difference.max()}, "
                             f"mean {difference.mean():.4f}")


class DecodeTest(ImageToolCase):
    def test_jpeg_and_png_decode_as_pil_converts_them_to_rgb(self):
        cases = [
            ("q75_420.jpg", encode(photo(500, 375, 1), "JPEG", quality=75)),
            ("q95_444.jpg", encode(photo(333, 500, 2), "JPEG", quality=95, subsampling=0)),
            ("odd.jpg", encode(photo(65, 47, 3), "JPEG", quality=90)),
            ("progressive.jpg", encode(photo(200, 150, 4), "JPEG", quality=85, progressive=True)),
            ("gray.jpg", encode(photo(120, 90, 5, "L"), "JPEG", quality=90)),
            ("rgb.png", encode(photo(64, 48, 6), "PNG")),
            ("rgba.png", encode(photo(64, 48, 7, "RGBA"), "PNG")),
            ("palette.png", encode(photo(64, 48, 8, "P"), "PNG")),
            ("gray.png", encode(photo(64, 48, 9, "L"), "PNG")),
        ]
        for name, data in cases:
            path = self.file(name, data)
            reference = np.asarray(Image.open(path).convert("RGB"))
            ours = self.tool("decode", path, shape=reference.shape)
            self.assertClose(ours, reference, 0, name)

    def test_cmyk_jpeg_decodes_as_pil_converts_it(self):
        path = self.file("cmyk.jpg", encode(photo(80, 60, 10, "CMYK"), "JPEG", quality=90))
        reference = np.asarray(Image.open(path).convert("RGB"))
        self.assertClose(self.tool("decode", path, shape=reference.shape), reference, 1, "cmyk")

    def test_a_region_equals_the_same_rectangle_of_the_whole_decode(self):
        rng = random.Random(0)
        for name, options in (("a.jpg", {}), ("b.jpg", {"subsampling": 0})):
            path = self.file(name, encode(photo(301, 203, 11), "JPEG", quality=90, **options))
            whole = np.asarray(Image.open(path).convert("RGB"))
            for _ in range(20):
                h, w = rng.randint(1, 203), rng.randint(1, 301)
                top, left = rng.randint(0, 203 - h), rng.randint(0, 301 - w)
                ours = self.tool("decode", path, top, left, h, w, shape=(h, w, 3))
                self.assertClose(ours, whole[top:top + h, left:left + w], 0,
                                 f"{name} region {top},{left},{h},{w}")

    def test_a_truncated_jpeg_is_refused(self):
        data = encode(photo(100, 80, 12), "JPEG", quality=90)
        path = self.file("cut.jpg", data[:len(data) // 2])
        result = subprocess.run([TOOL, "decode", path], capture_output=True, timeout=60)
        self.assertEqual(result.returncode, 1)
        self.assertIn(b"corrupt JPEG data", result.stderr)


class TransformTest(ImageToolCase):
    def test_training_crop_resize_and_flip_equal_torchvision_within_one_level(self):
        rng = random.Random(1)
        worst = 0
        for n, (width, height) in enumerate(((500, 375), (333, 500), (64, 48), (640, 427))):
            path = self.file(f"{n}.jpg", encode(photo(width, height, 20 + n), "JPEG", quality=90))
            image = Image.open(path).convert("RGB")
            for _ in range(6):
                h, w = rng.randint(8, height), rng.randint(8, width)
                top, left = rng.randint(0, height - h), rng.randint(0, width - w)
                flip = rng.random() < 0.5
                reference = F.resized_crop(image, top, left, h, w, [224, 224],
                                           InterpolationMode.BILINEAR)
                if flip:
                    reference = F.hflip(reference)
                ours = self.tool("train", path, 224, top, left, h, w, int(flip),
                                 shape=(224, 224, 3))
                self.assertClose(ours, reference, 1, f"{n}.jpg crop {top},{left},{h},{w}")
                difference = np.abs(ours.astype(int) - np.asarray(reference).astype(int))
                worst = max(worst, int(difference.max()))
        print(f"training transform: max difference {worst} level(s)")

    def test_evaluation_resize_and_centre_crop_equal_torchvision_within_one_level(self):
        for n, (width, height) in enumerate(((500, 375), (333, 500), (300, 300), (199, 120))):
            path = self.file(f"{n}.png", encode(photo(width, height, 30 + n), "PNG"))
            image = Image.open(path).convert("RGB")
            reference = CenterCrop(224)(Resize(256, InterpolationMode.BILINEAR)(image))
            self.assertClose(self.tool("eval", path, 224, shape=(224, 224, 3)), reference, 1,
                             f"{n}.png")


if __name__ == "__main__":
    unittest.main()
