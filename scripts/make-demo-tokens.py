#!/usr/bin/env python3
"""Writes a small learnable token data set, generated, not downloaded.

    .venv/bin/python scripts/make-demo-tokens.py OUT [--tokens 200000] [--val-tokens 20000]
                                                  [--vocabulary 256] [--successors 4] [--seed 0]

OUT/train.bin and OUT/val.bin: flat little-endian uint16 token ids (the layout deepool's
`tokens` data source reads, as nanoGPT's prepare scripts write it), drawn from one random
first-order Markov chain: every token is followed by one of `successors` tokens chosen for it,
with fixed random probabilities. The best possible model has a perplexity of
exp(entropy rate), printed at the end (3.87 for the defaults), against `vocabulary` for a
model that learned nothing, so a small GPT's progress is plain to see. Uses only the standard
library."""
import argparse
import array
import math
import os
import random
import sys


def make_chain(vocabulary, successors, rng):
    """Per token: its successors and their cumulative probabilities."""
    chain = []
    for _ in range(vocabulary):
        nexts = rng.sample(range(vocabulary), successors)
        weights = [rng.uniform(0.5, 1.5) for _ in nexts]
        total = sum(weights)
        chain.append((nexts, [w / total for w in weights]))
    return chain


def entropy_rate(chain, vocabulary):
    """The chain's entropy per token in nats, under its stationary distribution."""
    stationary = [1.0 / vocabulary] * vocabulary
    for _ in range(200):  # power iteration
        step = [0.0] * vocabulary
        for token, (nexts, probs) in enumerate(chain):
            for nxt, p in zip(nexts, probs):
                step[nxt] += stationary[token] * p
        stationary = step
    return sum(stationary[t] * -sum(p * math.log(p) for p in probs)
               for t, (_, probs) in enumerate(chain))


def walk(chain, count, rng, start):
    tokens = array.array("H")
    token = start
    for _ in range(count):
        tokens.append(token)
        nexts, probs = chain[token]
        token = rng.choices(nexts, probs)[0]
    return tokens


def write(path, tokens):
    if sys.byteorder != "little":
        tokens.byteswap()
    with open(path, "wb") as out:
        tokens.tofile(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="output folder (created)")
    parser.add_argument("--tokens", type=int, default=200000, help="training tokens")
    parser.add_argument("--val-tokens", type=int, default=20000, help="held-out tokens")
    parser.add_argument("--vocabulary", type=int, default=256, help="token ids 0..V-1 (<= 65536)")
    parser.add_argument("--successors", type=int, default=4, help="possible next tokens of each")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not 2 <= args.successors <= args.vocabulary <= 65536:
        parser.error("need 2 <= successors <= vocabulary <= 65536")
    rng = random.Random(args.seed)
    chain = make_chain(args.vocabulary, args.successors, rng)
    os.makedirs(args.out, exist_ok=True)
    write(os.path.join(args.out, "train.bin"), walk(chain, args.tokens, rng, 0))
    write(os.path.join(args.out, "val.bin"), walk(chain, args.val_tokens, rng, 1))
    best = math.exp(entropy_rate(chain, args.vocabulary))
    print(f"wrote {args.tokens} training and {args.val_tokens} held-out tokens to {args.out}; "
          f"the best perplexity is {best:.2f} (a model that learned nothing: {args.vocabulary})")


if __name__ == "__main__":
    main()
