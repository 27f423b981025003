"""The deepool.graph IR as the importer writes it (docs/formats.md, "Layer graphs").

`infer_shape` repeats the per-sample shape rules of planner/graph.cc, so the importer can check
each layer it maps against the shape the module really produced: if the two disagree, the
mapping would make deepool compute something other than the module, and the import stops.
`layer_json` writes each op's attributes exactly as planner's GraphToJson does (every field,
defaults filled in), so an imported graph and a zoo graph compare field by field.
"""
import json
import math

FORMAT = "deepool.graph"
VERSION = 1
INPUT_NAME = "input"

# The ops of the IR (planner/graph.h), with the attribute fields GraphToJson writes for each.
OP_FIELDS = {
    "conv2d": ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation",
               "groups", "bias"),
    "batchnorm2d": ("eps", "momentum", "affine"),
    "relu": (),
    "gelu": (),
    "maxpool2d": ("kernel_size", "stride", "padding", "dilation", "ceil_mode"),
    "avgpool2d": ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad"),
    "adaptive_avgpool2d": ("output_size",),
    "linear": ("in_features", "out_features", "bias"),
    "flatten": (),
    "dropout": ("p",),
    "concat": (),
    "add": (),
    "layernorm": ("normalized_shape", "eps", "affine"),
}

# The state_dict entries each op's layer owns ("<layer>.<entry>"), by its attributes.
def state_entries(op, attrs):
    if op in ("conv2d", "linear"):
        return ["weight", "bias"] if attrs["bias"] else ["weight"]
    if op == "batchnorm2d":
        affine = ["weight", "bias"] if attrs["affine"] else []
        return affine + ["running_mean", "running_var", "num_batches_tracked"]
    if op == "layernorm":
        return ["weight", "bias"] if attrs["affine"] else []
    return []


class ShapeError(ValueError):
    """The IR would refuse the layer, or give it another shape; the message says why."""


def _window(size, kernel, stride, pad, dilation, ceil_mode):
    span = size + 2 * pad - dilation * (kernel - 1) - 1
    if span < 0:
        return 0
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _need_rank3(shape):
    if len(shape) != 3:
        raise ShapeError(f"expects a [channels, height, width] input, got {list(shape)}")


def _window2d(attrs, shape, is_conv):
    _need_rank3(shape)
    dilation = attrs.get("dilation", [1, 1])
    out = [shape[0]]
    for i in range(2):
        k, s, p = attrs["kernel_size"][i], attrs["stride"][i], attrs["padding"][i]
        if k <= 0 or s <= 0 or p < 0 or dilation[i] <= 0:
            raise ShapeError("kernel, stride and dilation must be positive, padding >= 0")
        if not is_conv and 2 * p > k:
            raise ShapeError("padding must be at most half the kernel size")
        size = _window(shape[1 + i], k, s, p, dilation[i], not is_conv and attrs["ceil_mode"])
        if size <= 0:
            raise ShapeError(f"window larger than the padded input {list(shape)}")
        out.append(size)
    return out


def infer_shape(op, attrs, inputs):
    """The per-sample output shape deepool gives layer `op` on per-sample `inputs`."""
    first = list(inputs[0])
    if op in ("add", "concat"):
        if len(inputs) < 2:
            raise ShapeError(f"{op} needs at least 2 inputs, got {len(inputs)}")
    elif len(inputs) != 1:
        raise ShapeError(f"{op} takes exactly 1 input, got {len(inputs)}")
    if op == "conv2d":
        out = _window2d(attrs, first, is_conv=True)
        groups = attrs["groups"]
        if attrs["in_channels"] != first[0]:
            raise ShapeError(f"in_channels is {attrs['in_channels']} but the input has "
                             f"{first[0]} channels {first}")
        if first[0] % groups or attrs["out_channels"] % groups:
            raise ShapeError("groups must divide in and out channels")
        out[0] = attrs["out_channels"]
        return out
    if op in ("maxpool2d", "avgpool2d"):
        return _window2d(attrs, first, is_conv=False)
    if op == "adaptive_avgpool2d":
        _need_rank3(first)
        return [first[0]] + list(attrs["output_size"])
    if op == "batchnorm2d":
        _need_rank3(first)
        return first
    if op == "layernorm":
        normalized = list(attrs["normalized_shape"])
        if not normalized or first[len(first) - len(normalized):] != normalized:
            raise ShapeError(f"normalized_shape {normalized} is not the trailing dimensions of "
                             f"the input {first}")
        return first
    if op == "linear":
        if attrs["in_features"] != first[-1]:
            raise ShapeError(f"in_features is {attrs['in_features']} but the input {first} has "
                             f"{first[-1]}")
        return first[:-1] + [attrs["out_features"]]
    if op == "flatten":
        return [math.prod(first)]
    if op in ("relu", "gelu", "dropout"):
        return first
    if op == "concat":
        for shape in inputs[1:]:
            if len(shape) != len(first) or list(shape[1:]) != first[1:]:
                raise ShapeError(f"concat needs inputs equal in all but the channel dimension, "
                                 f"got {first} and {list(shape)}")
        return [sum(shape[0] for shape in inputs)] + first[1:]
    if op == "add":
        for shape in inputs[1:]:
            if list(shape) != first:
                raise ShapeError(f"add needs inputs of equal shape, got {first} and {list(shape)}")
        return first
    raise ShapeError(f"unknown op {op}")


def layer_json(name, op, inputs, attrs):
    """One layer as GraphToJson writes it: name, op, inputs, then the op's fields."""
    fields = OP_FIELDS[op]
    unknown = set(attrs) - set(fields)
    if unknown or len(attrs) != len(fields):
        raise ValueError(f"layer {name} ({op}): attributes {sorted(attrs)}, expected {fields}")
    layer = {"name": name, "op": op, "inputs": list(inputs)}
    for field in fields:
        layer[field] = attrs[field]
    return layer


def graph_text(name, input_shape, layers, outputs):
    """The deepool.graph document: one layer per line, so diffs read layer by layer."""
    head = {"format": FORMAT, "version": VERSION, "name": name,
            "input": {"shape": list(input_shape)}}
    lines = ["{"]
    for key, value in head.items():
        lines.append(f"  {json.dumps(key)}: {json.dumps(value)},")
    lines.append('  "layers": [')
    for i, layer in enumerate(layers):
        lines.append("    " + json.dumps(layer) + ("," if i + 1 < len(layers) else ""))
    lines.append("  ],")
    lines.append('  "outputs": ' + json.dumps(outputs))
    lines.append("}")
    return "\n".join(lines) + "\n"
