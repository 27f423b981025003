"""The op table: which torch modules, functions and tensor methods become which IR layer.

Three tables, one entry per thing torch.fx can record:
  MODULES    type of a leaf module (call_module) -> mapper(call, module)
  FUNCTIONS  the function object (call_function) -> (parameters, mapper(call, args))
  METHODS    tensor method name (call_method)    -> (parameters, mapper(call, args))
A mapper returns a `Layer` (an IR op with its attributes and tensor inputs), a `PassThrough`
(the value is its input: nn.Identity, .contiguous()) or a `TupleElement` (`attn(x, x, x)[0]`),
or calls `call.refuse(why)` for settings the IR cannot express. Patterns of several nodes that
make one layer (GPT attention, ViT's class token) are in patterns.py, found before this table. Anything not in a table is refused by the tracer, naming it; NOT_YET says
what a few well-known ones wait for. Adding an op later is one entry here (and, for a new IR
op, its shape rule in ir.py).
"""
import operator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

REQUIRED = object()  # a parameter without a default


@dataclass
class Layer:
    op: str
    attrs: dict
    inputs: list  # fx nodes whose values are tensors
    inplace: bool = False  # overwrites inputs[0] (checked: nothing reads it afterwards)
    value_index: int = None  # the node returns a tuple; the layer is this element of it


@dataclass
class TupleElement:
    container: object  # an fx node whose value is a tuple (nn.MultiheadAttention's)
    index: int


@dataclass
class PassThrough:
    input: object  # the fx node whose value this node's value is


@dataclass
class Entry:
    params: tuple  # (name, default) pairs, in positional order; default may be REQUIRED
    mapper: object
    aliases: dict = field(default_factory=dict)  # keyword spellings: {"axis": "dim"}


def _pair(value, what, call):
    if isinstance(value, int):
        return [value, value]
    if isinstance(value, (tuple, list)) and len(value) == 2 and \
            all(isinstance(v, int) for v in value):
        return [int(value[0]), int(value[1])]
    if isinstance(value, (tuple, list)) and len(value) == 1 and isinstance(value[0], int):
        return [value[0], value[0]]
    call.refuse(f"{what} {value!r} is not an integer or a pair of integers")


# ---- one builder per IR op; module and functional spellings share them ----

def _conv2d(call, m):
    if m.padding_mode != "zeros":
        call.refuse(f"padding_mode={m.padding_mode!r}: the IR's conv2d pads with zeros only")
    padding = m.padding
    if padding == "valid":
        padding = (0, 0)
    elif padding == "same":
        totals = [d * (k - 1) for d, k in zip(m.dilation, m.kernel_size)]
        if any(t % 2 for t in totals):
            call.refuse("padding='same' with an even kernel pads unevenly; the IR's conv2d pads "
                        "both sides alike")
        padding = tuple(t // 2 for t in totals)
    attrs = {"in_channels": m.in_channels, "out_channels": m.out_channels,
             "kernel_size": _pair(m.kernel_size, "kernel_size", call),
             "stride": _pair(m.stride, "stride", call),
             "padding": _pair(padding, "padding", call),
             "dilation": _pair(m.dilation, "dilation", call),
             "groups": m.groups, "bias": m.bias is not None}
    return Layer("conv2d", attrs, [call.module_input()])


def _batchnorm2d(call, m):
    if not m.track_running_stats:
        call.refuse("track_running_stats=False: the IR's batchnorm2d keeps running statistics")
    if m.momentum is None:
        call.refuse("momentum=None (a cumulative average): the IR's batchnorm2d takes a number")
    attrs = {"eps": float(m.eps), "momentum": float(m.momentum), "affine": bool(m.affine)}
    return Layer("batchnorm2d", attrs, [call.module_input()])


def _linear(call, m):
    attrs = {"in_features": m.in_features, "out_features": m.out_features,
             "bias": m.bias is not None}
    return Layer("linear", attrs, [call.module_input()])


def _layernorm(call, m):
    if m.elementwise_affine and getattr(m, "bias", True) is None:
        call.refuse("bias=False: the IR's layernorm has a weight and a bias, or neither")
    attrs = {"normalized_shape": [int(d) for d in m.normalized_shape], "eps": float(m.eps),
             "affine": bool(m.elementwise_affine)}
    return Layer("layernorm", attrs, [call.module_input()])


def _relu(call, x, inplace=False):
    return Layer("relu", {}, [call.tensor(x)], inplace=bool(inplace))


def _gelu(call, x, approximate):
    if approximate not in ("none", "tanh"):
        call.refuse(f"approximate={approximate!r}: the IR's gelu is the exact (erf) form or "
                    "'tanh'")
    return Layer("gelu", {"approximate": approximate}, [call.tensor(x)])


def _embedding(call, m):
    for setting, value, default in (("padding_idx", m.padding_idx, None),
                                    ("max_norm", m.max_norm, None),
                                    ("scale_grad_by_freq", m.scale_grad_by_freq, False),
                                    ("sparse", m.sparse, False)):
        if value != default:
            call.refuse(f"{setting}={value!r}: the IR's embedding is a plain table lookup")
    x = call.module_input()
    if x.op != "placeholder":
        call.refuse("the embedding reads something other than the graph input; deepool's "
                    "embedding reads the int64 token ids (positions from torch.arange map only "
                    "when added to a token embedding: wte(idx) + wpe(arange(T)))")
    return Layer("embedding", {"num_embeddings": m.num_embeddings,
                               "embedding_dim": m.embedding_dim}, [x])


_MHA_CALL = (("query", REQUIRED), ("key", REQUIRED), ("value", REQUIRED),
             ("key_padding_mask", None), ("need_weights", True), ("attn_mask", None),
             ("average_attn_weights", True), ("is_causal", False))


def _multihead_attention(call, m):
    query, key, value, key_padding_mask, _, attn_mask, _, is_causal = call.bind(
        Entry(_MHA_CALL, None))
    if not (query is key and key is value):
        call.refuse("query, key and value differ: the IR's multihead_attention is "
                    "self-attention (attn(x, x, x))")
    if not m.batch_first:
        call.refuse("batch_first=False: the IR's tensors have the batch first "
                    "(nn.MultiheadAttention(..., batch_first=True))")
    if not m._qkv_same_embed_dim or m.bias_k is not None or m.add_zero_attn:
        call.refuse("kdim/vdim, add_bias_kv or add_zero_attn: the IR's multihead_attention has "
                    "one in-projection [3D, D] and no extra key/value rows")
    if attn_mask is not None or key_padding_mask is not None or is_causal:
        call.refuse("an attention or padding mask: the IR's multihead_attention is unmasked or "
                    "causal, and causal attention maps from F.scaled_dot_product_attention("
                    "is_causal=True)")
    attrs = {"embed_dim": m.embed_dim, "num_heads": m.num_heads, "causal": False,
             "dropout": float(m.dropout), "bias": m.in_proj_bias is not None}
    return Layer("multihead_attention", attrs, [call.tensor(query)], value_index=0)


def _pool_window(call, kernel_size, stride, padding):
    """A pooling layer's window: kernel, stride (the kernel's when not given) and padding."""
    kernel = _pair(call.const(kernel_size), "kernel_size", call)
    stride = call.const(stride)
    return {"kernel_size": kernel,
            "stride": kernel if stride is None or stride in ([], ()) else
            _pair(stride, "stride", call),
            "padding": _pair(call.const(padding), "padding", call)}


def _maxpool2d(call, x, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    if return_indices:
        call.refuse("return_indices=True: the IR's maxpool2d returns the pooled values only")
    attrs = _pool_window(call, kernel_size, stride, padding)
    attrs.update({"dilation": _pair(call.const(dilation), "dilation", call),
                  "ceil_mode": bool(ceil_mode)})
    return Layer("maxpool2d", attrs, [call.tensor(x)])


def _avgpool2d(call, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
               divisor_override):
    if divisor_override is not None:
        call.refuse("divisor_override: the IR's avgpool2d divides by the window size")
    attrs = _pool_window(call, kernel_size, stride, padding)
    attrs.update({"ceil_mode": bool(ceil_mode), "count_include_pad": bool(count_include_pad)})
    return Layer("avgpool2d", attrs, [call.tensor(x)])


def _adaptive_avgpool2d(call, x, output_size):
    size = call.const(output_size)
    if isinstance(size, (tuple, list)) and len(size) == 2 and None in size:
        shape = call.shape(x)  # None keeps the input's size, as torch does
        size = [shape[1 + i] if s is None else s for i, s in enumerate(size)]
    return Layer("adaptive_avgpool2d", {"output_size": _pair(size, "output_size", call)},
                 [call.tensor(x)])


def _dropout(call, x, p, training=True, inplace=False):
    if not training:
        return PassThrough(call.tensor(x))  # F.dropout(..., training=False) is the identity
    p = float(call.const(p))
    if not 0 <= p < 1:
        call.refuse(f"p={p}: the IR's dropout takes p in [0, 1)")
    return Layer("dropout", {"p": p}, [call.tensor(x)], inplace=bool(inplace))


def _flatten(call, x, start_dim, end_dim):
    rank = len(call.shape(x)) + 1  # with the batch dimension
    start, end = start_dim % rank, end_dim % rank
    if start == 0 or end < start:
        call.refuse(f"flatten(start_dim={start_dim}, end_dim={end_dim}) of a rank-{rank} tensor: "
                    "the IR's flatten keeps the batch (start_dim >= 1)")
    attrs = {} if (start, end) == (1, rank - 1) else {"start_dim": start, "end_dim": end}
    return Layer("flatten", attrs, [call.tensor(x)])


def _view_as_flatten(call, x, *shape):
    # x.view(x.size(0), -1), x.reshape(N, -1), and a reshape that joins neighbouring dimensions
    # (ViT's x.reshape(n, D, h * w)): a flatten; any other reshape has no IR op yet.
    per_sample = call.shape(x)
    result = call.result_shape()
    joined = _joined_range(per_sample, result)
    if joined is None:
        call.refuse(f"{call.node.target} of {per_sample} to {result} per sample: only a reshape "
                    "that joins neighbouring dimensions (a flatten) has an IR op")
    start, end = joined
    attrs = {} if (start, end) == (1, len(per_sample)) else {"start_dim": start, "end_dim": end}
    return Layer("flatten", attrs, [call.tensor(x)])


def _joined_range(shape, result):
    """(start_dim, end_dim), counting the batch as 0, when `result` is `shape` with the dims
    start_dim..end_dim joined into one; None otherwise."""
    if result is None or not result:
        return None
    if len(result) == 1:
        return (1, len(shape)) if result[0] == _prod(shape) else None
    same = 0
    while same < min(len(shape), len(result)) - 1 and shape[same] == result[same]:
        same += 1
    tail = len(result) - same - 1
    if tail < 0 or len(shape) - tail <= same:
        return None
    end = len(shape) - tail
    if shape[end:] != result[same + 1:] or result[same] != _prod(shape[same:end]):
        return None
    return same + 1, end


def _prod(values):
    n = 1
    for v in values:
        n *= v
    return n


def _concat(call, tensors, dim):
    if not isinstance(tensors, (tuple, list)):
        call.refuse("concatenates something other than a list of tensors")
    nodes = [call.tensor(t) for t in tensors]
    rank = len(call.shape(nodes[0])) + 1
    if dim % rank != 1:
        call.refuse(f"concatenates along dimension {dim} of a rank-{rank} tensor: the IR's concat "
                    "joins channels (dimension 1)")
    if len(nodes) == 1:
        return PassThrough(nodes[0])
    return Layer("concat", {}, nodes)


def _add(call, x, other, alpha=1, inplace=False):
    if alpha != 1:
        call.refuse(f"alpha={alpha}: the IR's add sums its inputs as they are")
    if not (call.is_tensor(x) and call.is_tensor(other)):
        call.refuse("adds a constant; the IR's add sums tensors of equal shape")
    return Layer("add", {}, [call.tensor(x), call.tensor(other)], inplace=inplace)


def _transpose(call, x, dim0, dim1):
    rank = len(call.shape(x)) + 1
    dim0, dim1 = call.const(dim0) % rank, call.const(dim1) % rank
    if 0 in (dim0, dim1) or dim0 == dim1:
        call.refuse(f"transpose({dim0}, {dim1}): the IR's transpose swaps two dimensions after "
                    "the batch")
    return Layer("transpose", {"dim0": min(dim0, dim1), "dim1": max(dim0, dim1)},
                 [call.tensor(x)])


def _permute(call, x, *dims):
    if len(dims) == 1 and isinstance(call.const(dims[0]), (tuple, list)):
        dims = call.const(dims[0])
    dims = [d % len(dims) for d in call.const(list(dims))]
    moved = [i for i, d in enumerate(dims) if d != i]
    if len(moved) != 2 or 0 in moved:
        call.refuse(f"permute{tuple(dims)}: only a swap of two dimensions after the batch (a "
                    "transpose) has an IR op")
    return Layer("transpose", {"dim0": moved[0], "dim1": moved[1]}, [call.tensor(x)])


def _getitem(call, container, index):
    if not call.is_tensor(container):
        if not isinstance(index, int):
            call.refuse(f"takes {index!r} of a tuple; only single elements map")
        return TupleElement(container, index)
    parts = index if isinstance(index, tuple) else (index,)
    ints = [i for i, part in enumerate(parts) if isinstance(part, int)]
    full = all(part == slice(None) for i, part in enumerate(parts) if i not in ints)
    if len(ints) != 1 or not full or ints[0] == 0:
        call.refuse(f"indexes with {index!r}: only one integer index after the batch with full "
                    "slices elsewhere (x[:, 0]: a select) has an IR op")
    return Layer("select", {"dim": ints[0], "index": parts[ints[0]]}, [call.tensor(container)])


def _mean(call, x, dim, keepdim=False, dtype=None):
    dim = call.const(dim)
    if isinstance(dim, (tuple, list)) and len(dim) == 1:
        dim = dim[0]
    if not isinstance(dim, int) or keepdim or dtype is not None:
        call.refuse(f"mean(dim={dim!r}, keepdim={keepdim}, dtype={dtype}): the IR's mean "
                    "averages one dimension away")
    return Layer("mean", {"dim": dim}, [call.tensor(x)])


# ---- the tables ----

MODULES = {
    nn.Conv2d: _conv2d,
    nn.BatchNorm2d: _batchnorm2d,
    nn.Linear: _linear,
    nn.LayerNorm: _layernorm,
    nn.ReLU: lambda call, m: _relu(call, call.module_input(), m.inplace),
    nn.GELU: lambda call, m: _gelu(call, call.module_input(), m.approximate),
    nn.MaxPool2d: lambda call, m: _maxpool2d(call, call.module_input(), m.kernel_size, m.stride,
                                             m.padding, m.dilation, m.ceil_mode,
                                             m.return_indices),
    nn.AvgPool2d: lambda call, m: _avgpool2d(call, call.module_input(), m.kernel_size, m.stride,
                                             m.padding, m.ceil_mode, m.count_include_pad,
                                             m.divisor_override),
    nn.AdaptiveAvgPool2d: lambda call, m: _adaptive_avgpool2d(call, call.module_input(),
                                                              m.output_size),
    nn.Flatten: lambda call, m: _flatten(call, call.module_input(), m.start_dim, m.end_dim),
    nn.Dropout: lambda call, m: _dropout(call, call.module_input(), m.p, True, m.inplace),
    nn.Identity: lambda call, m: PassThrough(call.module_input()),
    nn.Embedding: _embedding,
    nn.MultiheadAttention: _multihead_attention,
}

_INPUT = ("input", REQUIRED)
_MAXPOOL = (_INPUT, ("kernel_size", REQUIRED), ("stride", None), ("padding", 0),
            ("dilation", 1), ("ceil_mode", False), ("return_indices", False))
_AVGPOOL = (_INPUT, ("kernel_size", REQUIRED), ("stride", None), ("padding", 0),
            ("ceil_mode", False), ("count_include_pad", True), ("divisor_override", None))
_CAT = (("tensors", REQUIRED), ("dim", 0))

FUNCTIONS = {
    F.relu: Entry((_INPUT, ("inplace", False)), _relu),
    torch.relu: Entry((_INPUT,), _relu),
    torch.relu_: Entry((_INPUT,), lambda call, x: _relu(call, x, inplace=True)),
    F.gelu: Entry((_INPUT, ("approximate", "none")), _gelu),
    F.max_pool2d: Entry(_MAXPOOL, _maxpool2d),
    F.avg_pool2d: Entry(_AVGPOOL, _avgpool2d),
    F.adaptive_avg_pool2d: Entry((_INPUT, ("output_size", REQUIRED)), _adaptive_avgpool2d),
    F.dropout: Entry((_INPUT, ("p", 0.5), ("training", True), ("inplace", False)), _dropout),
    torch.flatten: Entry((_INPUT, ("start_dim", 0), ("end_dim", -1)), _flatten),
    torch.cat: Entry(_CAT, _concat, {"axis": "dim"}),
    torch.concat: Entry(_CAT, _concat, {"axis": "dim"}),
    torch.concatenate: Entry(_CAT, _concat, {"axis": "dim"}),
    operator.add: Entry((("a", REQUIRED), ("b", REQUIRED)), _add),
    operator.iadd: Entry((("a", REQUIRED), ("b", REQUIRED)),
                         lambda call, a, b: _add(call, a, b, inplace=True)),
    torch.add: Entry((_INPUT, ("other", REQUIRED), ("alpha", 1)), _add),
    operator.getitem: Entry((("a", REQUIRED), ("b", REQUIRED)), _getitem),
    torch.transpose: Entry((_INPUT, ("dim0", REQUIRED), ("dim1", REQUIRED)), _transpose),
    torch.permute: Entry((_INPUT, ("dims", REQUIRED)), _permute),
    torch.mean: Entry((_INPUT, ("dim", REQUIRED), ("keepdim", False), ("dtype", None)), _mean),
}

_SELF = ("self", REQUIRED)

METHODS = {
    "relu": Entry((_SELF,), _relu),
    "relu_": Entry((_SELF,), lambda call, x: _relu(call, x, inplace=True)),
    "add": Entry((_SELF, ("other", REQUIRED), ("alpha", 1)), _add),
    "add_": Entry((_SELF, ("other", REQUIRED), ("alpha", 1)),
                  lambda call, x, other, alpha: _add(call, x, other, alpha, inplace=True)),
    "flatten": Entry((_SELF, ("start_dim", 0), ("end_dim", -1)), _flatten),
    "view": Entry((_SELF, ("*", REQUIRED)), _view_as_flatten),
    "reshape": Entry((_SELF, ("*", REQUIRED)), _view_as_flatten),
    "contiguous": Entry((_SELF,), lambda call, x: PassThrough(call.tensor(x))),
    "transpose": Entry((_SELF, ("dim0", REQUIRED), ("dim1", REQUIRED)), _transpose),
    "permute": Entry((_SELF, ("*", REQUIRED)), _permute),
    "mean": Entry((_SELF, ("dim", REQUIRED), ("keepdim", False), ("dtype", None)), _mean),
}

# Well-known things the IR has no op for as they are, with what maps instead.
_LAYERS = ("write the block from nn.MultiheadAttention (batch_first=True), nn.LayerNorm and "
           "nn.Linear, or with F.scaled_dot_product_attention in the GPT form (docs/models.md, "
           "Transformers)")
NOT_YET = {
    F.multi_head_attention_forward: "attention as a function: " + _LAYERS,
    nn.TransformerEncoderLayer: "a whole transformer layer as one module: " + _LAYERS,
    nn.TransformerDecoderLayer: "a whole transformer layer as one module: " + _LAYERS,
    F.embedding: "an embedding as a function of a weight tensor: use nn.Embedding",
}

IR_OPS = "conv2d, batchnorm2d, relu, gelu, maxpool2d, avgpool2d, adaptive_avgpool2d, " \
         "linear, flatten, dropout, concat, add, layernorm, embedding, position_embedding, " \
         "multihead_attention, transpose, class_token, select, mean"  # planner/graph.h
