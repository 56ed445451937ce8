"""snippets/recipes/make_checkpoint.py, shown on docs/recipes/fine_tune.md."""

import json

import torch

from harness.launch import snippet_code
from tests.devices import on_each_device
from tests.recipes.fine_tune_runs import made, read_folder

SNIPPET = "recipes/make_checkpoint.py"


@on_each_device(gpus=1)
def test_writes_a_model_in_the_hugging_face_layout_that_fine_tune_py_builds(device):
    """On a GPU machine too: it runs on the CPU there, as on a login node."""
    result = made()
    device.check_output(result)
    code = snippet_code(SNIPPET)
    base = result.workdir / "base"
    assert json.loads((base / "config.json").read_text()) == code["CONFIG"]
    tensors = read_folder(base)  # the index names every tensor's file, and its size
    files = sorted(p.name for p in base.glob("*.safetensors"))
    assert len(files) == 3 and files[0] == "model-00001-of-00003.safetensors"
    for file in files:  # cut at the size it names, as releases are
        assert (base / file).stat().st_size < code["MAX_SHARD_BYTES"] + 4096
    assert all(t.dtype == torch.bfloat16 for t in tensors.values())
    # the model fine_tune.py builds has exactly these tensors, of these shapes
    model = snippet_code("recipes/fine_tune.py")["Decoder"](code["CONFIG"])
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == {
        k: tuple(v.shape) for k, v in tensors.items()}
    count = sum(t.numel() for t in tensors.values())
    assert f"{count:,} parameters in 3 files" in result.stdout
