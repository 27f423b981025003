"""`deepool import`: command-line options, the steps in order, one error line and an exit code."""
import argparse
import json
import os
import sys

from .errors import (EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE, ImportFailure)

DESCRIPTION = """\
Turn a PyTorch module into a deepool model: a deepool.graph file (docs/formats.md) whose layers
are named by the module's qualified paths, so "<layer>.<param>" are its state_dict keys, and with
--weights a file of its parameters and buffers (torch.save of a plain dict of tensors).

The module is traced with torch.fx (torch.nn modules are leaves), run once on a random example
input (batch 2) to check every layer's shape, and mapped op by op; anything the graph IR cannot
express stops the import with one line naming the node, module path, op and source line, and
nothing is written. `deepool import` runs this with $DEEPOOL_PYTHON, else the Python the build
was configured with (the project's .venv/bin/python)."""

EPILOG = """\
exit codes: 0 imported; 1 the model's code raised (loading the file, the factory, or forward on
the example input: often a wrong --input-shape), or an output could not be written; 2 usage (bad
flags, an output exists without --force); 3 the module cannot be expressed in the graph IR (an op
it has no entry for, a shape it disagrees with, code torch.fx cannot trace, weights no layer
owns); 4 no usable Python with torch; 5 no such file, module or factory.

examples:
  deepool import --module torchvision.models:resnet50 --input-shape 3,224,224 \\
      -o resnet50.graph.json --weights resnet50.pt
  deepool import --file model.py --factory build_model --kwargs '{"num_classes": 10}' \\
      --input-shape 3,32,32 -o model.graph.json"""

_DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32")


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage(sys.stderr)
        raise ImportFailure(EXIT_USAGE, message)


def _parser():
    p = _Parser(prog="deepool import", description=DESCRIPTION, epilog=EPILOG, add_help=False,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-h", "--help", action="help", help="Show this help and exit")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--file", metavar="FILE", help="Python file that defines the factory")
    source.add_argument("--module", metavar="PKG.MOD:FACTORY",
                        help="Importable module and its factory, e.g. torchvision.models:resnet50")
    p.add_argument("--factory", metavar="NAME",
                   help="With --file: the function (or class) that returns the torch.nn.Module")
    p.add_argument("--kwargs", metavar="JSON", default="{}",
                   help="Keyword arguments for the factory, a JSON object (default {})")
    p.add_argument("--input-shape", metavar="C,H,W", required=True,
                   help="Per-sample input shape, without the batch, e.g. 3,224,224")
    p.add_argument("--input-dtype", choices=_DTYPES, default="float32",
                   help="The example input's dtype (default float32)")
    p.add_argument("-o", "--output", metavar="FILE", required=True,
                   help="Where to write the deepool.graph JSON")
    p.add_argument("--weights", metavar="FILE",
                   help="Also write the module's state_dict (parameters and buffers) here")
    p.add_argument("--name", help="The graph's name (default: the factory's name)")
    p.add_argument("--loss-weights", metavar="W,W,...",
                   help="One loss weight per output of forward, in order (default 1 each), "
                        "e.g. 1,0.4 for Inception-v3's logits and auxiliary logits")
    p.add_argument("--force", action="store_true", help="Replace outputs that exist")
    return p


def _numbers(text, flag, kind):
    try:
        values = [kind(v) for v in text.split(",")]
    except ValueError:
        raise ImportFailure(EXIT_USAGE, f"{flag} {text!r}: expected comma-separated "
                            f"{'integers' if kind is int else 'numbers'}") from None
    return values


def _options(argv):
    args = _parser().parse_args(argv)
    if args.file:
        if not args.factory:
            raise ImportFailure(EXIT_USAGE, "--file needs --factory NAME")
        args.factory_name = args.factory
    else:
        module, _, factory = args.module.partition(":")
        if not module or not factory or args.factory:
            raise ImportFailure(EXIT_USAGE, "--module takes PKG.MOD:FACTORY (and no --factory)")
        args.module_name, args.factory_name = module, factory
    try:
        args.kwargs = json.loads(args.kwargs)
    except json.JSONDecodeError as e:
        raise ImportFailure(EXIT_USAGE, f"--kwargs: not JSON: {e}") from None
    if not isinstance(args.kwargs, dict):
        raise ImportFailure(EXIT_USAGE, "--kwargs must be a JSON object, e.g. "
                            "'{\"num_classes\": 10}'")
    args.input_shape = _numbers(args.input_shape, "--input-shape", int)
    if any(d <= 0 for d in args.input_shape):
        raise ImportFailure(EXIT_USAGE, "--input-shape: every dimension must be positive")
    args.loss_weights = (_numbers(args.loss_weights, "--loss-weights", float)
                         if args.loss_weights else None)
    if args.weights and os.path.abspath(args.weights) == os.path.abspath(args.output):
        raise ImportFailure(EXIT_USAGE, "-o and --weights name the same file")
    return args


def run(argv):
    args = _options(argv)
    from . import output
    targets = [("-o", args.output)] + ([("--weights", args.weights)] if args.weights else [])
    output.check_targets(targets, args.force)

    try:
        import torch
    except ImportError as e:
        raise ImportFailure(EXIT_UNAVAILABLE, f"{sys.executable} cannot import torch ({e}); "
                            "set DEEPOOL_PYTHON to a Python that has torch") from None
    from . import convert, load

    if args.file:
        module, source = load.load_file(args.file), args.file
    else:
        module, source = load.load_module(args.module_name), args.module_name
    model = load.build(module, source, args.factory_name, args.kwargs)
    result = convert.Converter(model, args.input_shape, getattr(torch, args.input_dtype),
                               args.name or args.factory_name, args.loss_weights).run()

    def write_graph(path):
        with open(path, "w", encoding="utf-8") as f:
            f.write(result.text)

    def write_weights(path):
        state = model.state_dict()
        torch.save({key: state[module_key].detach().cpu() for key, module_key in result.weights},
                   path)

    outputs = [("-o", args.output, write_graph)]
    if args.weights:
        outputs.append(("--weights", args.weights, write_weights))
    output.write_all(outputs, args.force)

    params = sum(p.numel() for p in model.parameters())
    print(f"imported {args.name or args.factory_name}: {len(result.layers)} layers, "
          f"{params:,} parameters -> {args.output}" +
          (f"; {len(result.weights)} state_dict tensors -> {args.weights}" if args.weights
           else ""))
    return EXIT_OK


def main(argv=None):
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except ImportFailure as failure:
        print(f"deepool import: error: {failure.message}", file=sys.stderr)
        return failure.code
