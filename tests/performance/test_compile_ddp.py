"""snippets/performance/compile_ddp.py, shown on docs/performance/compile_ddp.md.

The page's output uses the aot_eager backend: it captures the same graphs as inductor
without generating code, which takes over a minute on a small CPU. The GPU test uses
the default, inductor.
"""

import pytest

from harness.launch import run
from harness.outputs import check_output
from tests.on_gpus import NcclLogs, assert_gpu_path

SNIPPET = "performance/compile_ddp.py"


def rows(stdout):
    """{form: (graphs captured, same losses as eager?)}"""
    table = {}
    for line in stdout.splitlines():
        if line.startswith(("eager", "DDP(", "torch.compile(")):
            name, rest = line[:27].strip(), line[27:].split()
            table[name] = (int(rest[0]), rest[-1])
    return table


def check_run(result):
    table = rows(result.stdout)
    assert table["eager DDP(model)"] == (0, "yes")
    graphs, same = table["DDP(torch.compile(model))"]
    assert graphs >= 1 and same == "yes"  # the documented order compiles, and trains as eager does
    assert table["torch.compile(DDP(model))"] == (0, "yes")  # the other order silently runs eager


def test_ddp_of_compiled_model_captures_graphs():
    result = run(SNIPPET, "--backend", "aot_eager", launcher="torchrun", nproc=2)
    check_output(result)
    check_run(result)


@pytest.mark.multigpu(2)
def test_on_gpus_with_inductor(tmp_path):
    logs = NcclLogs()
    result = run(
        SNIPPET,
        launcher="torchrun",
        nproc=2,
        timeout=600,
        env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-cache"), **logs.env},
    )
    assert_gpu_path(result.stdout, r"^backend inductor on (?P<device>\w+)$", count=1)
    logs.assert_nccl_ran(2)
    check_run(result)


def test_state_dict_keys_of_the_wrapped_model(exercise_checks):
    """The page's exercise: save the original module, not the wrappers."""
    keys = exercise_checks["compiled_state_dict_keys"]
    assert "module._orig_mod.0.weight" in keys["ddp"]
    assert keys["net"] == keys["compiled"] and "0.weight" in keys["net"]
