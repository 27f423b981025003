"""A reference evaluator of deepool.graph documents in plain torch, written from the op table of
docs/formats.md (not from the importer), for the importer's tests: run an imported graph with
the weights file `deepool import --weights` wrote and compare with the module itself. Covers the
ops the transformer imports use; evaluation mode (dropout is the identity)."""
import torch
import torch.nn.functional as F
from torch import nn


def _attention(layer, weights, x):
    name, dim = layer["name"], layer["embed_dim"]
    mha = nn.MultiheadAttention(dim, layer["num_heads"], bias=layer["bias"], batch_first=True)
    state = {key[len(name) + 1:]: value for key, value in weights.items()
             if key.startswith(name + ".")}
    mha.load_state_dict(state, strict=True)
    mha.eval()
    mask = None
    if layer["causal"]:
        tokens = x.shape[1]
        mask = torch.ones(tokens, tokens, dtype=torch.bool).triu(1)  # True: may not attend
    return mha(x, x, x, need_weights=False, attn_mask=mask, is_causal=layer["causal"])[0]


def _position_embedding(layer, weights, x):
    if layer.get("bare_parameter"):
        return x + weights[layer["name"]]
    return x + weights[layer["name"] + ".weight"][:x.shape[1]]


def _flatten(layer, weights, x):
    return torch.flatten(x, layer.get("start_dim", 1), layer.get("end_dim", -1))


def _class_token(layer, weights, x):
    token = weights[layer["name"]].expand(x.shape[0], -1, -1)
    return torch.cat([token, x], dim=1)


def _param(weights, layer, key):
    return weights.get(f"{layer['name']}.{key}")


_OPS = {
    "embedding": lambda l, w, x: F.embedding(x, _param(w, l, "weight")),
    "position_embedding": _position_embedding,
    "dropout": lambda l, w, x: x,
    "layernorm": lambda l, w, x: F.layer_norm(x, l["normalized_shape"], _param(w, l, "weight"),
                                              _param(w, l, "bias"), l["eps"]),
    "linear": lambda l, w, x: F.linear(x, _param(w, l, "weight"), _param(w, l, "bias")),
    "gelu": lambda l, w, x: F.gelu(x, approximate=l["approximate"]),
    "relu": lambda l, w, x: F.relu(x),
    "multihead_attention": _attention,
    "conv2d": lambda l, w, x: F.conv2d(x, _param(w, l, "weight"), _param(w, l, "bias"),
                                       l["stride"], l["padding"], l["dilation"], l["groups"]),
    "flatten": _flatten,
    "transpose": lambda l, w, x: x.transpose(l["dim0"], l["dim1"]),
    "class_token": _class_token,
    "select": lambda l, w, x: x.select(l["dim"], l["index"]),
    "mean": lambda l, w, x: x.mean(l["dim"]),
}


def run_graph(graph, weights, x):
    """The graph's outputs on input batch `x`, in the order of graph["outputs"]."""
    values = {"input": x}
    pending = list(graph["layers"])
    with torch.no_grad():
        while pending:  # layers may come in any order: evaluate each once its inputs are known
            ready = [layer for layer in pending if all(i in values for i in layer["inputs"])]
            if not ready:
                raise ValueError("the graph has a cycle or an unknown input")
            for layer in ready:
                inputs = [values[i] for i in layer["inputs"]]
                if layer["op"] == "add":
                    values[layer["name"]] = sum(inputs[1:], inputs[0])
                else:
                    values[layer["name"]] = _OPS[layer["op"]](layer, weights, *inputs)
                pending.remove(layer)
    return [values[output["layer"]] for output in graph["outputs"]]
