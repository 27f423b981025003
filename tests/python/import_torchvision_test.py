"""torchvision's CNNs import, unchanged, to graphs equal to the model zoo's (docs/models.md)."""
import json
import subprocess
import unittest

import torchvision

from importer_harness import DEEPOOL, ImportTestCase


class TorchvisionCnnTest(ImportTestCase):
    def test_resnet50_equals_the_zoo(self):
        out = self.path("resnet50.graph.json")
        self.import_ok("--module", "torchvision.models:resnet50", "--input-shape", "3,224,224",
                       "-o", out)
        self.assertGraphEqualsZoo(out, "resnet50")

    def test_vgg16_with_ten_classes_equals_the_zoo(self):
        out = self.path("vgg16.graph.json")
        self.import_ok("--module", "torchvision.models:vgg16", "--kwargs", '{"num_classes": 10}',
                       "--input-shape", "3,224,224", "-o", out)
        self.assertGraphEqualsZoo(out, "vgg16", "--num-classes", "10")

    def test_resnet18_imports_with_torchvision_names_and_deepool_reads_it(self):
        # resnet18 is not in the zoo: its layers must still be torchvision's module paths, and
        # deepool's reader must take the file.
        out = self.path("resnet18.graph.json")
        self.import_ok("--module", "torchvision.models:resnet18", "--input-shape", "3,224,224",
                       "-o", out)
        with open(out, encoding="utf-8") as f:
            names = {layer["name"] for layer in json.load(f)["layers"]}
        module_keys = torchvision.models.resnet18().state_dict().keys()
        self.assertEqual({key.rsplit(".", 1)[0] for key in module_keys} - names, set())
        self.assertIn("layer1.0.add", names)
        self.assertIn("layer1.0.relu_1", names)  # BasicBlock calls its ReLU twice
        subprocess.run([DEEPOOL, "plan", "--graph", out, "--global-batch", "8", "--gpus", "2",
                        "--device", "a100"], check=True, capture_output=True)


class InceptionTest(ImportTestCase):
    # torchvision's inception_v3(weights=None) has transform_input=False (preprocessing the IR
    # does not model); init_weights=False only skips a slow initialisation.
    def test_inception_v3_without_aux_logits_equals_the_zoo(self):
        out = self.path("inception_v3.graph.json")
        self.import_ok("--module", "torchvision.models:inception_v3", "--kwargs",
                       '{"aux_logits": false, "init_weights": false}', "--input-shape",
                       "3,299,299", "-o", out)
        self.assertGraphEqualsZoo(out, "inception_v3", "--no-aux-logits")

    def test_inception_v3_with_aux_logits_equals_the_zoo(self):
        # In training mode forward returns (logits, aux_logits); the zoo weighs the second 0.4.
        out = self.path("inception_v3.graph.json")
        self.import_ok("--module", "torchvision.models:inception_v3", "--kwargs",
                       '{"init_weights": false}', "--loss-weights", "1,0.4", "--input-shape",
                       "3,299,299", "-o", out)
        self.assertGraphEqualsZoo(out, "inception_v3")


if __name__ == "__main__":
    unittest.main()
