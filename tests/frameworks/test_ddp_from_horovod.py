"""snippets/frameworks/ddp_from_horovod.py, shown on docs/frameworks/horovod.md: the DDP
translation of horovod_train.py ends with the same parameters on the same data."""

import re

import numpy as np
import pytest

from harness.outputs import check_output, check_text
from tests.compare import load
from tests.frameworks.common import (assert_every_rank_holds_the_same, horovodrun, needs_horovod,
                                     run_every_rank_saves)
from tests.on_gpus import NcclLogs

SNIPPET = "frameworks/ddp_from_horovod.py"

pytestmark = [pytest.mark.extras, needs_horovod]


def losses(stdout: str) -> list[str]:
    return re.findall(r"^.*(epoch \d+/\d+  last-step loss [\d.]+)$", stdout, re.M)


def test_the_ddp_translation_trains_exactly_as_horovod():
    ddp = run_every_rank_saves(SNIPPET, launcher="torchrun", nproc=2)
    check_output(ddp)
    assert ddp.stdout.startswith("2 processes, gloo backend, on cpu")
    assert "final parameters identical on all 2 processes" in ddp.stdout
    horovod = horovodrun()
    assert losses(ddp.stdout) == losses(horovod.stdout) and len(losses(ddp.stdout)) == 3

    # Every rank of both runs held the same parameters; what rank 0 saved is what it held.
    held = assert_every_rank_holds_the_same(ddp, 2)
    for a, b in zip(held, assert_every_rank_holds_the_same(horovod, 2)):
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
    check_text("\n".join(lines) + "\n", SNIPPET, "compare")


@pytest.mark.multigpu(2)
def test_on_two_gpus_the_translation_trains_as_horovod_does():
    """On GPUs NCCL sums in its own order: the same training, up to the last bits."""
    ddp = run_every_rank_saves(SNIPPET, launcher="torchrun", nproc=2, timeout=240)
    assert ddp.stdout.startswith("2 processes, nccl backend, on cuda"), ddp.report()
    assert "final parameters identical on all 2 processes" in ddp.stdout
    logs = NcclLogs()
    horovod = run_every_rank_saves("frameworks/horovod_train.py", launcher="horovodrun",
                                   nproc=2, timeout=240, env=logs.env)
    assert horovod.stdout.splitlines()[0].endswith("2 processes, Gloo controller, on cuda")
    logs.assert_nccl_ran(2)  # Horovod, too, all-reduced over NCCL
    assert len(losses(ddp.stdout)) == 3
    for a, b in zip(losses(ddp.stdout), losses(horovod.stdout)):
        assert float(a.split()[-1]) == pytest.approx(float(b.split()[-1]), abs=1e-3)
    for a, b in zip(assert_every_rank_holds_the_same(ddp, 2),
                    assert_every_rank_holds_the_same(horovod, 2)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-4)
