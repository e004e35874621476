"""Build a tiny Transformer, train it on the copy task for a few hundred steps, generate, save and reload it."""

import argparse
import tempfile

import torch
from transformers import AutoModelForSeq2SeqLM

from modeling.demo import copy_batch, train_copy_task


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=350)
    parser.add_argument("--output_dir", default=None, help="where to save the model (default: a temporary folder)")
    args = parser.parse_args(argv)
    model, accuracy = train_copy_task(steps=args.steps)
    print(f"copy task: token accuracy {accuracy:.2%} after {args.steps} steps")
    source, _ = copy_batch(2, 10, model.config.vocab_size, model.config.eos_token_id, torch.Generator().manual_seed(7))
    print("source:   ", source.tolist())
    print("generated:", model.generate(source, max_new_tokens=11)[:, 1:].tolist())
    output_dir = args.output_dir or tempfile.mkdtemp(prefix="annotated-transformer-")
    model.save_pretrained(output_dir)
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(output_dir, trust_remote_code=True)
    print(f"saved to {output_dir}; reloaded as {type(reloaded).__name__}")


if __name__ == "__main__":
    main()
