"""Bad weights to start from (issue 41, points 5 and 9): `deepool-train --init` with a file that
lacks a key of the graph, has a key the graph does not have, holds a tensor of another shape, or
is not there. Each run exits 1 with one error naming the file and the key, and writes no
checkpoint: deepool-train checks the file's index before it starts any rank (the coordinator's
check at submission, weights/state_dict_check.h), and a file not there is the ranks' error as
they load it (docs/cli.md, "Weights to start from"). The importer's own errors (a model file that raises, a missing factory, an input
shape the module rejects, an op it does not know) are import_errors_test.py's."""
import glob
import os
import subprocess
import tempfile
import unittest

import torch

import exact_harness as harness
from importer_harness import MODELS, run_import

EXIT_FAILED = 1


class InitErrorsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.exists(harness.DEEPOOL_TRAIN):
            raise unittest.SkipTest(f"{harness.DEEPOOL_TRAIN} is not built")
        cls._dir = tempfile.TemporaryDirectory(prefix="deepool-init-errors-test-")
        cls.tmp = cls._dir.name
        cls.graph = os.path.join(cls.tmp, "model.graph.json")
        cls.weights = os.path.join(cls.tmp, "model.pt")
        result = run_import("--file", os.path.join(MODELS, "seeded.py"), "--factory",
                            "seeded_bn_cnn", "--input-shape", "3,32,32", "-o", cls.graph,
                            "--weights", cls.weights)
        if result.returncode != 0:
            raise AssertionError(result.stderr)
        cls.data = os.path.join(cls.tmp, "data.bin")
        harness.write_cifar(cls.data, 12, seed=1)

    @classmethod
    def tearDownClass(cls):
        cls._dir.cleanup()

    def weights_with(self, name, change):
        state = torch.load(self.weights)
        change(state)
        path = os.path.join(self.tmp, name)
        torch.save(state, path)
        return path

    def train_fails(self, init):
        """Runs 2 ranks from `init`; returns their output after checking the exit code and that
        no checkpoint was written."""
        checkpoint = os.path.join(self.tmp, "trained.pt")
        result = subprocess.run([harness.DEEPOOL_TRAIN, "--graph", self.graph, "--init", init,
                                 "--data", f"cifar10:{self.data}", "--ranks", "2",
                                 "--global-batch", "6", "--iterations", "2", "--checkpoint",
                                 checkpoint], capture_output=True, text=True, timeout=300)
        output = result.stdout + result.stderr
        self.assertEqual(result.returncode, EXIT_FAILED, output)
        self.assertEqual(glob.glob(checkpoint + "*"), [], "a checkpoint was written")
        return output

    def test_a_missing_key(self):
        init = self.weights_with("missing.pt", lambda state: state.pop("head.bias"))
        output = self.train_fails(init)
        self.assertIn(f"init {init}: checkpoint lacks 1 tensor(s) of graph 'seeded_bn_cnn': "
                      "head.bias", output)

    def test_an_extra_key(self):
        init = self.weights_with("extra.pt",
                                 lambda state: state.update({"extra.weight": torch.zeros(3)}))
        output = self.train_fails(init)
        self.assertIn(f"init {init}: checkpoint has 1 key(s) that graph 'seeded_bn_cnn' does "
                      "not have: extra.weight", output)

    def test_a_key_under_a_layer_it_does_not_have(self):
        init = self.weights_with("under_layer.pt",
                                 lambda state: state.update({"head.extra": torch.zeros(3)}))
        output = self.train_fails(init)
        self.assertIn(f"init {init}: checkpoint has 1 key(s) that graph 'seeded_bn_cnn' does "
                      "not have: head.extra", output)
        self.assertNotIn("rank 0 failed", output, "checked only when the ranks loaded it")

    def test_a_wrong_shape(self):
        init = self.weights_with("shape.pt",
                                 lambda state: state.update({"head.weight": torch.zeros(3, 3)}))
        output = self.train_fails(init)
        self.assertIn(f"init {init}: checkpoint tensor 'head.weight' has shape [3,3], the model "
                      "expects [10,16]", output)

    def test_a_missing_file(self):
        output = self.train_fails(os.path.join(self.tmp, "none.pt"))
        self.assertIn("none.pt", output)


if __name__ == "__main__":
    unittest.main()
