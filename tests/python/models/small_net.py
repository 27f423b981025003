"""A user's small CNN that uses every spelling the importer maps: nn modules in a Sequential,
functional relu/gelu/pools, torch.cat, a residual `+`, a reshape to [batch, -1], layer norm."""
import torch
import torch.nn.functional as F
from torch import nn


class SmallNet(nn.Module):
    def __init__(self, num_classes=1000, width=8):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU(inplace=True))
        self.branch_a = nn.Conv2d(width, width, 1)
        self.branch_b = nn.Conv2d(width, width, 3, padding="same")
        self.pool = nn.MaxPool2d(2)
        self.norm = nn.LayerNorm(2 * width)
        self.drop = nn.Dropout(0.1)
        self.head = nn.Linear(2 * width, num_classes)

    def forward(self, x):
        x = self.stem(x)
        y = torch.cat([F.relu(self.branch_a(x)), F.gelu(self.branch_b(x))], dim=1)
        y = y + torch.cat((x, x), 1)
        y = F.avg_pool2d(self.pool(y), kernel_size=2)
        y = F.adaptive_avg_pool2d(y, 1)
        y = y.view(y.size(0), -1)
        return self.head(self.drop(self.norm(y)))


def build_model(num_classes=1000, width=8):
    return SmallNet(num_classes, width)


def build_seeded_resnet18(num_classes=10, seed=0):
    """torchvision's resnet18 with parameters fixed by the seed, for the weights round trip."""
    import torchvision

    torch.manual_seed(seed)
    return torchvision.models.resnet18(num_classes=num_classes)
