"""Write a small model in the Hugging Face layout: the stand-in for released weights.

  python make_checkpoint.py base

A released model is a folder: config.json, the weights split into several
.safetensors files, and model.safetensors.index.json, whose weight_map names the
file that holds each tensor. This script writes such a folder for a small decoder
(an embedding, a few blocks of attention and MLP with RMSNorm, a head) with random
weights in bfloat16, as most released models are stored.
"""

import argparse
import json
import os

import torch
from safetensors.torch import save_file

CONFIG = {"model_type": "tiny_decoder", "vocab_size": 128, "hidden_size": 64,
          "intermediate_size": 176, "num_hidden_layers": 4, "num_attention_heads": 4,
          "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16"}
MAX_SHARD_BYTES = 200_000  # real releases cut their files at a few GB


def shapes(config):
    """Every tensor's name and shape, with the names of Llama-style models."""
    h, f, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    names = {"model.embed_tokens.weight": (v, h)}
    for i in range(config["num_hidden_layers"]):
        block = f"model.layers.{i}."
        names[block + "input_layernorm.weight"] = (h,)
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            names[block + f"self_attn.{proj}.weight"] = (h, h)
        names[block + "post_attention_layernorm.weight"] = (h,)
        names[block + "mlp.gate_proj.weight"] = (f, h)
        names[block + "mlp.up_proj.weight"] = (f, h)
        names[block + "mlp.down_proj.weight"] = (h, f)
    names["model.norm.weight"] = (h,)
    names["lm_head.weight"] = (v, h)
    return names


def write_json(path, content):
    with open(path + ".tmp", "w") as f:  # then renamed: never a half-written file
        json.dump(content, f, indent=2)
    os.replace(path + ".tmp", path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("folder")
    folder = parser.parse_args().folder
    os.makedirs(folder, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    tensors = {}
    for name, shape in shapes(CONFIG).items():
        if name.endswith("norm.weight"):
            tensors[name] = torch.ones(shape)
        else:
            tensors[name] = 0.1 * torch.randn(shape, generator=g)
    # cut the tensors, in order, into files of at most MAX_SHARD_BYTES
    files, size = [[]], 0
    for name, t in tensors.items():
        t = tensors[name] = t.to(torch.bfloat16)
        if files[-1] and size + t.nbytes > MAX_SHARD_BYTES:
            files.append([])
            size = 0
        files[-1].append(name)
        size += t.nbytes
    weight_map = {}
    for i, names in enumerate(files, 1):
        filename = f"model-{i:05d}-of-{len(files):05d}.safetensors"
        part = {name: tensors[name] for name in names}
        path = os.path.join(folder, filename)
        save_file(part, path + ".tmp", metadata={"format": "pt"})
        os.replace(path + ".tmp", path)
        weight_map.update(dict.fromkeys(names, filename))
    index = {"metadata": {"total_size": sum(t.nbytes for t in tensors.values())},
             "weight_map": weight_map}
    write_json(os.path.join(folder, "config.json"), CONFIG)
    write_json(os.path.join(folder, "model.safetensors.index.json"), index)
    count = sum(t.numel() for t in tensors.values())
    print(f"wrote {folder}: {count:,} parameters in {len(files)} files, "
          f"{index['metadata']['total_size']:,} bytes of bfloat16")


if __name__ == "__main__":
    main()
