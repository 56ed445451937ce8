"""snippets/performance/compile_ddp.py, shown on docs/performance/compile_ddp.md.

The page's output uses the aot_eager backend: it captures the same graphs as inductor
without generating code, which takes over a minute on a small CPU. The GPU cases use
the default, inductor.
"""

from harness.launch import DEFAULT_TIMEOUT, run
from tests.devices import on_each_device
from tests.on_gpus import assert_gpu_path

SNIPPET = "performance/compile_ddp.py"
RANKS = 2


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


@on_each_device(gpus=RANKS, one_gpu=True)
def test_ddp_of_compiled_model_captures_graphs(tmp_path, device):
    """On the CPU with aot_eager, the page's output; on GPUs with the default, inductor,
    which generates Triton kernels for CUDA."""
    ranks = device.ranks(RANKS)
    cache = tmp_path / "inductor-cache"
    result = run(
        SNIPPET,
        *device.pick(("--backend", "aot_eager"), ()),
        launcher="torchrun",
        nproc=ranks,
        workdir=tmp_path,
        timeout=device.pick(DEFAULT_TIMEOUT, 600),
        env={"TORCHINDUCTOR_CACHE_DIR": str(cache), **device.env()},
    )
    device.check_output(result)
    if device.cuda:
        assert_gpu_path(result.stdout, r"^backend inductor on (?P<device>\w+)$", count=1)
        kernels = [f for f in cache.rglob("*.py") if "@triton.jit" in f.read_text()]
        assert kernels, f"inductor wrote no Triton kernel under {cache}"
    device.assert_ran(ranks, result=result)
    check_run(result)


def test_state_dict_keys_of_the_wrapped_model(exercise_checks):
    """The page's exercise: save the original module, not the wrappers."""
    keys = exercise_checks["compiled_state_dict_keys"]
    assert "module._orig_mod.0.weight" in keys["ddp"]
    assert keys["net"] == keys["compiled"] and "0.weight" in keys["net"]
