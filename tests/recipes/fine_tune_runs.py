"""What the tests of docs/recipes/fine_tune.md share: the model folder that
make_checkpoint.py writes, reading a folder in the Hugging Face layout, and the
one-process reference that fine_tune.py's ranks must reproduce."""

import json
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file

from harness.launch import run, shared, snippet_code

INDEX = "model.safetensors.index.json"


def workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="fine_tune-"))


@shared
def made():
    """``python make_checkpoint.py base``: the released weights every run starts from."""
    return run("recipes/make_checkpoint.py", "base", workdir=workdir())


#: Files a release has besides its weights, which save() must copy as they are.
OTHER_FILES = {"tokenizer.json": '{"model": {"type": "BPE"}}\n',
               "generation_config.json": '{"max_new_tokens": 32}\n'}


def with_base(folder: Path, dtype_key: str | None = "torch_dtype") -> Path:
    """The folder, with the model's folder ``base`` in it, as a reader downloaded it:
    with a tokeniser's file and a generation config, and config.json naming the weights'
    dtype under ``dtype_key`` (newer configs write "dtype"; None: no dtype at all)."""
    shutil.copytree(made().workdir / "base", folder / "base")
    for name, text in OTHER_FILES.items():
        (folder / "base" / name).write_text(text)
    config = json.loads((folder / "base" / "config.json").read_text())
    dtype = config.pop("torch_dtype")
    if dtype_key:
        config[dtype_key] = dtype
    (folder / "base" / "config.json").write_text(json.dumps(config, indent=2))
    return folder


def read_folder(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a folder in the Hugging Face layout, read with safetensors' own
    load_file, after checking that the index and the files agree."""
    index = json.loads((folder / INDEX).read_text())
    tensors, where = {}, {}
    for file in sorted(set(index["weight_map"].values())):
        part = load_file(folder / file)
        assert not tensors.keys() & part.keys(), file  # each tensor in one file only
        tensors.update(part)
        where.update(dict.fromkeys(part, file))
    assert where == index["weight_map"]  # every tensor where the index says, and no other
    assert index["metadata"]["total_size"] == sum(t.nbytes for t in tensors.values())
    assert sorted(p.name for p in folder.glob("*.safetensors")) == sorted(
        set(index["weight_map"].values()) | ({"adapter.safetensors"} & {
            p.name for p in folder.iterdir()}))
    return tensors


@shared
def reference() -> dict[str, torch.Tensor]:
    """fine_tune.py's training without FSDP: one process, plain PyTorch, the whole batch
    of every step, from the released weights read as float32."""
    code = snippet_code("recipes/fine_tune.py")
    base = made().workdir / "base"
    config = json.loads((base / "config.json").read_text())
    model = code["Decoder"](config)
    model.load_state_dict({k: v.float() for k, v in read_folder(base).items()})
    optimizer = torch.optim.Adam(model.parameters(), lr=code["LR"])
    for step in range(code["STEPS"]):
        inputs, targets = code["batch"](step, config["vocab_size"])
        loss = torch.nn.functional.cross_entropy(model(inputs).flatten(0, 1),
                                                 targets.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_bf16_close(actual: torch.Tensor, expected: torch.Tensor, name: str = "") -> None:
    """Two bfloat16 tensors are equal or neighbours: one step of bfloat16 apart (2**-8 to
    2**-7 of the value), or, for values near zero, where steps are tiny, 1e-6 apart."""
    assert actual.dtype == expected.dtype == torch.bfloat16 and actual.shape == expected.shape
    difference = (actual.float() - expected.float()).abs()
    allowed = (2**-7 * expected.float().abs()).clamp(min=1e-6)
    assert (difference <= allowed).all(), (name, (difference - allowed).max().item())
