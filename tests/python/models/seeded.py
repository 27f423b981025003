"""Factories that fix torch's seed before building a module, so that every run of a test imports
the same initial weights (exact_training_test.py): the batch-norm CNN, torchvision's
VisionTransformer and the plain-PyTorch GPT, unchanged."""
import torch

import bn_cnn
import gpt


def seeded_bn_cnn(seed=0, **kwargs):
    torch.manual_seed(seed)
    return bn_cnn.build_bn_cnn(**kwargs)


def seeded_vit(seed=0, **kwargs):
    from torchvision.models.vision_transformer import VisionTransformer

    torch.manual_seed(seed)
    return VisionTransformer(**kwargs)


def seeded_gpt(seed=0, **kwargs):
    torch.manual_seed(seed)
    return gpt.build_gpt(**kwargs)
