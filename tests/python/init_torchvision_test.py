"""torchvision's weights as a user has them start a run (issue 41, point 5): resnet18's
state_dict saved with torch.save(model.state_dict()) -- a collections.OrderedDict with
_metadata, as torchvision's downloaded .pth files are -- is deepool-train's --init for the
imported resnet18 graph, unchanged. One rank trains it 2 steps of SGD on the same batches as
torchvision's module in PyTorch's eager loop; every parameter and buffer of deepool's
checkpoint must be within 1e-5 of PyTorch's (relative to its layer's largest entry), which
needs the loaded weights to be torchvision's and the forward to compute what torchvision's
does."""
import collections
import os
import tempfile
import unittest

import torch
import torchvision

import exact_harness as harness
from importer_harness import run_import

STEPS = 2
BATCH = 4
TOLERANCE = 1e-5
SGD = {"optimizer": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.01}


def seeded_resnet18():
    torch.manual_seed(0)
    return torchvision.models.resnet18(num_classes=10)


class TorchvisionInitTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.exists(harness.DEEPOOL_TRAIN):
            raise unittest.SkipTest(f"{harness.DEEPOOL_TRAIN} is not built")
        cls._dir = tempfile.TemporaryDirectory(prefix="deepool-init-torchvision-test-")
        cls.tmp = cls._dir.name
        cls.graph = os.path.join(cls.tmp, "resnet18.graph.json")
        result = run_import("--module", "torchvision.models:resnet18", "--kwargs",
                            '{"num_classes": 10}', "--input-shape", "3,32,32", "-o", cls.graph)
        if result.returncode != 0:
            raise AssertionError(result.stderr)
        cls.data = os.path.join(cls.tmp, "data.bin")
        harness.write_cifar(cls.data, STEPS * BATCH, seed=1)

    @classmethod
    def tearDownClass(cls):
        cls._dir.cleanup()

    def test_a_torch_save_of_resnet18s_state_dict_trains_as_torchvision_does(self):
        weights = os.path.join(self.tmp, "resnet18.pth")
        torch.save(seeded_resnet18().state_dict(), weights)
        saved = torch.load(weights)
        self.assertIs(type(saved), collections.OrderedDict)
        self.assertTrue(hasattr(saved, "_metadata"))

        module = seeded_resnet18()
        batches = harness.cifar_batches(self.data, BATCH, STEPS)
        expected, _ = harness.eager_training(module, batches, SGD)

        checkpoint = os.path.join(self.tmp, "trained.pt")
        result = harness.deepool_train(self.graph, weights, f"cifar10:{self.data}", BATCH, STEPS,
                                       SGD, checkpoint)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        actual, _ = harness.read_checkpoint(checkpoint)
        self.assertEqual(sorted(actual), sorted(expected))
        self.assertEqual(harness.differences(expected, actual, TOLERANCE), [])


if __name__ == "__main__":
    unittest.main()
