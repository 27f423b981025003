"""The op table: which torch modules, functions and tensor methods become which IR layer.

Three tables, one entry per thing torch.fx can record:
  MODULES    type of a leaf module (call_module) -> mapper(call, module)
  FUNCTIONS  the function object (call_function) -> (parameters, mapper(call, args))
  METHODS    tensor method name (call_method)    -> (parameters, mapper(call, args))
A mapper returns a `Layer` (an IR op with its attributes and tensor inputs) or a `PassThrough`
(the value is its input: nn.Identity, .contiguous()), or calls `call.refuse(why)` for settings the
IR cannot express. Anything not in a table is refused by the tracer, naming it; NOT_YET says
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
    if approximate != "none":
        call.refuse(f"approximate={approximate!r}: the IR's gelu is the exact (erf) form")
    return Layer("gelu", {}, [call.tensor(x)])


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
    if start_dim % rank != 1 or end_dim % rank != rank - 1:
        call.refuse(f"flatten(start_dim={start_dim}, end_dim={end_dim}) of a rank-{rank} tensor: "
                    "the IR's flatten joins every dimension after the batch (start_dim=1, "
                    "end_dim=-1)")
    return Layer("flatten", {}, [call.tensor(x)])


def _view_as_flatten(call, x, *shape):
    # x.view(x.size(0), -1) and x.reshape(N, -1): a flatten when the result has exactly one
    # dimension after the batch; any other reshape has no IR op yet.
    per_sample = call.shape(x)
    result = call.result_shape()
    if result is None or len(result) != 1 or result[0] != _prod(per_sample):
        call.refuse(f"{call.node.target} to {result} per sample: only a reshape to "
                    "[batch, -1] (a flatten) has an IR op")
    return Layer("flatten", {}, [call.tensor(x)])


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
}

# Well-known things the IR has no op for yet, with what they wait for.
_ATTENTION = "attention (the transformer ops ViT and GPT need are not in the graph IR yet)"
NOT_YET = {
    F.scaled_dot_product_attention: _ATTENTION,
    F.multi_head_attention_forward: _ATTENTION,
    nn.MultiheadAttention: _ATTENTION,
    nn.TransformerEncoderLayer: _ATTENTION,
    nn.TransformerDecoderLayer: _ATTENTION,
    nn.Embedding: "embedding (token inputs are not in the graph IR yet)",
    F.embedding: "embedding (token inputs are not in the graph IR yet)",
    operator.getitem: "indexing and slicing (not in the graph IR yet)",
}

IR_OPS = "conv2d, batchnorm2d, relu, gelu, maxpool2d, avgpool2d, adaptive_avgpool2d, " \
                 "linear, flatten, dropout, concat, add, layernorm"  # planner/graph.h
