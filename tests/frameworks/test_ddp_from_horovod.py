"""snippets/frameworks/ddp_from_horovod.py, shown on docs/frameworks/horovod.md: the DDP
translation of horovod_train.py ends with the same parameters on the same data."""

import re

import numpy as np
import pytest

from harness.launch import DEFAULT_TIMEOUT
from harness.outputs import check_text
from tests.compare import assert_every_rank_holds_the_same, load, run_every_rank_saves
from tests.devices import on_each_device
from tests.frameworks.common import horovodrun, needs_horovod

SNIPPET = "frameworks/ddp_from_horovod.py"
HOROVOD = "frameworks/horovod_train.py"

pytestmark = [pytest.mark.extras, needs_horovod]


def losses(stdout: str) -> list[str]:
    return re.findall(r"^.*(epoch \d+/\d+  last-step loss [\d.]+)$", stdout, re.M)


@on_each_device(gpus=2, one_gpu=True)
def test_the_ddp_translation_trains_exactly_as_horovod(device):
    """On GPUs NCCL sums in its own order: the same training, up to the last bits. On one
    GPU both at world size 1, each process alone on cuda:0."""
    ranks = device.ranks(2)
    ddp = run_every_rank_saves(SNIPPET, launcher="torchrun", nproc=ranks,
                               timeout=device.pick(DEFAULT_TIMEOUT, 240))
    device.check_output(ddp)
    assert ddp.stdout.startswith(f"{ranks} processes, {device.backend} backend, "
                                 f"on {device.type}"), ddp.report()
    assert f"final parameters identical on all {ranks} processes" in ddp.stdout
    if device.gpus:
        horovod = run_every_rank_saves(HOROVOD, launcher="horovodrun", nproc=ranks,
                                       timeout=240, env=device.env())
    else:
        horovod = horovodrun()
    assert horovod.stdout.splitlines()[0].endswith(
        f"{ranks} processes, Gloo controller, on {device.type}"), horovod.report()
    if ranks > 1:  # alone, Horovod's optimiser all-reduces no gradient
        device.assert_ran(ranks, result=horovod)  # Horovod, too, all-reduced over NCCL
    if device.cuda:
        assert len(losses(ddp.stdout)) == 3
        for a, b in zip(losses(ddp.stdout), losses(horovod.stdout)):
            assert float(a.split()[-1]) == pytest.approx(float(b.split()[-1]), abs=1e-3)
        for a, b in zip(assert_every_rank_holds_the_same(ddp, ranks),
                        assert_every_rank_holds_the_same(horovod, ranks)):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-4)
        return
    assert losses(ddp.stdout) == losses(horovod.stdout) and len(losses(ddp.stdout)) == 3

    # Every rank of both runs held the same parameters; what rank 0 saved is what it held.
    held = assert_every_rank_holds_the_same(ddp, ranks)
    for a, b in zip(held, assert_every_rank_holds_the_same(horovod, ranks)):
        np.testing.assert_array_equal(a, b)
    ddp_saved = load(ddp.workdir / "model.pt")
    horovod_saved = load(horovod.workdir / "model.pt")
    assert ddp_saved.keys() == horovod_saved.keys()
    lines = [f"{'tensor':<10}{'shape':>10}{'largest difference':>20}"]
    for (name, a), b in zip(ddp_saved.items(), held):
        np.testing.assert_array_equal(a.numpy(), b)
        difference = (a - horovod_saved[name]).abs().max().item()
        lines.append(f"{name:<10}{'x'.join(map(str, a.shape)):>10}{difference:>20}")
        assert difference == 0, name
    if not device.gpus:  # the page shows the CPU run
        check_text("\n".join(lines) + "\n", SNIPPET, "compare", command=())
