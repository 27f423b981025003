"""A user's small CNN with batch norm, for training against PyTorch's own loop
(exact_training_test.py): a conv-BN-ReLU stem, a residual block of two conv-BN pairs, a strided
conv-BN-ReLU, global average pooling and a linear head. No dropout, so eager training is
deterministic; convolutions before batch norm have no bias (its gradient would be rounding noise,
which AdamW turns into steps of size lr)."""
import torch.nn.functional as F
from torch import nn


def conv_bn(c_in, c_out, stride=1):
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False),
                         nn.BatchNorm2d(c_out))


class BnCnn(nn.Module):
    def __init__(self, num_classes=10, width=8):
        super().__init__()
        self.stem = conv_bn(3, width)
        self.block_a = conv_bn(width, width)
        self.block_b = conv_bn(width, width)
        self.down = conv_bn(width, 2 * width, stride=2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(2 * width, num_classes)

    def forward(self, x):
        x = F.relu(self.stem(x))
        y = self.block_b(F.relu(self.block_a(x)))
        x = F.relu(x + y)
        x = F.relu(self.down(x))
        return self.head(self.pool(x).flatten(1))


def build_bn_cnn(num_classes=10, width=8):
    return BnCnn(num_classes, width)
