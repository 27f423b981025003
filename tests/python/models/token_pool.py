"""A small vision transformer written by hand: patches by a conv, flattened and transposed to
tokens, nn.MultiheadAttention (batch_first), mean pooling over tokens and a head; and one that
takes the last token with x[:, -1]. Covers the importer's flatten, transpose, mean and select
mappings (tests/python/import_transformers_test.py)."""
import torch
from torch import nn


class TokenPool(nn.Module):
    def __init__(self, dim=16, heads=2, classes=5, last_token=False):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, kernel_size=4, stride=4)
        self.norm = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.head = nn.Linear(dim, classes)
        self.last_token = last_token

    def forward(self, x):
        x = torch.flatten(self.patch(x), 2).permute(0, 2, 1)  # [N, T, D]
        h = self.norm(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        x = x[:, -1] if self.last_token else x.mean(1)
        return self.head(x)


def build_mean(**kwargs):
    return TokenPool(**kwargs)


def build_last(**kwargs):
    return TokenPool(last_token=True, **kwargs)
