"""Writes the small weights files tests/unit/weights/ read (run from anywhere with the project's
Python: .venv/bin/python tests/data/weights/make_weights.py). The files are committed, so the
tests need no Python; rerun this only to change them.

- tiny_cnn_ordered.pt: torch.save(module.state_dict()) of a conv + batchnorm + linear module,
  an OrderedDict with _metadata (what torchvision's and most users' files are);
- tiny_cnn_dict.pt: torch.save(dict(...)) of the same, a plain dict;
- tied.pt: one tensor under two keys (a tied embedding and head), stored once;
- dtypes.pt: one tensor of each dtype the ranks load, a scalar, a non-contiguous view (its
  strides BININT2s) and an empty tensor whose stride needs a BININT;
- tiny_cnn.safetensors: the same tensors as tiny_cnn_dict.pt, written by hand in safetensors'
  layout (the safetensors package is not installed here);
- views_ordered.pt: torch.save(module.state_dict()) of a module with a tied embedding and head
  (one storage under two keys), a bfloat16 linear layer and a buffer that is a strided view at
  an offset into a larger tensor; views_expected.safetensors: what torch.load gives for it,
  each tensor written contiguously, for the ranks' loader to be compared with;
- big_endian.pt: tied.pt rewritten with its byteorder record saying "big" (as torch.save on a
  big-endian machine writes), which the index and the ranks refuse.
"""
import collections
import json
import os
import struct
import zipfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def tiny_cnn():
    torch.manual_seed(0)
    return torch.nn.Sequential(collections.OrderedDict([
        ("conv", torch.nn.Conv2d(3, 4, 3)),
        ("bn", torch.nn.BatchNorm2d(4)),
        ("fc", torch.nn.Linear(4, 2)),
    ]))


SAFETENSORS_DTYPES = {torch.float32: "F32", torch.int64: "I64", torch.bfloat16: "BF16"}


def write_safetensors(state, path):
    header, data = {}, b""
    for key, tensor in state.items():
        flat = tensor.contiguous()
        # numpy has no bfloat16: its bits, little-endian, as int16
        raw = (flat.view(torch.int16) if flat.dtype == torch.bfloat16 else flat).numpy().tobytes()
        header[key] = {"dtype": SAFETENSORS_DTYPES[tensor.dtype], "shape": list(tensor.shape),
                       "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)) + text + data)


class Views(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.wte = torch.nn.Embedding(5, 3)
        self.lm_head = torch.nn.Linear(3, 5, bias=False)
        self.lm_head.weight = self.wte.weight  # tied: one storage under two keys
        self.half = torch.nn.Linear(3, 2).to(torch.bfloat16)
        base = torch.arange(40, dtype=torch.float32).reshape(5, 8)
        self.register_buffer("view", base[1:, 2::3])  # offset 10, strides (8, 3)


def write_views():
    state = Views().state_dict()
    assert state["view"].storage_offset() == 10 and not state["view"].is_contiguous()
    path = os.path.join(HERE, "views_ordered.pt")
    torch.save(state, path)
    loaded = torch.load(path)
    assert type(loaded) is collections.OrderedDict and hasattr(loaded, "_metadata")
    assert loaded["wte.weight"].data_ptr() == loaded["lm_head.weight"].data_ptr()
    write_safetensors(loaded, os.path.join(HERE, "views_expected.safetensors"))


def write_big_endian():
    with zipfile.ZipFile(os.path.join(HERE, "tied.pt")) as source, \
            zipfile.ZipFile(os.path.join(HERE, "big_endian.pt"), "w", zipfile.ZIP_STORED) as out:
        for info in source.infolist():
            data = source.read(info)
            if info.filename.endswith("/byteorder"):
                assert data == b"little"
                data = b"big"
            out.writestr(info.filename, data)


def main():
    state = tiny_cnn().state_dict()
    torch.save(state, os.path.join(HERE, "tiny_cnn_ordered.pt"))
    torch.save(dict(state), os.path.join(HERE, "tiny_cnn_dict.pt"))
    write_safetensors(state, os.path.join(HERE, "tiny_cnn.safetensors"))

    table = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    torch.save({"wte.weight": table, "lm_head.weight": table}, os.path.join(HERE, "tied.pt"))

    wide = torch.zeros(2, 300)
    dtypes = {
        "f64": torch.zeros(2, dtype=torch.float64),
        "f16": torch.zeros(2, dtype=torch.float16),
        "bf16": torch.zeros(2, dtype=torch.bfloat16),
        "i32": torch.zeros(2, dtype=torch.int32),
        "i16": torch.zeros(2, dtype=torch.int16),
        "i8": torch.zeros(2, dtype=torch.int8),
        "u8": torch.zeros(2, dtype=torch.uint8),
        "flag": torch.zeros(2, dtype=torch.bool),
        "count": torch.tensor(7),
        "view": wide.t()[:5],
        "empty": torch.zeros(0, 70000, dtype=torch.int8),  # stride 70000: a BININT
    }
    torch.save(dtypes, os.path.join(HERE, "dtypes.pt"))
    write_views()
    write_big_endian()


if __name__ == "__main__":
    main()
