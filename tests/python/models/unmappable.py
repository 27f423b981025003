"""Modules the importer cannot map (attention not in the GPT form), and other ways imports fail."""
import torch
import torch.nn.functional as F
from torch import nn


class SelfAttention(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)

    def forward(self, x):
        return F.scaled_dot_product_attention(self.q(x), self.k(x), self.v(x))


class Block(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.attn = SelfAttention(dim)

    def forward(self, x):
        return self.attn(x)


class UsesSdpa(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)
        self.blocks = nn.Sequential(Block())

    def forward(self, x):
        return self.blocks(self.proj(x))


class UsesMultiheadAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(16, 2)  # sequence first: the batch is dimension 1

    def forward(self, x):
        return self.mha(x, x, x)[0]


class UnusedLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 4)
        self.spare = nn.Linear(16, 4)  # never called

    def forward(self, x):
        return self.fc(x)


class DataDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 4)

    def forward(self, x):
        if x.sum() > 0:
            return self.fc(x)
        return self.fc(-x)


def sdpa():
    return UsesSdpa()


def multihead_attention():
    return UsesMultiheadAttention()


def unused_layer():
    return UnusedLayer()


def data_dependent():
    return DataDependent()


def not_a_module():
    return 42


class InPlaceHazard(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        y = self.fc(x)
        return self.act(y) + y  # eager: y is the ReLU's output too; a graph would differ


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x, y):
        return self.fc(x) + self.fc(y)


def in_place_hazard():
    return InPlaceHazard()


def two_inputs():
    return TwoInputs()
