"""Turns a torch module into a deepool.graph document: trace with torch.fx, run once on an example
input, map every node through the op table (ops.py), check each layer's shape and the module's
state_dict against the graph.

Layer names: a leaf module's call is named by its qualified path (so "<layer>.<param>" is its
state_dict key), a second call of a parameterless module `<path>_1`, `<path>_2` (as torch.fx
names repeated calls); a functional call is named after the module whose forward makes it,
`<module path>.<name>` with the function's name as torch.fx writes it (`relu`, `add`, `flatten`,
`cat`, `avg_pool2d`) and `_1`, `_2` for repeats within that module. ZOO_NAMES keeps the model
zoo's names for torchvision's Inception blocks (docs/models.md, "Layer names"), so an imported
inception_v3 equals the zoo's graph and matches profiles measured on it. A pattern of several
nodes (patterns.py: ViT's class token and position table, GPT's positions and attention) is one
layer named by the parameter or module it stands for.
"""
import os
import re
import traceback
from collections import Counter
from dataclasses import dataclass

import torch
import torch.fx as fx
from torch import nn

from . import ir, ops, patterns
from .errors import EXIT_FAILED, EXIT_REFUSED, EXIT_USAGE, ImportFailure, one_line

EXAMPLE_BATCH = 2  # batch norm in training mode needs more than one value per channel

# Per module class: torch.fx-style local names of functional calls -> the zoo's names.
_INCEPTION = "torchvision.models.inception."
ZOO_NAMES = {
    _INCEPTION + "InceptionA": {"avg_pool2d": "branch_pool_avg", "cat": "concat"},
    _INCEPTION + "InceptionB": {"max_pool2d": "branch_pool_max", "cat": "concat"},
    _INCEPTION + "InceptionC": {"avg_pool2d": "branch_pool_avg", "cat": "concat"},
    _INCEPTION + "InceptionD": {"max_pool2d": "branch_pool_max", "cat": "concat"},
    _INCEPTION + "InceptionE": {"cat": "branch3x3_concat", "cat_1": "branch3x3dbl_concat",
                                "avg_pool2d": "branch_pool_avg", "cat_2": "concat"},
    _INCEPTION + "InceptionAux": {"avg_pool2d": "avg_pool",
                                  "adaptive_avg_pool2d": "adaptive_avg_pool"},
}

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_FRAME = re.compile(r'File "(.+?)", line (\d+), in ')


class Refused(Exception):
    """Raised by a mapper (through Call.refuse); the converter adds the node's context."""


def type_name(cls):
    """torch.nn.Conv2d for torch.nn's classes, module.QualName for the rest."""
    if getattr(nn, cls.__name__, None) is cls:
        return "torch.nn." + cls.__name__
    return f"{cls.__module__}.{cls.__qualname__}"


_FUNCTION_NAMES = None


def function_name(fn):
    """torch.nn.functional.relu, torch.cat, operator.add: where users find the function."""
    global _FUNCTION_NAMES
    if _FUNCTION_NAMES is None:
        import math
        import operator
        _FUNCTION_NAMES = {}
        for prefix, namespace in (("math", math), ("operator", operator), ("torch", torch),
                                  ("torch.nn.functional", torch.nn.functional)):
            for attr in dir(namespace):
                value = getattr(namespace, attr, None)
                if callable(value) and not attr.startswith("_"):
                    try:
                        _FUNCTION_NAMES[value] = f"{prefix}.{attr}"
                    except TypeError:  # unhashable
                        pass
    try:
        known = _FUNCTION_NAMES.get(fn)
    except TypeError:
        known = None
    if known:
        return known
    module = getattr(fn, "__module__", None) or "?"
    return f"{module}.{getattr(fn, '__qualname__', getattr(fn, '__name__', repr(fn)))}"


def user_location(frames):
    """`file:line` of the innermost frame outside torch and this importer, or None."""
    for filename, line in reversed(frames):
        path = os.path.abspath(filename)
        if not path.startswith(_TORCH_DIR) and not path.startswith(_OWN_DIR):
            relative = os.path.relpath(path)
            return f"{relative if not relative.startswith('..') else path}:{line}"
    return None


def node_location(node):
    return user_location([(f, int(n)) for f, n in _FRAME.findall(node.stack_trace or "")])


def exception_location(exc):
    return user_location([(f.filename, f.lineno) for f in traceback.extract_tb(exc.__traceback__)])


def _scope(node):
    """(path, class) of the module whose forward made this node; ("", None) at the top level."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return "", None
    path, cls = list(stack.values())[-1]
    return path, cls


@dataclass
class Info:
    """What the example run produced at one node."""
    kind: str  # "tensor", "value" (no tensors inside: ints, sizes, None) or "other"
    shape: tuple = ()  # with the batch dimension, for tensors
    value: object = None  # for values
    parts: tuple = ()  # for a tuple of results (nn.MultiheadAttention's), each one's Info


def _describe(result):
    if isinstance(result, torch.Tensor):
        return Info("tensor", tuple(result.shape))
    if _holds_tensor(result):
        parts = tuple(_describe(r) for r in result) if isinstance(result, tuple) else ()
        return Info("other", parts=parts)
    return Info("value", value=result)


def _holds_tensor(value):
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (tuple, list)):
        return any(_holds_tensor(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_tensor(v) for v in value.values())
    return False


class _RunFailed(Exception):
    def __init__(self, node, cause):
        super().__init__(str(cause))
        self.node = node
        self.cause = cause


class _Recorder(fx.Interpreter):
    """Runs the traced module and keeps, per node, what its result was (not the result)."""

    def __init__(self, gm):
        super().__init__(gm)
        self.info = {}

    def run_node(self, n):
        try:
            result = super().run_node(n)
        except _RunFailed:
            raise
        except Exception as e:  # the user's code (or torch on the user's input) raised
            raise _RunFailed(n, e) from e
        self.info[n] = _describe(result)
        return result


class Call:
    """What a mapper sees of one node: its arguments, the example run's shapes, and refuse()."""

    def __init__(self, node, module, info):
        self.node = node
        self.module = module
        self._info = info

    def refuse(self, why):
        raise Refused(why)

    def is_tensor(self, arg):
        return isinstance(arg, fx.Node) and self._info[arg].kind == "tensor"

    def tensor(self, arg):
        if not self.is_tensor(arg):
            self.refuse(f"argument {arg!r} is not a tensor the model computed")
        return arg

    def shape(self, arg):
        """Per-sample shape of a tensor argument."""
        return list(self._info[self.tensor(arg)].shape[1:])

    def result_shape(self):
        info = self._info[self.node]
        return list(info.shape[1:]) if info.kind == "tensor" else None

    def const(self, value):
        """A non-tensor argument as the example run computed it (x.size(2) -> 7)."""
        if isinstance(value, fx.Node):
            info = self._info[value]
            if info.kind != "value":
                self.refuse(f"argument {value.name} is a tensor where the IR needs a number")
            return info.value
        if isinstance(value, (tuple, list)):
            return type(value)(self.const(v) for v in value)
        return value

    def module_input(self):
        if len(self.node.args) != 1 or self.node.kwargs:
            self.refuse("the module is called with more than one argument")
        return self.tensor(self.node.args[0])

    def resolved(self, value):
        """Nodes with tensors stay nodes (a tensor, or a tuple such as nn.MultiheadAttention's
        results); every other argument becomes its value from the example run."""
        if isinstance(value, fx.Node):
            return value if self._info[value].kind != "value" else self.const(value)
        if isinstance(value, (tuple, list)):
            return type(value)(self.resolved(v) for v in value)
        return value

    def bind(self, entry):
        """The node's arguments in the entry's parameter order, defaults filled in."""
        params = list(entry.params)
        args = list(self.node.args)
        rest = []
        if params and params[-1][0] == "*":
            params.pop()
            args, rest = args[:len(params)], args[len(params):]
        if len(args) > len(params):
            self.refuse(f"takes at most {len(params)} positional arguments here, got {len(args)}")
        values = dict(zip((name for name, _ in params), args))
        for key, value in self.node.kwargs.items():
            name = entry.aliases.get(key, key)
            if name not in dict(params) or name in values:
                self.refuse(f"argument {key}= is not understood")
            values[name] = value
        bound = []
        for name, default in params:
            if name not in values and default is ops.REQUIRED:
                self.refuse(f"argument {name} is missing")
            bound.append(self.resolved(values.get(name, default)))
        return bound + [self.resolved(v) for v in rest]


class _Namer:
    def __init__(self, module_paths):
        self._taken = set(module_paths) | {ir.INPUT_NAME}
        self._exact = set()
        self._module_calls = Counter()
        self._local = Counter()

    def module_call(self, path):
        """(name, call index): the path itself for the first call."""
        index = self._module_calls[path]
        self._module_calls[path] += 1
        if index == 0:
            return path, 0
        return self._unique(f"{path}_{index}"), index

    def exact(self, name, own_modules):
        """The name itself (a bare parameter's key, a pattern's module path), or None if another
        layer has it; a module the pattern stands for (wpe) leaves its path free."""
        if name in self._exact or (name in self._taken and name not in own_modules):
            return None
        self._taken.add(name)
        self._exact.add(name)
        return name

    def functional(self, scope, scope_cls, base):
        count = self._local[(scope, base)]
        self._local[(scope, base)] += 1
        local = base if count == 0 else f"{base}_{count}"
        if scope_cls is not None:
            local = ZOO_NAMES.get(f"{scope_cls.__module__}.{scope_cls.__qualname__}", {}).get(
                local, local)
        return self._unique(f"{scope}.{local}" if scope else local)

    def _unique(self, name):
        candidate, k = name, 0
        while candidate in self._taken:
            k += 1
            candidate = f"{name}_{k}"
        self._taken.add(candidate)
        return candidate


def _base_name(node):
    if node.op == "call_method":
        base = node.target
    else:
        base = getattr(node.target, "__name__", "op")
    base = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", base).lower().strip("_")
    return base or "op"


@dataclass
class Result:
    text: str  # the deepool.graph document
    layers: list  # the layer dicts written
    # (deepool key, module state_dict key) for every state_dict entry: equal but for the GPT
    # attention pattern's projections (patterns.py), which take nn.MultiheadAttention's names.
    weights: list


class Converter:
    def __init__(self, root, input_shape, input_dtype, name, loss_weights):
        self.root = root
        self.input_shape = list(input_shape)
        self.input_dtype = input_dtype
        self.name = name
        self.loss_weights = loss_weights

    # ---- driver ----

    def run(self):
        tracer = fx.Tracer()
        tracer.record_stack_traces = True
        try:
            graph = tracer.trace(self.root)
        except Exception as e:
            where = exception_location(e)
            raise ImportFailure(EXIT_REFUSED, f"torch.fx cannot trace the module"
                                f"{' at ' + where if where else ''}: {one_line(e)}") from e
        self.graph = graph
        self.gm = fx.GraphModule(tracer.root, graph)
        inputs = [n for n in graph.nodes if n.op == "placeholder"]
        needed = [n.target for n in inputs[1:] if not n.args]  # no default value
        if needed:
            raise ImportFailure(EXIT_REFUSED, f"forward takes {1 + len(needed)} inputs "
                                f"({', '.join([inputs[0].target] + needed)}); a deepool graph has "
                                "one")
        self.info = self._example_run()
        self.groups, self.attention_reasons = patterns.Finder(
            self.gm, list(graph.nodes), self.info, lambda node: _scope(node)[0]).find()
        return self._map()

    def _example(self):
        shape = [EXAMPLE_BATCH] + self.input_shape
        if self.input_dtype.is_floating_point:
            generator = torch.Generator().manual_seed(0)
            return torch.randn(shape, generator=generator).to(self.input_dtype)
        return torch.zeros(shape, dtype=self.input_dtype)  # valid indices for any embedding

    def _example_run(self):
        # The run must not change the module: batch norm in training mode updates its running
        # statistics, which the weights file should hold as the factory made them.
        saved = {k: b.detach().clone() for k, b in self.root.named_buffers()}
        example = self._example()
        recorder = _Recorder(self.gm)
        try:
            with torch.no_grad():
                recorder.run(example)
        except _RunFailed as failed:
            hint = ""
            if failed.node.op == "call_module" and example.is_floating_point() and isinstance(
                    self.gm.get_submodule(failed.node.target), nn.Embedding):
                hint = " (an embedding reads token ids: import with --input-dtype int64)"
            raise ImportFailure(
                EXIT_FAILED,
                f"running the module on an example input of shape {list(example.shape)} failed at "
                f"{self._where(failed.node, failed.cause)}: {one_line(failed.cause)}{hint}"
            ) from None
        finally:
            with torch.no_grad():
                for k, b in self.root.named_buffers():
                    b.copy_(saved[k])
        return recorder.info

    # ---- context for messages ----

    def _describe_node(self, node):
        if node.op == "call_module":
            module = self.gm.get_submodule(node.target)
            return node.target, f"call_module {type_name(type(module))}"
        scope, _ = _scope(node)
        if node.op == "call_function":
            return scope, f"call_function {function_name(node.target)}"
        if node.op == "call_method":
            return scope, f"call_method .{node.target}()"
        return scope, f"{node.op} {node.target}"

    def _where(self, node, exc=None):
        path, op = self._describe_node(node)
        location = node_location(node) or (exception_location(exc) if exc else None)
        text = f'node "{node.name}" in module "{path or "(top level)"}" ({op})'
        return text + (f" at {location}" if location else "")

    def _refuse(self, node, why):
        raise ImportFailure(EXIT_REFUSED, f"{self._where(node)}: {why}")

    # ---- mapping ----

    def _lookup(self, node, call):
        if node.op == "call_module":
            module = call.module
            mapper = ops.MODULES.get(type(module))
            if mapper is None:
                self._refuse(node, self._no_op(type(module), type_name(type(module))))
            return mapper(call, module)
        if node.op == "call_function":
            entry = ops.FUNCTIONS.get(node.target) if _hashable(node.target) else None
            if entry is None:
                self._refuse(node, self._no_op(node.target, function_name(node.target)))
        else:
            entry = ops.METHODS.get(node.target)
            if entry is None:
                self._refuse(node, f"no deepool op for the tensor method .{node.target}() "
                             f"(the graph IR has {ops.IR_OPS})")
        return entry.mapper(call, *call.bind(entry))

    @staticmethod
    def _no_op(key, name):
        reason = ops.NOT_YET.get(key) if _hashable(key) else None
        if reason:
            return f"no deepool op for {name}: {reason}"
        return f"no deepool op for {name} (the graph IR has {ops.IR_OPS})"

    def _map(self):
        nodes = list(self.graph.nodes)
        order = {node: i for i, node in enumerate(nodes)}
        called = [n.target for n in nodes if n.op == "call_module"]
        if ir.INPUT_NAME in called:
            self._refuse(next(n for n in nodes if n.target == ir.INPUT_NAME),
                         f'a module named "{ir.INPUT_NAME}" clashes with the graph input\'s name')
        for node in nodes:  # the attention's cause first, not the view before it that has no op
            if node in self.attention_reasons:
                self._refuse(node, "F.scaled_dot_product_attention maps only in the GPT form "
                             f"(docs/models.md, Transformers): {self.attention_reasons[node]}")
        namer = _Namer(called)
        group_of = {node: group for group in self.groups for node in group.nodes}
        layer_of = {}  # fx node -> layer name ("input" for the graph input)
        element_of = {}  # fx node whose value is a tuple -> the element its layer is
        shapes = {ir.INPUT_NAME: self.input_shape}  # layer name -> IR per-sample shape
        layers, weights = [], []
        outputs = None
        for node in nodes:
            info = self.info.get(node)
            if node.op == "placeholder":
                if not layer_of and info is not None and info.kind == "tensor":
                    layer_of[node] = ir.INPUT_NAME
                elif info is not None and info.kind != "value":
                    self._refuse(node, "forward takes more than one tensor input; a deepool graph "
                                 "has one")
                continue
            if node.op == "output":
                outputs = self._outputs(node, layer_of)
                continue
            group = group_of.get(node)
            if group is not None:
                if node is group.output:
                    name, shape, layer = self._group_layer(node, group, namer, layer_of, shapes)
                    weights += group.keys
                    shapes[name] = shape
                    layer_of[node] = name
                    layers.append(layer)
                continue  # the group's layer stands for it
            if node.op == "get_attr":
                self._refuse(node, f"reads the tensor attribute {node.target} directly (a "
                             "parameter, buffer or constant used outside a module call); only "
                             "module calls in the op table, a class token and a position table "
                             "(docs/models.md) may own tensors")
            if info.kind == "value":
                continue  # x.size(0) and the like: read as numbers by the layers that use them
            if node.op == "call_function" and isinstance(node.target, type) and issubclass(
                    node.target, tuple):
                continue  # a (named) tuple of outputs, taken apart at the output
            module = self.gm.get_submodule(node.target) if node.op == "call_module" else None
            call = Call(node, module, self.info)
            try:
                mapped = self._lookup(node, call)
                if isinstance(mapped, ops.TupleElement):
                    if element_of.get(mapped.container) != mapped.index:
                        call.refuse(f"element {mapped.index} of {mapped.container.name}'s results "
                                    "is not computed by a layer (nn.MultiheadAttention's first "
                                    "result, the attention output, is; its weights are not)")
                    mapped = ops.PassThrough(mapped.container)
                if isinstance(mapped, ops.PassThrough):
                    source = layer_of[mapped.input]
                    self._check_shape(node, "pass-through", shapes[source])
                    layer_of[node] = source
                    continue
                if mapped.inplace:
                    self._check_inplace(node, mapped.inputs[0], order)
                if node.op == "call_module":
                    name, index = namer.module_call(node.target)
                    if index > 0 and module.state_dict():
                        self._refuse(node, "the module is called more than once and owns "
                                     "parameters or buffers; a deepool graph has no shared weights")
                else:
                    scope, scope_cls = _scope(node)
                    name = namer.functional(scope, scope_cls, _base_name(node))
                inputs = [layer_of[n] for n in mapped.inputs]
                self._check_dtype(node, mapped.op, inputs)
                try:
                    shape = ir.infer_shape(mapped.op, mapped.attrs, [shapes[i] for i in inputs])
                except ir.ShapeError as e:
                    self._refuse(node, f"deepool's {mapped.op} refuses it: {e}")
                self._check_shape(node, mapped.op, shape, mapped.value_index)
                if mapped.value_index is not None:
                    element_of[node] = mapped.value_index
                if module is not None:
                    weights += self._owned_keys(node, module, mapped, name)
            except Refused as refused:
                self._refuse(node, str(refused))
            shapes[name] = shape
            layer_of[node] = name
            layers.append(ir.layer_json(name, mapped.op, inputs, mapped.attrs))
        self._tie(layers, weights, self._check_state(weights))
        position = {key: i for i, key in enumerate(self.root.state_dict())}
        weights.sort(key=lambda pair: position[pair[1]])  # the module's order
        text = ir.graph_text(self.name, self.input_shape, layers, outputs,
                             "int64" if self.input_dtype == torch.int64 else "float32")
        return Result(text, layers, weights)

    def _group_layer(self, node, group, namer, layer_of, shapes):
        """(name, shape, layer dict) of a pattern's layer (patterns.py), checked as any other."""
        name = namer.exact(group.name,
                           {n.target for n in group.nodes if n.op == "call_module"})
        if name is None:
            self._refuse(node, f'the {group.op} layer this pattern makes would be named '
                         f'"{group.name}", a name another layer has')
        inputs = [layer_of[n] for n in group.inputs]
        self._check_dtype(node, group.op, inputs)
        try:
            shape = ir.infer_shape(group.op, group.attrs, [shapes[i] for i in inputs])
        except ir.ShapeError as e:
            self._refuse(node, f"deepool's {group.op} refuses it: {e}")
        self._check_shape(node, group.op, shape)
        state = self.root.state_dict()
        missing = [module_key for _, module_key in group.keys if module_key not in state]
        if missing:
            self._refuse(node, f"{group.op} needs the state_dict entries {missing}, which the "
                         "module does not have")
        return name, shape, ir.layer_json(name, group.op, inputs, group.attrs)

    def _check_dtype(self, node, op, inputs):
        """Token ids are read by embeddings only, and embeddings read only token ids."""
        reads_input = ir.INPUT_NAME in inputs
        tokens = self.input_dtype == torch.int64
        if op == "embedding" and not tokens:
            self._refuse(node, "an embedding reads token ids: import with --input-dtype int64")
        if reads_input and tokens and op != "embedding":
            self._refuse(node, f"deepool's {op} reads float32; int64 token ids are read by "
                         "embeddings only")

    def _check_shape(self, node, op, ir_shape, value_index=None):
        real = self.info[node].shape
        if value_index is not None:
            parts = self.info[node].parts
            real = parts[value_index].shape if value_index < len(parts) else ()
        if not real or real[0] != EXAMPLE_BATCH:
            self._refuse(node, f"the result has shape {list(real)}: the batch dimension "
                         f"({EXAMPLE_BATCH} in the example run) is not its first")
        if list(real[1:]) != list(ir_shape):
            self._refuse(node, f"shape mismatch: deepool's {op} gives {list(ir_shape)} per sample, "
                         f"the module gave {list(real[1:])}")

    def _check_inplace(self, node, overwritten, order):
        for user in overwritten.users:
            if user is not node and order[user] > order[node]:
                self._refuse(node, f'works in place on "{overwritten.name}", which node '
                             f'"{user.name}" reads afterwards; the traced graph would give it the '
                             "value from before the in-place op")

    def _owned_keys(self, node, module, mapped, name):
        """(deepool key, module key) pairs of a module layer's entries: the same key, since the
        layer is named by the module's path."""
        expected = ir.state_entries(mapped.op, mapped.attrs)
        actual = list(module.state_dict().keys())
        if sorted(actual) != sorted(expected):
            self._refuse(node, f"the module's state_dict has {actual}; deepool's {mapped.op} "
                         f"layer holds {expected}")
        return [(f"{name}.{key}", f"{node.target}.{key}") for key in actual]

    def _check_state(self, weights):
        state_keys = list(self.root.state_dict().keys())
        first_key = {}  # one tensor under two keys: tied weights (GPT-2's lm_head and wte)
        ties = {}  # module key -> the module key the same tensor came under first
        for key, tensor in self.root.state_dict(keep_vars=True).items():
            other = first_key.setdefault(id(tensor), key)
            if other != key:
                ties[key] = other
        owned = {module_key for _, module_key in weights}
        unowned = [k for k in state_keys if k not in owned]
        if unowned:
            modules = sorted({k.rsplit(".", 1)[0] if "." in k else "(top level)" for k in unowned})
            shown = ", ".join(modules[:5]) + (f" and {len(modules) - 5} more" if len(modules) > 5
                                              else "")
            raise ImportFailure(
                EXIT_REFUSED,
                f"{len(unowned)} state_dict entries belong to no layer (modules never called by "
                f"forward on the example input, or tensors it reads directly): {shown}; the "
                f"weights would not match the graph (first: {unowned[0]})")
        return ties

    @staticmethod
    def _tie(layers, weights, ties):
        """Tied weights become the IR's ties (docs/formats.md, "Tied parameters"): the layer of
        the later key gets "tied": {param: the first key}, both as deepool keys."""
        deepool_key = {module_key: key for key, module_key in weights}
        by_name = {layer["name"]: layer for layer in layers}
        for module_key, first in ties.items():
            key = deepool_key[module_key]
            layer_name, param = key.rsplit(".", 1)
            if layer_name not in by_name:
                raise ImportFailure(EXIT_REFUSED, f'state_dict entries "{first}" and '
                                    f'"{module_key}" are one tensor, but "{key}" is not a '
                                    "layer's parameter that deepool can tie")
            by_name[layer_name].setdefault("tied", {})[param] = deepool_key[first]

    def _outputs(self, node, layer_of):
        flat = []

        def walk(value):
            if isinstance(value, fx.Node):
                if value.op == "call_function" and isinstance(value.target, type) and \
                        issubclass(value.target, tuple):
                    walk(list(value.args) + list(value.kwargs.values()))
                elif self.info.get(value) is not None and self.info[value].kind == "value":
                    return  # a number or None beside the outputs (e.g. aux=None)
                else:
                    flat.append(value)
            elif isinstance(value, (tuple, list)):
                for v in value:
                    walk(v)
            elif isinstance(value, dict):
                for v in value.values():
                    walk(v)

        walk(node.args[0])
        if not flat:
            self._refuse(node, "forward returns no tensor")
        names = []
        for value in flat:
            name = layer_of.get(value)
            if name is None or name == ir.INPUT_NAME:
                self._refuse(node, f"output {value.name} is not computed by a layer")
            names.append(name)
        weights = self.loss_weights or [1.0] * len(names)
        if len(weights) != len(names):
            raise ImportFailure(
                EXIT_USAGE, f"--loss-weights gives {len(weights)} weights, but forward returns "
                f"{len(names)} outputs ({', '.join(names)})")
        return [{"layer": n, "loss_weight": float(w)} for n, w in zip(names, weights)]


def _hashable(value):
    try:
        hash(value)
        return True
    except TypeError:
        return False
