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
# OPTIONAL_FIELDS: those it writes only when set (not the defaults), so a layer carries them only
# when the mapper set them.
OP_FIELDS = {
    "conv2d": ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation",
               "groups", "bias"),
    "batchnorm2d": ("eps", "momentum", "affine"),
    "relu": (),
    "gelu": ("approximate",),
    "maxpool2d": ("kernel_size", "stride", "padding", "dilation", "ceil_mode"),
    "avgpool2d": ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad"),
    "adaptive_avgpool2d": ("output_size",),
    "linear": ("in_features", "out_features", "bias"),
    "flatten": (),
    "dropout": ("p",),
    "concat": (),
    "add": (),
    "layernorm": ("normalized_shape", "eps", "affine"),
    "embedding": ("num_embeddings", "embedding_dim"),
    "position_embedding": ("max_positions",),
    "transpose": ("dim0", "dim1"),
    "class_token": (),
    "select": ("dim", "index"),
    "mean": ("dim",),
    "multihead_attention": ("embed_dim", "num_heads", "causal", "dropout", "bias"),
}
OPTIONAL_FIELDS = {
    "flatten": ("start_dim", "end_dim"),
    "position_embedding": ("bare_parameter",),
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
    if op == "embedding":
        return ["weight"]
    if op == "position_embedding":
        return [] if attrs.get("bare_parameter") else ["weight"]
    if op == "multihead_attention":
        if attrs["bias"]:
            return ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]
        return ["in_proj_weight", "out_proj.weight"]
    return []


# Ops whose one parameter is bare: its state_dict key is the layer's own name.
BARE_PARAMETER_OPS = ("class_token",)


def owns_bare_parameter(op, attrs):
    return op in BARE_PARAMETER_OPS or (op == "position_embedding" and
                                        bool(attrs.get("bare_parameter")))


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
        return _flatten(attrs, first)
    if op in ("relu", "gelu", "dropout"):
        return first
    if op in _TOKEN_OPS:
        return _TOKEN_OPS[op](attrs, first)
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


def _dim(value, rank, what):
    """A torch dimension of a tensor of `rank` dims with the batch (negative counts from the end),
    as a positive index; the batch (0) and dims past the last are refused."""
    dim = value + rank if value < 0 else value
    if not 1 <= dim < rank:
        raise ShapeError(f"{what} {value} is the batch or past the last of {rank} dimensions")
    return dim


def _flatten(attrs, shape):
    rank = len(shape) + 1
    start = _dim(attrs.get("start_dim", 1), rank, "start_dim")
    end = _dim(attrs.get("end_dim", -1), rank, "end_dim")
    if end < start:
        raise ShapeError(f"end_dim {attrs.get('end_dim')} is before start_dim "
                         f"{attrs.get('start_dim')}")
    return shape[:start - 1] + [math.prod(shape[start - 1:end])] + shape[end:]


def _need_sequence(shape, op):
    if len(shape) != 2:
        raise ShapeError(f"{op} expects a [tokens, features] input, got {list(shape)}")


def _embedding(attrs, shape):
    return shape + [attrs["embedding_dim"]]


def _position_embedding(attrs, shape):
    _need_sequence(shape, "position_embedding")
    positions = attrs["max_positions"]
    if attrs.get("bare_parameter") and shape[0] != positions:
        raise ShapeError(f"a bare position embedding of {positions} positions added to "
                         f"{shape[0]} tokens")
    if shape[0] > positions:
        raise ShapeError(f"{shape[0]} tokens, more than max_positions {positions}")
    return shape


def _transpose(attrs, shape):
    rank = len(shape) + 1
    a, b = _dim(attrs["dim0"], rank, "dim0") - 1, _dim(attrs["dim1"], rank, "dim1") - 1
    out = list(shape)
    out[a], out[b] = out[b], out[a]
    return out


def _class_token(attrs, shape):
    _need_sequence(shape, "class_token")
    return [shape[0] + 1, shape[1]]


def _select(attrs, shape):
    dim = _dim(attrs["dim"], len(shape) + 1, "dim") - 1
    if not -shape[dim] <= attrs["index"] < shape[dim]:
        raise ShapeError(f"index {attrs['index']} is outside dimension {dim + 1} of size "
                         f"{shape[dim]}")
    return shape[:dim] + shape[dim + 1:]


def _mean(attrs, shape):
    dim = _dim(attrs["dim"], len(shape) + 1, "dim") - 1
    return shape[:dim] + shape[dim + 1:]


def _attention(attrs, shape):
    _need_sequence(shape, "multihead_attention")
    if attrs["embed_dim"] != shape[1]:
        raise ShapeError(f"embed_dim is {attrs['embed_dim']} but the input {shape} has {shape[1]}")
    if shape[1] % attrs["num_heads"]:
        raise ShapeError(f"{attrs['num_heads']} heads do not divide {shape[1]} features")
    return shape


_TOKEN_OPS = {"embedding": _embedding, "position_embedding": _position_embedding,
              "transpose": _transpose, "class_token": _class_token, "select": _select,
              "mean": _mean, "multihead_attention": _attention}


def layer_json(name, op, inputs, attrs):
    """One layer as GraphToJson writes it: name, op, inputs, then the op's fields."""
    fields = OP_FIELDS[op]
    optional = OPTIONAL_FIELDS.get(op, ())
    unknown = set(attrs) - set(fields) - set(optional)
    if unknown or any(field not in attrs for field in fields):
        raise ValueError(f"layer {name} ({op}): attributes {sorted(attrs)}, expected {fields}")
    layer = {"name": name, "op": op, "inputs": list(inputs)}
    for field in fields + tuple(f for f in optional if f in attrs):
        layer[field] = attrs[field]
    return layer


def graph_text(name, input_shape, layers, outputs, input_dtype="float32"):
    """The deepool.graph document: one layer per line, so diffs read layer by layer. Token ids
    (int64) are the only input dtype besides float32 the IR has; float32 is left out."""
    head = {"format": FORMAT, "version": VERSION, "name": name,
            "input": {"shape": list(input_shape)}}
    if input_dtype == "int64":
        head["input_dtype"] = "int64"
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
