"""A user's own module from a file, with --kwargs; the weights file round trip."""
import json
import os
import subprocess
import unittest

import torch

from importer_harness import DEEPOOL, MODELS, ImportTestCase

SMALL_NET = os.path.join(MODELS, "small_net.py")


def load_factory(name):
    import importlib.util

    spec = importlib.util.spec_from_file_location("small_net_for_test", SMALL_NET)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


class UserModuleTest(ImportTestCase):
    def test_a_module_from_a_file_with_kwargs(self):
        out = self.path("small.graph.json")
        result = self.import_ok("--file", SMALL_NET, "--factory", "build_model", "--kwargs",
                                '{"num_classes": 10, "width": 4}', "--input-shape", "3,16,16",
                                "-o", out)
        self.assertIn("imported build_model: 17 layers", result.stdout)
        with open(out, encoding="utf-8") as f:
            graph = json.load(f)
        self.assertEqual(graph["name"], "build_model")
        self.assertEqual(graph["input"], {"shape": [3, 16, 16]})
        layers = [(layer["name"], layer["op"], layer["inputs"]) for layer in graph["layers"]]
        self.assertEqual(layers, [
            ("stem.0", "conv2d", ["input"]),
            ("stem.1", "batchnorm2d", ["stem.0"]),
            ("stem.2", "relu", ["stem.1"]),
            ("branch_a", "conv2d", ["stem.2"]),
            ("relu", "relu", ["branch_a"]),  # F.relu in the top-level forward
            ("branch_b", "conv2d", ["stem.2"]),
            ("gelu", "gelu", ["branch_b"]),
            ("cat", "concat", ["relu", "gelu"]),
            ("cat_1", "concat", ["stem.2", "stem.2"]),
            ("add", "add", ["cat", "cat_1"]),
            ("pool", "maxpool2d", ["add"]),
            ("avg_pool2d", "avgpool2d", ["pool"]),
            ("adaptive_avg_pool2d", "adaptive_avgpool2d", ["avg_pool2d"]),
            ("view", "flatten", ["adaptive_avg_pool2d"]),  # y.view(y.size(0), -1)
            ("norm", "layernorm", ["view"]),
            ("drop", "dropout", ["norm"]),
            ("head", "linear", ["drop"]),
        ])
        by_name = {layer["name"]: layer for layer in graph["layers"]}
        self.assertEqual(by_name["head"]["out_features"], 10)
        self.assertEqual(by_name["branch_b"]["padding"], [1, 1])  # padding="same"
        self.assertEqual(by_name["norm"]["normalized_shape"], [8])
        self.assertEqual(graph["outputs"], [{"layer": "head", "loss_weight": 1.0}])
        # deepool's own reader takes the file and plans it.
        subprocess.run([DEEPOOL, "plan", "--graph", out, "--global-batch", "8", "--gpus", "2",
                        "--device", "a100"], check=True, capture_output=True)

    def test_the_graph_name_and_the_module_form(self):
        out = self.path("small.graph.json")
        self.import_ok("--module", "models.small_net:build_model", "--name", "small",
                       "--input-shape", "3,8,8", "-o", out)
        with open(out, encoding="utf-8") as f:
            self.assertEqual(json.load(f)["name"], "small")


class WeightsTest(ImportTestCase):
    def test_weights_round_trip_into_the_module_with_strict_loading(self):
        out, weights = self.path("resnet18.graph.json"), self.path("resnet18.pt")
        self.import_ok("--file", SMALL_NET, "--factory", "build_seeded_resnet18", "--kwargs",
                       '{"seed": 7}', "--input-shape", "3,64,64", "-o", out, "--weights", weights)
        state = torch.load(weights, weights_only=True)
        self.assertIs(type(state), dict)

        module = load_factory("build_seeded_resnet18")(seed=7)
        expected = module.state_dict()
        self.assertEqual(list(state.keys()), list(expected.keys()))
        for key, tensor in expected.items():
            # Equal to the factory's module: the example run left batch norm's running
            # statistics (and num_batches_tracked) as they were.
            self.assertTrue(torch.equal(state[key], tensor), key)

        fresh = load_factory("build_seeded_resnet18")(seed=8)
        fresh.load_state_dict(state, strict=True)
        self.assertTrue(torch.equal(fresh.conv1.weight, module.conv1.weight))

        # Every key is "<layer>.<entry>" of a layer in the graph, and every layer with
        # parameters owns exactly its entries.
        with open(out, encoding="utf-8") as f:
            layers = {layer["name"]: layer for layer in json.load(f)["layers"]}
        for key in state:
            layer, entry = key.rsplit(".", 1)
            self.assertIn(layer, layers, key)
            self.assertIn(layers[layer]["op"], ("conv2d", "batchnorm2d", "linear"), key)


if __name__ == "__main__":
    unittest.main()
