"""Transformers import unchanged: torchvision's vit_b_16 equals the zoo's graph, and a GPT written
in plain PyTorch (models/gpt.py) maps its attention to multihead_attention; both graphs, run with
the weights the importer wrote, compute what the module computes (graph_reference.py), and
deepool plans and trains the GPT (docs/models.md, "Transformers")."""
import json
import os
import subprocess
import unittest

import torch

from graph_reference import run_graph
from importer_harness import DEEPOOL, MODELS, ImportTestCase

GPT = os.path.join(MODELS, "gpt.py")
DEEPOOL_TRAIN = os.path.join(os.path.dirname(DEEPOOL), "deepool-train")
VIT_TINY = '{"image_size": 32, "patch_size": 8, "num_layers": 2, "num_heads": 2, ' \
           '"hidden_dim": 32, "mlp_dim": 64, "num_classes": 10}'


def load_module(file_name, factory):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"{file_name[:-3]}_for_test",
                                                  os.path.join(MODELS, file_name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, factory)


def load_gpt(factory):
    return load_module("gpt.py", factory)


class VisionTransformerTest(ImportTestCase):
    def test_vit_b_16_equals_the_zoo(self):
        out = self.path("vit_b_16.graph.json")
        self.import_ok("--module", "torchvision.models:vit_b_16", "--name", "vit_b_16",
                       "--input-shape", "3,224,224", "-o", out)
        self.assertGraphEqualsZoo(out, "vit_b_16")

    def test_a_small_vit_computes_what_torchvision_computes(self):
        # torchvision's VisionTransformer class at vit_tiny's sizes: the zoo's graph, the weights
        # under torchvision's state_dict keys, and the graph run with them gives the module's
        # logits.
        out, weights = self.path("vit.graph.json"), self.path("vit.pt")
        self.import_ok("--module", "torchvision.models.vision_transformer:VisionTransformer",
                       "--kwargs", VIT_TINY, "--name", "vit_tiny", "--input-shape", "3,32,32",
                       "-o", out, "--weights", weights)
        self.assertGraphEqualsZoo(out, "vit_tiny", "--num-classes", "10")
        state = torch.load(weights)
        from torchvision.models.vision_transformer import VisionTransformer

        module = VisionTransformer(**json.loads(VIT_TINY))
        self.assertEqual(list(state), list(module.state_dict()))
        module.load_state_dict(state, strict=True)
        module.eval()
        with open(out, encoding="utf-8") as f:
            graph = json.load(f)
        x = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            expected = module(x)
        (actual,) = run_graph(graph, state, x)
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


class HandWrittenTokenModelTest(ImportTestCase):
    def check(self, factory, pooling):
        out, weights = self.path("pool.graph.json"), self.path("pool.pt")
        self.import_ok("--file", os.path.join(MODELS, "token_pool.py"), "--factory", factory,
                       "--input-shape", "3,16,16", "-o", out, "--weights", weights)
        with open(out, encoding="utf-8") as f:
            graph = json.load(f)
        ops = [(layer["name"], layer["op"]) for layer in graph["layers"]]
        self.assertEqual(ops, [("patch", "conv2d"), ("flatten", "flatten"),
                               ("permute", "transpose"), ("norm", "layernorm"),
                               ("attn", "multihead_attention"), ("add", "add"), pooling,
                               ("head", "linear")])
        state = torch.load(weights)
        module = load_module("token_pool.py", factory)()
        module.load_state_dict(state, strict=True)
        module.eval()
        x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(4))
        with torch.no_grad():
            expected = module(x)
        (actual,) = run_graph(graph, state, x)
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
        subprocess.run([DEEPOOL, "plan", "--graph", out, "--global-batch", "8", "--gpus", "2",
                        "--device", "a100"], check=True, capture_output=True)

    def test_mean_over_tokens(self):
        self.check("build_mean", ("mean", "mean"))

    def test_the_last_token(self):
        self.check("build_last", ("getitem", "select"))


class GptTest(ImportTestCase):
    def import_gpt(self, *extra):
        out, weights = self.path("gpt.graph.json"), self.path("gpt.pt")
        self.import_ok("--file", GPT, "--factory", "build_gpt", "--input-shape", "32",
                       "--input-dtype", "int64", "-o", out, "--weights", weights, *extra)
        with open(out, encoding="utf-8") as f:
            return out, json.load(f), torch.load(weights)

    def test_the_attention_pattern_becomes_multihead_attention(self):
        _, graph, state = self.import_gpt()
        self.assertEqual(graph["input_dtype"], "int64")
        by_name = {layer["name"]: layer for layer in graph["layers"]}
        self.assertEqual(by_name["transformer.h.0.attn"], {
            "name": "transformer.h.0.attn", "op": "multihead_attention",
            "inputs": ["transformer.h.0.ln_1"], "embed_dim": 32, "num_heads": 4, "causal": True,
            "dropout": 0.0, "bias": True})
        self.assertEqual(by_name["transformer.wpe"]["op"], "position_embedding")
        self.assertEqual(by_name["transformer.wpe"]["inputs"], ["transformer.wte"])
        self.assertEqual(by_name["transformer.h.0.mlp.gelu"]["approximate"], "tanh")
        self.assertEqual(by_name["transformer.h.1.add_1"]["inputs"],
                         ["transformer.h.1.add", "transformer.h.1.mlp.dropout"])
        # The projections' weights take nn.MultiheadAttention's names; every other key is the
        # module's own.
        module = load_gpt("build_gpt")()
        renamed = {"c_attn.weight": "in_proj_weight", "c_attn.bias": "in_proj_bias",
                   "c_proj.weight": "out_proj.weight", "c_proj.bias": "out_proj.bias"}
        expected = set()
        for key in module.state_dict():
            for old, new in renamed.items():
                if ".attn." + old in key:
                    key = key.replace(old, new)
            expected.add(key)
        self.assertEqual(set(state), expected)

    def test_the_graph_computes_what_the_module_computes(self):
        _, graph, state = self.import_gpt()
        torch.manual_seed(0)
        module = load_gpt("build_gpt")()  # other random weights than the imported ones: reload
        original = {k: v for k, v in module.state_dict().items()}
        for key, value in original.items():
            mapped = key.replace("c_attn.weight", "in_proj_weight").replace(
                "c_attn.bias", "in_proj_bias")
            if ".attn.c_proj." in key:
                mapped = key.replace("c_proj.", "out_proj.")
            self.assertIn(mapped, state)
            state[mapped] = value
        module.eval()
        tokens = torch.randint(0, 256, (3, 32), generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            expected = module(tokens)
        (actual,) = run_graph(graph, state, tokens)
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)

    def test_deepool_plans_and_trains_it(self):
        out, _, _ = self.import_gpt()
        subprocess.run([DEEPOOL, "plan", "--graph", out, "--global-batch", "8", "--gpus", "2",
                        "--device", "a100"], check=True, capture_output=True)
        if not os.path.exists(DEEPOOL_TRAIN):
            self.skipTest(f"{DEEPOOL_TRAIN} is not built")
        tokens = self.path("tokens.bin")
        torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(3)).to(
            torch.int32).numpy().astype("<u2").tofile(tokens)
        result = subprocess.run([DEEPOOL_TRAIN, "--graph", out, "--data", f"tokens:{tokens}",
                                 "--iterations", "2", "--global-batch", "4", "--ranks", "2"],
                                capture_output=True, text=True, timeout=300)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("finished 2 iterations", result.stdout)

    def test_chunk_reshape_and_permute_spell_the_same_attention(self):
        out, weights = self.path("spellings.graph.json"), self.path("spellings.pt")
        self.import_ok("--file", os.path.join(MODELS, "attention_spellings.py"), "--factory",
                       "build", "--input-shape", "8,32", "-o", out, "--weights", weights)
        with open(out, encoding="utf-8") as f:
            graph = json.load(f)
        self.assertEqual([(layer["name"], layer["op"]) for layer in graph["layers"]],
                         [("attn", "multihead_attention"), ("mean", "mean"), ("out", "linear")])
        self.assertFalse(graph["layers"][0]["causal"])
        state = torch.load(weights)
        module = load_module("attention_spellings.py", "build")()
        module.load_state_dict({k.replace("attn.in_proj_", "attn.qkv.").replace(
            "attn.out_proj.", "attn.proj."): v for k, v in state.items()}, strict=True)
        x = torch.randn(2, 8, 32, generator=torch.Generator().manual_seed(5))
        with torch.no_grad():
            expected = module(x)
        (actual,) = run_graph(graph, state, x)
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)

    def test_separate_q_k_v_projections_are_refused_at_the_attention(self):
        out = self.path("gpt.graph.json")
        error = self.import_fails(3, "--file", GPT, "--factory", "build_gpt_separate_qkv",
                                  "--input-shape", "32", "--input-dtype", "int64", "-o", out,
                                  here=True)
        self.assertIn('node "scaled_dot_product_attention" in module "transformer.h.0.attn" '
                      "(call_function torch.nn.functional.scaled_dot_product_attention) at ",
                      error)
        self.assertIn("gpt.py:", error)
        self.assertIn("separate q, k and v projections have no IR op yet", error)
        self.assertFalse(os.path.exists(out))

    def test_tied_weights_map_to_a_tie(self):
        out = self.path("gpt.graph.json")
        self.import_ok("--file", GPT, "--factory", "build_gpt", "--kwargs",
                       '{"tie_weights": true}', "--input-shape", "32", "--input-dtype", "int64",
                       "-o", out)
        with open(out) as f:
            graph = json.load(f)
        head = [layer for layer in graph["layers"] if layer["name"] == "lm_head"][0]
        self.assertEqual(head["tied"], {"weight": "transformer.wte.weight"})
        # deepool itself reads the tie (and counts the shared matrix once).
        plan = subprocess.run([DEEPOOL, "plan", "--graph", out, "--global-batch", "4", "--gpus",
                               "2", "--device", "a100"], capture_output=True, text=True)
        self.assertEqual(plan.returncode, 0, plan.stderr)

    def test_token_embeddings_need_int64_input(self):
        # The module itself refuses float ids in the example run (exit 1), named at the embedding.
        error = self.import_fails(1, "--file", GPT, "--factory", "build_gpt", "--input-shape",
                                  "32", "-o", self.path("gpt.graph.json"), here=True)
        self.assertIn('node "transformer_wte" in module "transformer.wte"', error)
        self.assertIn("import with --input-dtype int64", error)


if __name__ == "__main__":
    unittest.main()
