#!/usr/bin/env python3
"""Checks the model zoo against torchvision: for every zoo model (and a few option
variants) the set of "<layer>.<param>" keys, with shapes, derived from `deepool model show NAME
--json` must equal torchvision's state_dict (parameters and buffers: running_mean, running_var,
num_batches_tracked), the parameter count must equal torchvision's, and every torchvision module
called once in forward must be a deepool layer of the same name and per-sample output shape.

Run from the repository root after building the `deepool` target:

    .venv/bin/python tests/unit/torchvision_keys_check.py --deepool build/bin/deepool

Exit status 0 when every case matches, 1 otherwise. `--print-signatures` prints, per case,
torchvision's key count and the FNV-1a signature of its sorted "key:shape" lines, the reference
values that tests/unit/zoo_test.cc holds.
(Needs the project's .venv, which scripts/install-torch.sh fills with the pinned torch and
torchvision.)
"""
import argparse
import json
import re
import subprocess
import sys

import torch
from torch import nn
import torch.nn.functional as F
import torchvision


class SmallCnn(nn.Module):
    """The zoo's small_cnn written as a torch module (the layout its layer names describe)."""

    def __init__(self, num_classes):
        super().__init__()

        def unit(conv, bn=False):
            m = nn.Module()
            m.conv = conv
            if bn:
                m.bn = nn.BatchNorm2d(conv.out_channels)
            return m

        self.stem = unit(nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False), bn=True)
        self.branch1x1 = unit(nn.Conv2d(16, 8, 1))
        self.branch3x3 = unit(nn.Conv2d(16, 8, 3, padding=1))
        self.res = unit(nn.Conv2d(16, 16, 3, padding=1, bias=False), bn=True)
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x):
        x = F.relu(self.stem.bn(self.stem.conv(x)))
        x = torch.cat([F.relu(self.branch1x1.conv(x)), F.relu(self.branch3x3.conv(x))], 1)
        x = F.relu(self.res.bn(self.res.conv(x)) + x)
        x = F.adaptive_avg_pool2d(F.max_pool2d(x, 2), 1)
        return self.fc(torch.flatten(x, 1))


class Mlp(nn.Module):
    def __init__(self, num_classes, features=32, hidden=64):
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, num_classes)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


M = torchvision.models
# (case name, deepool model show arguments, reference module factory)
CASES = [
    ("vgg16", ["vgg16"], lambda: M.vgg16()),
    ("vgg16_10", ["vgg16", "--num-classes", "10"], lambda: M.vgg16(num_classes=10)),
    ("resnet50", ["resnet50"], lambda: M.resnet50()),
    ("resnet50_10", ["resnet50", "--num-classes", "10"], lambda: M.resnet50(num_classes=10)),
    ("wide_resnet101_2", ["wide_resnet101_2"], lambda: M.wide_resnet101_2()),
    ("inception_v3", ["inception_v3"],
     lambda: M.inception_v3(aux_logits=True, init_weights=False)),
    ("inception_v3_noaux", ["inception_v3", "--no-aux-logits"],
     lambda: M.inception_v3(aux_logits=False, init_weights=False)),
    ("mlp_10", ["mlp", "--num-classes", "10"], lambda: Mlp(10)),
    ("small_cnn_10", ["small_cnn", "--num-classes", "10"], lambda: SmallCnn(10)),
    ("vit_b_16", ["vit_b_16"], lambda: M.vit_b_16()),
    ("vit_tiny_10", ["vit_tiny", "--num-classes", "10"],
     lambda: M.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                 hidden_dim=32, mlp_dim=64, num_classes=10)),
]


def deepool_state_dict_shapes(doc, out_shapes):
    """Maps "<layer>.<param>" to its shape, from a deepool.graph JSON document and the layers'
    per-sample output shapes (deepool_output_shapes). A bare parameter's key is its layer's
    name (class_token, a bare_parameter position_embedding)."""
    channels = {"input": doc["input"]["shape"][0]}
    features = {"input": doc["input"]["shape"][-1]}
    shapes = {}
    for layer in doc["layers"]:
        name, op, inputs = layer["name"], layer["op"], layer["inputs"]
        c_in = channels.get(inputs[0]) if inputs else None
        f_in = features.get(inputs[0]) if inputs else None
        c_out, f_out = c_in, f_in
        if op == "conv2d":
            c_in = layer.get("in_channels", c_in)
            c_out = layer["out_channels"]
            kh, kw = layer["kernel_size"]
            shapes[name + ".weight"] = [c_out, c_in // layer["groups"], kh, kw]
            if layer["bias"]:
                shapes[name + ".bias"] = [c_out]
        elif op == "batchnorm2d":
            if layer["affine"]:
                shapes[name + ".weight"] = [c_in]
                shapes[name + ".bias"] = [c_in]
            shapes[name + ".running_mean"] = [c_in]
            shapes[name + ".running_var"] = [c_in]
            shapes[name + ".num_batches_tracked"] = []
        elif op == "linear":
            f_in = layer.get("in_features", f_in)
            f_out = layer["out_features"]
            shapes[name + ".weight"] = [f_out, f_in]
            if layer["bias"]:
                shapes[name + ".bias"] = [f_out]
        elif op == "layernorm":
            if layer["affine"]:
                shapes[name + ".weight"] = list(layer["normalized_shape"])
                shapes[name + ".bias"] = list(layer["normalized_shape"])
        elif op in ("class_token", "position_embedding", "multihead_attention"):
            d = out_shapes[name][-1]
            if op == "class_token":
                shapes[name] = [1, 1, d]
            elif op == "position_embedding":
                p = layer["max_positions"]
                if layer.get("bare_parameter", False):
                    shapes[name] = [1, p, d]
                else:
                    shapes[name + ".weight"] = [p, d]
            else:
                shapes[name + ".in_proj_weight"] = [3 * d, d]
                shapes[name + ".out_proj.weight"] = [d, d]
                if layer["bias"]:
                    shapes[name + ".in_proj_bias"] = [3 * d]
                    shapes[name + ".out_proj.bias"] = [d]
        elif op == "concat":
            c_out = sum(channels[i] for i in inputs)
        elif op == "flatten":
            f_out = None  # only linear layers read it, and the zoo gives in_features
        channels[name], features[name] = c_out, f_out
    return shapes


def deepool_output_shapes(table_text):
    """Maps layer name to per-sample output shape, from `deepool model show NAME`'s table."""
    shapes = {}
    for line in table_text.splitlines():
        cols = re.split(r"\s{2,}", line.strip())
        if len(cols) == 7 and cols[0].isdigit():
            shapes[cols[1]] = json.loads(cols[4])
    return shapes


def torch_output_shapes(module, image_shape):
    """Runs one training-mode forward pass of two samples and records, per leaf module called
    exactly once, its output shape without the batch dimension."""
    shapes, calls = {}, {}
    hooks = []
    for name, child in module.named_modules():
        if name and not list(child.children()):
            def hook(_m, _inputs, output, name=name):
                calls[name] = calls.get(name, 0) + 1
                shapes[name] = list(output.shape[1:])
            hooks.append(child.register_forward_hook(hook))
    module.train()
    with torch.no_grad():
        module(torch.zeros([2] + image_shape))
    for h in hooks:
        h.remove()
    return {name: shape for name, shape in shapes.items() if calls[name] == 1}


def torch_state_dict_shapes(module):
    return {k: list(v.shape) for k, v in module.state_dict().items()}


def signature(shapes):
    """FNV-1a 64 of the sorted "key:d0xd1x..." lines joined by newlines (see zoo_test.cc)."""
    text = "\n".join(sorted(k + ":" + "x".join(str(d) for d in s) for k, s in shapes.items()))
    h = 0xCBF29CE484222325
    for byte in text.encode():
        h ^= byte
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deepool", default="build/bin/deepool", help="the deepool binary")
    parser.add_argument("--print-signatures", action="store_true",
                        help="print torchvision's key counts and signatures and exit")
    args = parser.parse_args()

    failures = 0
    for case, show_args, factory in CASES:
        reference = factory()
        want = torch_state_dict_shapes(reference)
        want_params = sum(p.numel() for p in reference.parameters())
        if args.print_signatures:
            print(f"{case}: keys={len(want)} params={want_params} "
                  f"signature=0x{signature(want):016x}")
            continue
        out = subprocess.run([args.deepool, "model", "show", *show_args, "--json"],
                             check=True, capture_output=True, text=True).stdout
        doc = json.loads(out)
        table = subprocess.run([args.deepool, "model", "show", *show_args], check=True,
                               capture_output=True, text=True).stdout
        got_shapes = deepool_output_shapes(table)
        got = deepool_state_dict_shapes(doc, got_shapes)
        problems = []
        for key in sorted(want.keys() - got.keys()):
            problems.append(f"missing in deepool: {key} {want[key]}")
        for key in sorted(got.keys() - want.keys()):
            problems.append(f"not in torchvision: {key} {got[key]}")
        for key in sorted(want.keys() & got.keys()):
            if want[key] != got[key]:
                problems.append(f"shape of {key}: deepool {got[key]}, torchvision {want[key]}")
        if doc["total_params"] != want_params:
            problems.append(f"total_params: deepool {doc['total_params']}, "
                            f"torchvision {want_params}")
        compared = 0
        for name, shape in torch_output_shapes(reference, doc["input"]["shape"]).items():
            if name not in got_shapes:
                problems.append(f"module {name} is no layer in deepool")
            elif got_shapes[name] != shape:
                problems.append(f"output shape of {name}: deepool {got_shapes[name]}, "
                                f"torchvision {shape}")
            compared += 1
        status = "OK  " if not problems else "FAIL"
        print(f"{status} {case}: {len(got)} keys, {doc['total_params']} params, "
              f"{compared} module output shapes")
        for problem in problems[:20]:
            print("     " + problem)
        failures += bool(problems)
    if failures:
        print(f"{failures} case(s) differ from torchvision")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
