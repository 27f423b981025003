"""GPT-2 small in plain PyTorch, written with nn.MultiheadAttention: the reference for the zoo's
`gpt2` (docs/models.md, "GPT-2"). The module paths are Hugging Face GPT2LMHeadModel's
(transformer.wte, transformer.h.N.attn, ..., lm_head) and lm_head.weight is
transformer.wte.weight, as there. Two differences from Hugging Face's layout, both in the
weights' names and shapes, not the model: attention is nn.MultiheadAttention's (in_proj_weight
[3D, D], in_proj_bias, out_proj.weight [D, D], out_proj.bias) where Hugging Face has c_attn and
c_proj Conv1D layers ([D, 3D] and [D, D], transposed against nn.Linear), and the MLP's c_fc and
c_proj are nn.Linear (Hugging Face's are Conv1D, so their weights are the transposes). No
dropout (GPT-2's 0.1 is for pre-training; deepool's gpt2 has none). Parameters: 124,439,808.

build_gpt_tiny is the zoo's gpt_tiny in the same code (vocabulary 256, context 64, D=64, 4 heads,
2 blocks, lm_head untied): 136,960 parameters. tests/python/gpt2_zoo_test.py checks GPT-2 small
against the zoo; bench/runtime/pytorch_loop.py trains both as a PyTorch user would."""
import torch
import torch.nn as nn

VOCAB = 50257
CONTEXT = 1024
DIM = 768
HEADS = 12
BLOCKS = 12


class MLP(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return self.c_proj(self.act(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim)

    def forward(self, x):
        t = x.size(1)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        h = self.ln_1(x)
        x = x + self.attn(h, h, h, attn_mask=causal, need_weights=False, is_causal=True)[0]
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    def __init__(self, vocab=VOCAB, context=CONTEXT, dim=DIM, heads=HEADS, blocks=BLOCKS,
                 tied=True):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, dim),
            wpe=nn.Embedding(context, dim),
            h=nn.ModuleList(Block(dim, heads) for _ in range(blocks)),
            ln_f=nn.LayerNorm(dim),
        ))
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        if tied:  # as GPT-2's
            self.lm_head.weight = self.transformer.wte.weight

    def forward(self, ids):
        positions = torch.arange(ids.size(1), device=ids.device)
        x = self.transformer.wte(ids) + self.transformer.wpe(positions)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def build_gpt2():
    return GPT2()


def build_gpt_tiny():
    return GPT2(vocab=256, context=64, dim=64, heads=4, blocks=2, tied=False)
