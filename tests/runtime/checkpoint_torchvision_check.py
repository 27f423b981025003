#!/usr/bin/python3
"""Checks a deepool checkpoint against torchvision (run by tests/runtime/checkpoint_test.cc).

  checkpoint_torchvision_check.py CHECKPOINT MODEL [--num-classes N] [--no-aux]
      [--io FILE] [--export FILE]

1. torch.load(CHECKPOINT) must give a dict of str -> Tensor that torchvision's MODEL accepts
   with load_state_dict(strict=True).
2. --io FILE: a dict {"input": x, "output.<layer>": y, ...} that deepool computed in eval mode
   with the same weights; torchvision's model, given x, must produce the main output y.
3. --export FILE: writes torchvision's own freshly initialised state_dict there as a plain
   dict, for the C++ side to load back (every torchvision key must exist in deepool's model).

Exit status: 0 on success, 1 with a message on stderr on any mismatch, 2 on bad usage.
"""
import argparse
import sys

import torch
import torchvision


def fail(message):
    print("checkpoint_torchvision_check: " + message, file=sys.stderr)
    sys.exit(1)


def build_model(name, num_classes, aux):
    kwargs = {"weights": None, "num_classes": num_classes}
    if name == "inception_v3":
        kwargs["aux_logits"] = aux
        kwargs["init_weights"] = False
    elif name.startswith("vgg"):
        kwargs["init_weights"] = False
    return getattr(torchvision.models, name)(**kwargs)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("checkpoint")
    parser.add_argument("model")
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--no-aux", action="store_true")
    parser.add_argument("--io")
    parser.add_argument("--export")
    args = parser.parse_args()

    state = torch.load(args.checkpoint)
    if not isinstance(state, dict):
        fail("torch.load gave a %s, not a dict" % type(state).__name__)
    for key, value in state.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            fail("entry %r is not str -> Tensor" % (key,))

    torch.manual_seed(0)
    model = build_model(args.model, args.num_classes, not args.no_aux)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        fail("key mismatch with torchvision's %s: missing %s; unexpected %s"
             % (args.model, missing, unexpected))
    for key, tensor in expected.items():
        if tensor.shape != state[key].shape or tensor.dtype != state[key].dtype:
            fail("%s: torchvision has %s %s, checkpoint has %s %s"
                 % (key, tuple(tensor.shape), tensor.dtype, tuple(state[key].shape),
                    state[key].dtype))
    if args.export:
        # torchvision's own initial weights, before ours overwrite them in place.
        torch.save({k: v.clone() for k, v in expected.items()}, args.export)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        fail("load_state_dict(strict=True) refused it: %s" % e)

    if args.io:
        io = torch.load(args.io)
        outputs = {k[len("output."):]: v for k, v in io.items() if k.startswith("output.")}
        main_outputs = {k: v for k, v in outputs.items() if not k.startswith("AuxLogits")}
        if len(main_outputs) != 1:
            fail("--io file should hold one main output, has %s" % sorted(outputs))
        (layer, want), = main_outputs.items()
        model.eval()
        with torch.no_grad():
            got = model(io["input"])
        if got.shape != want.shape:
            fail("output shape %s, deepool's %s is %s" % (tuple(got.shape), layer,
                                                          tuple(want.shape)))
        scale = max(1.0, want.abs().max().item())
        diff = (got - want).abs().max().item()
        if diff > 1e-4 * scale:
            fail("outputs differ from deepool's %s by up to %g (scale %g)" % (layer, diff, scale))
        print("%s: outputs agree within %g" % (args.model, diff))

    print("%s: torchvision accepted %d tensors" % (args.model, len(state)))


if __name__ == "__main__":
    main()
