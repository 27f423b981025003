"""The zoo's gpt2 against a plain-PyTorch GPT-2 small (bench/runtime/gpt2_small.py, written with
nn.MultiheadAttention; docs/models.md, "GPT-2"): the same parameter count, 124,439,808, the same
state_dict keys and shapes, lm_head.weight tied to transformer.wte.weight, and a checkpoint that
deepool-train writes for it loads into the reference with strict=True, the tied tensor stored
once under both keys as torch.save stores it."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

from importer_harness import DEEPOOL

# The one copy, beside bench/runtime/pytorch_loop.py that trains it.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench",
                                "runtime"))
import gpt2_small  # noqa: E402

TRAIN = os.path.join(os.path.dirname(DEEPOOL), "deepool-train")
GPT2_PARAMETERS = 124_439_808


class Gpt2ZooTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.reference = gpt2_small.build_gpt2()

    def test_reference_is_gpt2_small(self):
        self.assertEqual(sum(p.numel() for p in self.reference.parameters()), GPT2_PARAMETERS)
        self.assertIs(self.reference.lm_head.weight, self.reference.transformer.wte.weight)

    def test_zoo_graph_counts_the_tied_weight_once(self):
        doc = json.loads(subprocess.check_output([DEEPOOL, "model", "show", "gpt2", "--json"]))
        self.assertEqual(doc["total_params"], GPT2_PARAMETERS)
        self.assertEqual(doc["input"]["shape"], [1024])
        head = [layer for layer in doc["layers"] if layer["name"] == "lm_head"][0]
        self.assertEqual(head["tied"], {"weight": "transformer.wte.weight"})

    def test_deepool_checkpoint_loads_strictly_into_the_reference(self):
        with tempfile.TemporaryDirectory() as tmp:
            tokens = os.path.join(tmp, "tokens.bin")
            np.random.default_rng(0).integers(0, 50257, 4096, dtype=np.uint16).tofile(tokens)
            checkpoint = os.path.join(tmp, "gpt2.pt")
            # A short context keeps one CPU step cheap; the weights do not depend on it.
            subprocess.run([TRAIN, "--model", "gpt2", "--image-size", "16", "--iterations", "1",
                            "--global-batch", "1", "--ranks", "1", "--lr", "0.01",
                            "--data", "tokens:" + tokens, "--checkpoint", checkpoint],
                           check=True, capture_output=True)
            state = torch.load(checkpoint)
            size = os.path.getsize(checkpoint)
        expected = self.reference.state_dict()
        self.assertEqual(list(state), list(expected))
        for key, tensor in expected.items():
            self.assertEqual(state[key].shape, tensor.shape, key)
        # The tied tensor is stored once under both keys (the file holds 124,439,808 floats,
        # not 38,597,376 more), as torch.save stores a tied state_dict.
        self.assertEqual(state["lm_head.weight"].untyped_storage().data_ptr(),
                         state["transformer.wte.weight"].untyped_storage().data_ptr())
        self.assertLess(size, GPT2_PARAMETERS * 4 + 1_000_000)
        self.reference.load_state_dict(state, strict=True)
        self.assertTrue(torch.equal(self.reference.lm_head.weight, state["lm_head.weight"]))


if __name__ == "__main__":
    unittest.main()
