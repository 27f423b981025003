"""The GPT attention pattern spelled another common way: .chunk(3, dim=-1), reshape with -1 and
permute(0, 2, 1, 3) instead of split, view and transpose; not causal; then x.mean(1) and a head.
The importer checks the pattern on shapes, so it maps this to the same multihead_attention
(tests/python/import_transformers_test.py)."""
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.reshape(B, T, self.heads, -1).permute(0, 2, 1, 3)
        k = k.reshape(B, T, self.heads, -1).permute(0, 2, 1, 3)
        v = v.reshape(B, T, self.heads, -1).permute(0, 2, 1, 3)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.proj(y.permute(0, 2, 1, 3).reshape(B, T, C))


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attention()
        self.out = nn.Linear(32, 3)

    def forward(self, x):
        return self.out(self.attn(x).mean(1))


def build():
    return Classifier()
