"""Functional patterns that stand for one IR layer together: found before the node-by-node
mapping (convert.py), each a `Group` of fx nodes that becomes one layer at its output node.

  class token        torchvision ViT's `self.class_token.expand(n, -1, -1)` and
                     `torch.cat([token, x], dim=1)`             -> class_token, named the parameter
  bare positions     `x + self.pos_embedding` of a [1, T, D] parameter
                                                                -> position_embedding
                                                                   (bare_parameter), named it
  positions          `wpe(torch.arange(0, T))` added to a [T, D] sequence
                                                                -> position_embedding, named wpe
  GPT attention      `q, k, v = c_attn(x).split(D, dim=2)`, each `.view(B, T, H, D // H)
                     .transpose(1, 2)`, `F.scaled_dot_product_attention(q, k, v, ...)`,
                     `.transpose(1, 2).contiguous().view(B, T, D)`, `c_proj(...)`
                                                                -> multihead_attention, named the
                                                                   module whose forward calls it

Shapes come from the example run, so the pattern is checked on what the code computed, not on
how it spelled it (view or reshape, transpose or permute, split or chunk). An attention call that
is not in the GPT form gets a reason, which the converter reports at that node.

GPT attention's weights map to nn.MultiheadAttention's names: c_attn (nn.Linear(D, 3D)) holds q,
k and v as rows [0, D), [D, 2D), [2D, 3D) of its [3D, D] weight, exactly in_proj_weight's layout,
and viewing D features as H heads of D/H is how nn.MultiheadAttention splits them; so
`<attn>.in_proj_weight` is `<attn>.c_attn.weight`, `in_proj_bias` is `c_attn.bias`, and
`out_proj.weight`/`out_proj.bias` are `c_proj`'s. Group.keys lists these (deepool key, module
key) pairs; --weights writes the deepool keys.
"""
import operator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

_ADDS = (operator.add, torch.add)


@dataclass
class Group:
    output: object  # the fx node whose value the layer is
    nodes: set  # every node the layer stands for, output included
    op: str
    attrs: dict
    inputs: list  # fx nodes read from outside the group
    name: str  # the layer's name
    keys: list = field(default_factory=list)  # (deepool state key, module state_dict key)


class _NoMatch(Exception):
    pass


class Finder:
    """Finds the groups of one traced module; `info` is the converter's example-run record."""

    def __init__(self, gm, nodes, info, scope_of):
        self.gm = gm
        self.nodes = nodes
        self.info = info
        self.scope_of = scope_of  # node -> module path whose forward made it
        self.groups = []
        self.reasons = {}  # attention node -> why it is not in the GPT form

    def find(self):
        for node in self.nodes:
            if node.op == "get_attr":
                self._try(self._class_token, node)
                self._try(self._bare_positions, node)
            elif node.op == "call_module" and isinstance(self._module(node), nn.Embedding):
                self._try(self._positions, node)
            elif node.op == "call_function" and node.target is F.scaled_dot_product_attention:
                try:
                    self._attention(node)
                except _NoMatch as e:
                    self.reasons[node] = str(e)
        return self.groups, self.reasons

    # ---- helpers ----

    def _try(self, finder, node):
        try:
            finder(node)
        except _NoMatch:
            pass

    def _module(self, node):
        return self.gm.get_submodule(node.target)

    def _shape(self, node):
        info = self.info.get(node) if isinstance(node, torch.fx.Node) else None
        if info is None or info.kind != "tensor":
            raise _NoMatch(f"{getattr(node, 'name', node)} is not a tensor")
        return list(info.shape)

    def _value(self, value):
        if isinstance(value, torch.fx.Node):
            info = self.info.get(value)
            if info is None or info.kind != "value":
                raise _NoMatch(f"{value.name} is not a number")
            return info.value
        return value

    @staticmethod
    def _only_user(node):
        users = list(node.users)
        if len(users) != 1:
            raise _NoMatch(f"{node.name} is used {len(users)} times")
        return users[0]

    def _parameter(self, node):
        try:
            value = self.gm.get_parameter(node.target)
        except AttributeError:
            raise _NoMatch(f"{node.target} is not a parameter") from None
        return list(value.shape)

    @staticmethod
    def _is_method(node, *names):
        return node.op == "call_method" and node.target in names

    def _add_operands(self, node, known):
        """The other operand of an add whose one operand is `known`."""
        if node.op != "call_function" or node.target not in _ADDS or node.kwargs or \
                len(node.args) != 2 or known not in node.args:
            raise _NoMatch(f"{node.name} is not an add")
        other = node.args[1] if node.args[0] is known else node.args[0]
        if other is known:
            raise _NoMatch(f"{node.name} adds a value to itself")
        return other

    # ---- torchvision ViT ----

    def _class_token(self, token):
        shape = self._parameter(token)
        if len(shape) != 3 or shape[:2] != [1, 1]:
            raise _NoMatch("not a [1, 1, D] token")
        expand = self._only_user(token)
        if not self._is_method(expand, "expand"):
            raise _NoMatch("not expanded")
        cat = self._only_user(expand)
        if cat.op != "call_function" or cat.target not in (torch.cat, torch.concat):
            raise _NoMatch("not concatenated")
        tensors = cat.args[0] if cat.args else cat.kwargs.get("tensors")
        dim = cat.args[1] if len(cat.args) > 1 else cat.kwargs.get("dim", 0)
        if not isinstance(tensors, (list, tuple)) or len(tensors) != 2 or tensors[0] is not expand:
            raise _NoMatch("not prepended to one sequence")
        x = tensors[1]
        if len(self._shape(x)) != 3 or self._value(dim) % 3 != 1 or \
                self._shape(expand) != [self._shape(x)[0], 1, shape[2]]:
            raise _NoMatch("not prepended along the tokens")
        self.groups.append(Group(cat, {token, expand, cat}, "class_token", {}, [x], token.target,
                                 [(token.target, token.target)]))

    def _bare_positions(self, table):
        shape = self._parameter(table)
        add = self._only_user(table)
        x = self._add_operands(add, table)
        x_shape = self._shape(x)
        if len(shape) != 3 or shape[0] != 1 or x_shape[1:] != shape[1:]:
            raise _NoMatch("not a [1, T, D] table added to [N, T, D]")
        self.groups.append(Group(add, {table, add}, "position_embedding",
                                 {"max_positions": shape[1], "bare_parameter": True}, [x],
                                 table.target, [(table.target, table.target)]))

    # ---- GPT ----

    def _positions(self, wpe):
        (positions,) = wpe.args if len(wpe.args) == 1 and not wpe.kwargs else (None,)
        if not isinstance(positions, torch.fx.Node) or positions.op != "call_function" or \
                positions.target is not torch.arange or len(positions.users) != 1:
            raise _NoMatch("not looked up at torch.arange positions")
        args = [self._value(a) for a in positions.args]
        start, step = (args[0], 1) if len(args) == 2 else (0, 1) if len(args) == 1 else \
            (args[0], args[2])
        if start != 0 or step != 1 or positions.kwargs.get("dtype") not in (None, torch.long):
            raise _NoMatch("positions not 0, 1, ..., T - 1")
        add = self._only_user(wpe)
        x = self._add_operands(add, wpe)
        (tokens,) = self._shape(positions)
        if self._shape(x)[1:] != [tokens, self._module(wpe).embedding_dim]:
            raise _NoMatch("added to something other than a [T, D] sequence")
        key = f"{wpe.target}.weight"
        self.groups.append(Group(add, {positions, wpe, add}, "position_embedding",
                                 {"max_positions": self._module(wpe).num_embeddings}, [x],
                                 wpe.target, [(key, key)]))

    def _attention(self, sdpa):
        names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
                 "enable_gqa")
        bound = dict(zip(names, sdpa.args))
        bound.update(sdpa.kwargs)
        for name, default in (("attn_mask", None), ("scale", None), ("enable_gqa", False)):
            value = bound.get(name, default)
            if isinstance(value, torch.fx.Node) or value != default:
                raise _NoMatch(f"{name}= is set: the IR's multihead_attention has no mask other "
                               "than causal, and the default scale 1/sqrt(head size)")
        split, heads = None, None
        for index, name in enumerate(("query", "key", "value")):
            source, from_split, shape = self._head_view(bound[name], name)
            if split is not None and from_split is not split:
                raise _NoMatch("query, key and value come from different splits")
            split = from_split
            if source.args[1] != index:
                raise _NoMatch(f"the {name} is element {source.args[1]} of the split, not "
                               f"{index} (q, k, v = c_attn(x).split(D, dim=2))")
            heads = shape
        c_attn = split.args[0]
        num_heads, tokens, head_dim = heads
        dim = num_heads * head_dim
        self._check_split(split, dim)
        c_attn_module = self._linear(c_attn, dim, 3 * dim, "c_attn")
        merged, members = self._merge_heads(sdpa, tokens, dim)
        c_proj = self._only_user(merged)
        c_proj_module = self._linear(c_proj, dim, dim, "c_proj")
        bias = c_attn_module.bias is not None
        if (c_proj_module.bias is not None) != bias:
            raise _NoMatch("c_attn and c_proj differ in having a bias: nn.MultiheadAttention's "
                           "projections both have one or neither")
        nodes = {c_attn, split, sdpa, c_proj} | members
        for name in ("query", "key", "value"):
            transposed = bound[name]
            nodes |= {transposed, transposed.args[0], transposed.args[0].args[0]}
        for node in nodes - {c_proj}:
            outside = [u.name for u in node.users if u not in nodes]
            if outside:
                raise _NoMatch(f"{node.name} is also read by {', '.join(outside)}")
        dropout = float(self._value(bound.get("dropout_p", 0.0)))
        causal = bool(self._value(bound.get("is_causal", False)))
        name = self.scope_of(sdpa) or "attention"
        keys = [(f"{name}.in_proj_weight", f"{c_attn.target}.weight"),
                (f"{name}.in_proj_bias", f"{c_attn.target}.bias"),
                (f"{name}.out_proj.weight", f"{c_proj.target}.weight"),
                (f"{name}.out_proj.bias", f"{c_proj.target}.bias")]
        if not bias:  # nn.MultiheadAttention's order, without the biases
            keys = keys[0::2]
        attrs = {"embed_dim": dim, "num_heads": num_heads, "causal": causal, "dropout": dropout,
                 "bias": bias}
        self.groups.append(Group(c_proj, nodes, "multihead_attention", attrs, [c_attn.args[0]],
                                 name, keys))

    def _head_view(self, transposed, name):
        """(getitem of the split, the split, [H, T, D/H]) for q, k or v viewed into heads."""
        form = (f"the {name} is not one third of a split viewed into heads and transposed "
                "(q, k, v = c_attn(x).split(D, dim=2); q.view(B, T, H, D // H).transpose(1, 2)); "
                "separate q, k and v projections have no IR op yet")
        if not isinstance(transposed, torch.fx.Node) or not self._swaps_1_2(transposed):
            raise _NoMatch(form)
        view = transposed.args[0]
        if not self._is_method(view, "view", "reshape"):
            raise _NoMatch(form)
        part = view.args[0]
        if not (isinstance(part, torch.fx.Node) and part.op == "call_function" and
                part.target is operator.getitem and isinstance(part.args[0], torch.fx.Node)):
            raise _NoMatch(form)
        split = part.args[0]
        batch, tokens, features = self._shape(part)
        viewed = self._shape(view)
        if len(viewed) != 4 or viewed[:2] != [batch, tokens] or viewed[2] * viewed[3] != features:
            raise _NoMatch(f"the {name} is not viewed as [B, T, H, D // H]")
        return part, split, [viewed[2], tokens, viewed[3]]

    def _swaps_1_2(self, node):
        if self._is_method(node, "transpose") or (node.op == "call_function" and
                                                  node.target is torch.transpose):
            dims = [self._value(d) % 4 for d in node.args[1:3]]
            return sorted(dims) == [1, 2]
        if self._is_method(node, "permute"):
            dims = node.args[1:]
            if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
                dims = dims[0]
            return [self._value(d) % 4 for d in dims] == [0, 2, 1, 3]
        return False

    def _check_split(self, split, dim):
        if self._is_method(split, "split") or (split.op == "call_function" and
                                               split.target is torch.split):
            kwargs = split.kwargs
            size = self._value(split.args[1] if len(split.args) > 1 else
                               kwargs.get("split_size", kwargs.get("split_size_or_sections")))
            ok = size == dim or (isinstance(size, (list, tuple)) and list(size) == [dim] * 3)
        elif self._is_method(split, "chunk") or (split.op == "call_function" and
                                                 split.target is torch.chunk):
            ok = self._value(split.args[1] if len(split.args) > 1 else
                             split.kwargs.get("chunks")) == 3
        else:
            raise _NoMatch("q, k and v do not come from .split() or .chunk()")
        along = split.args[2] if len(split.args) > 2 else split.kwargs.get("dim", 0)
        if not ok or self._value(along) % 3 != 2:
            raise _NoMatch("the split is not into three [B, T, D] parts along the features")

    def _linear(self, node, in_features, out_features, role):
        module = self._module(node) if node.op == "call_module" else None
        if not isinstance(module, nn.Linear) or (module.in_features, module.out_features) != (
                in_features, out_features):
            raise _NoMatch(f"the {role} is not an nn.Linear({in_features}, {out_features})")
        return module

    def _merge_heads(self, sdpa, tokens, dim):
        """The node that holds the heads merged back to [B, T, D], and the nodes on the way."""
        members = set()
        node = self._only_user(sdpa)
        if not self._swaps_1_2(node):
            raise _NoMatch("the result is not transposed back (y.transpose(1, 2))")
        members.add(node)
        node = self._only_user(node)
        if self._is_method(node, "contiguous"):
            members.add(node)
            node = self._only_user(node)
        if not self._is_method(node, "view", "reshape") or self._shape(node)[1:] != [tokens, dim]:
            raise _NoMatch("the heads are not merged back to [B, T, D] (.view(B, T, C))")
        members.add(node)
        return node, members

