"""snippets/frameworks/build_horovod.sh, shown on docs/frameworks/horovod.md.

`make test-extras` builds and installs Horovod with this very script before the tests
run (its rule names it), so every Horovod test relies on it. These tests check what the
build gave, and that a second run installs the kept wheel without compiling.

Which build a PyTorch gets (the wheel's cache key, and the variables given to the build)
is checked with a stand-in for Python: it answers the script's question about torch with
a fake torch of a chosen version (CPU, CUDA or ROCm), and records each pip command and the HOROVOD_*
variables it was given instead of running it. On a machine with GPUs, the last test
checks that the real build of a CUDA torch has NCCL.
"""

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import torch

from harness.launch import ROOT, snippet
from tests.frameworks.common import needs_horovod

SNIPPET = "frameworks/build_horovod.sh"
VERSION = "0.28.1"

pytestmark = pytest.mark.extras

#: The variables every build is given, whatever the torch.
ALWAYS = {"HOROVOD_WITH_PYTORCH": "1", "HOROVOD_WITH_GLOO": "1",
          "HOROVOD_WITHOUT_TENSORFLOW": "1", "HOROVOD_WITHOUT_MXNET": "1"}

# Stands in for `python`: `-c CODE` runs with a fake torch (from FAKE_TORCH, a directory);
# `-m pip ...` is recorded in STUB_LOG with the HOROVOD_* variables.
# `pip download` leaves a source release with Horovod's two CMake files, `pip wheel`
# records the C++ standard they ask for then and leaves an empty wheel.
STUB_PYTHON = '''\
#!{python}
import json, os, shutil, sys
args = sys.argv[1:]
if args[0] == "-c":
    env = {{**os.environ, "PYTHONPATH": os.environ["FAKE_TORCH"]}}
    os.execve(sys.executable, [sys.executable, *args], env)
assert args[:2] == ["-m", "pip"], args
pip = args[2:]
entry = {{"pip": pip, "env": {{k: v for k, v in os.environ.items() if k.startswith("HOROVOD_")}}}}
if pip[0] == "download":
    shutil.copy(os.environ["STUB_SOURCE"], pip[pip.index("-d") + 1])
if pip[0] == "wheel":
    tree = pip[-1]
    entry["cmake"] = [line.strip() for name in ("CMakeLists.txt", "horovod/torch/CMakeLists.txt")
                      for line in open(os.path.join(tree, name)) if "CMAKE_CXX_STANDARD" in line]
    out = pip[pip.index("-w") + 1]
    os.makedirs(out, exist_ok=True)
    open(os.path.join(out, "horovod-{version}-cp311-cp311-linux_x86_64.whl"), "w").close()
with open(os.environ["STUB_LOG"], "a") as log:
    log.write(json.dumps(entry) + "\\n")
'''


def build_with_stub(tmp_path: Path, fake_torch: tuple[str, str | None, str | None]
                    ) -> tuple[str, list[dict]]:
    """Run the script with the stand-in Python, HOME in tmp_path, and a fake torch of
    (__version__, version.cuda, version.hip). Returns its stdout and the pip log."""
    stub = tmp_path / "python"
    stub.write_text(STUB_PYTHON.format(python=sys.executable, version=VERSION))
    stub.chmod(0o755)
    tree = tmp_path / "release" / f"horovod-{VERSION}"
    (tree / "horovod" / "torch").mkdir(parents=True, exist_ok=True)
    for name in ("CMakeLists.txt", "horovod/torch/CMakeLists.txt"):
        (tree / name).write_text("set(CMAKE_CXX_STANDARD 14)\n")
    source = tmp_path / f"horovod-{VERSION}.tar.gz"
    with tarfile.open(source, "w:gz") as tar:
        tar.add(tree, arcname=tree.name)
    env = {**os.environ, "PYTHON": str(stub), "HOME": str(tmp_path), "STUB_SOURCE": str(source),
           "STUB_LOG": str(tmp_path / "pip.log"), "FAKE_TORCH": str(tmp_path / "fake")}
    env.pop("WHEEL_DIR", None)
    version, cuda, hip = fake_torch
    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True, exist_ok=True)
    (fake / "__init__.py").write_text(
        f"__version__ = {version!r}\nclass version:\n    cuda = {cuda!r}\n    hip = {hip!r}\n")
    result = subprocess.run(["bash", str(snippet(SNIPPET))], capture_output=True, text=True,
                            env=env, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    log = tmp_path / "pip.log"
    return result.stdout, [json.loads(line) for line in log.read_text().splitlines()]


def the_build(log: list[dict]) -> dict:
    """The `pip wheel` command of the log: the one that compiles."""
    [wheel] = [entry for entry in log if entry["pip"][0] == "wheel"]
    return wheel


def test_make_test_extras_builds_horovod_with_this_script():
    rule = (ROOT / "Makefile").read_text().split("$(EXTRAS_STAMP):")[1].split("\n\n")[0]
    assert f"bash snippets/{SNIPPET}" in rule
    subprocess.run(["bash", "-n", str(snippet(SNIPPET))], check=True)


def test_a_cpu_torch_gets_a_build_without_gpu_operations_kept_under_its_full_version(tmp_path):
    out, log = build_with_stub(tmp_path, ("2.13.0+cpu", None, None))
    key = tmp_path / ".cache" / "horovod-wheels" / "torch-2.13.0+cpu"
    assert out.splitlines() == [
        "Horovod 0.28.1 for torch 2.13.0+cpu: HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 "
        "HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1",
        f"wheel kept in {key}"]
    build = the_build(log)
    assert build["env"] == ALWAYS
    assert build["pip"][:5] == ["wheel", "--no-build-isolation", "--no-deps", "-w", str(key)]
    assert build["cmake"] == ["set(CMAKE_CXX_STANDARD 17)"] * 2
    assert log[-1]["pip"] == ["install", str(key / f"horovod-{VERSION}-cp311-cp311-linux_x86_64.whl")]


def test_a_cuda_torch_gets_nccl_and_does_not_reuse_the_cpu_wheel(tmp_path):
    cpu_wheel = tmp_path / ".cache" / "horovod-wheels" / "torch-2.13.0+cpu"
    cpu_wheel.mkdir(parents=True)
    (cpu_wheel / f"horovod-{VERSION}-cp311-cp311-linux_x86_64.whl").touch()  # kept earlier
    out, log = build_with_stub(tmp_path, ("2.13.0+cu128", "12.8", None))
    key = tmp_path / ".cache" / "horovod-wheels" / "torch-2.13.0+cu128"
    assert out.splitlines()[1] == f"wheel kept in {key}"
    assert out.splitlines()[0].endswith("HOROVOD_GPU=CUDA HOROVOD_GPU_OPERATIONS=NCCL")
    build = the_build(log)  # compiled, although a wheel for 2.13.0 (+cpu) was kept
    assert build["env"] == {**ALWAYS, "HOROVOD_GPU": "CUDA", "HOROVOD_GPU_OPERATIONS": "NCCL"}
    assert build["pip"][4] == str(key)


def test_a_rocm_torch_gets_rccl(tmp_path):
    out, log = build_with_stub(tmp_path, ("2.13.0+rocm6.4", None, "6.4.43482"))
    assert "torch-2.13.0+rocm6.4" in out
    assert the_build(log)["env"] == {**ALWAYS, "HOROVOD_GPU": "ROCM",
                                      "HOROVOD_GPU_OPERATIONS": "NCCL"}


def test_a_kept_wheel_is_installed_without_building(tmp_path):
    kept = tmp_path / ".cache" / "horovod-wheels" / "torch-2.13.0+cu128"
    kept.mkdir(parents=True)
    (kept / f"horovod-{VERSION}-cp311-cp311-linux_x86_64.whl").touch()
    out, log = build_with_stub(tmp_path, ("2.13.0+cu128", "12.8", None))
    assert [entry["pip"][0] for entry in log] == ["install"]


def installed(imports: str, values: str) -> list[str]:
    """``values`` as this environment's Python prints them, in a process of its own."""
    probe = subprocess.run([sys.executable, "-c", f"{imports}; print({values})"],
                           capture_output=True, text=True, check=True)
    return probe.stdout.split()


@needs_horovod
def test_horovod_was_built_for_this_torch_with_gloo():
    version, gloo, torch_version = installed(
        "import horovod, horovod.torch as hvd, torch",
        "horovod.__version__, hvd.gloo_built(), torch.__version__")
    assert (version, gloo) == ("0.28.1", "True")  # and its extension loaded beside this torch
    assert torch_version.startswith("2.13.")


@needs_horovod
def test_a_second_run_installs_the_kept_wheel_without_compiling():
    started = time.monotonic()
    rerun = subprocess.run(["bash", str(snippet(SNIPPET))], capture_output=True, text=True,
                           env={**os.environ, "PYTHON": sys.executable}, timeout=300)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "Building wheel" not in rerun.stdout and "horovod-0.28.1.tar.gz" not in rerun.stdout
    # the script read the full version of the real torch
    assert rerun.stdout.startswith(f"Horovod 0.28.1 for torch {torch.__version__}: ")
    assert f"/horovod-wheels/torch-{torch.__version__}\n" in rerun.stdout
    assert "horovod==0.28.1" in rerun.stdout or "horovod-0.28.1" in rerun.stdout
    assert time.monotonic() - started < 120


@needs_horovod
@pytest.mark.multigpu(1)
def test_on_a_gpu_machine_a_cuda_torch_got_horovod_with_nccl():
    """`make test-extras` built Horovod with this script for the CUDA torch of .venv."""
    cuda, cuda_built, nccl = installed(
        "import horovod.torch as hvd, torch", "torch.version.cuda, hvd.cuda_built(), hvd.nccl_built()")
    assert cuda != "None", "the torch of this environment has no CUDA"
    assert cuda_built == "True"
    assert int(nccl) > 0  # NCCL's version code: Horovod all-reduces GPU tensors with NCCL
