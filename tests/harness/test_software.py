"""harness/software.py and the centre's release in harness/plugins/claimed.py: what a
script needs of its software, whether a centre's environment gives it, and which tests
``make test CENTRE=...`` runs on the environment's release.

The scripts and profiles are small fakes in a temporary folder, but for the check of the
shipped Alpha Centauri profile and the selection of a real test session."""

import importlib.util
import os
import signal
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from harness import profile, software, torch_versions
from harness.launch import ROOT
from harness.plugins import claimed

PROFILE = """[cluster]
name = "Testbed"
login_host = "login.testbed.example.org"

[[partitions]]
name = "gpu"
gpus_per_node = 4
cpus_per_gpu = 8
mem_per_gpu = "64G"

[environment]
setup = ["module purge", "module load pytorch/2.1.2"]
modules = ["pytorch/2.1.2"]
"""
#: ch/job.sbatch runs train.py, which imports its folder's helper.py; other.py is only
#: named in train.py's docstring.
SCRIPTS = {
    "ch/job.sbatch": "#!/bin/bash\n# Submit it beside train.py\n#SBATCH --nodes=1\n"
                     "# accelerate launch would do too\nsrun python train.py\n",
    "ch/train.py": '"""Train; other.py is the older way."""\nimport os\nimport sys\n\n'
                   'import numpy\nimport sklearn.datasets\nimport torch\nfrom PIL import Image\n\n'
                   'import helper\n\nNEEDS = "2.8"\n',
    "ch/helper.py": "import torch.distributed as dist\nimport yaml\n\n\ndef join(device):\n"
                    "    dist.init_process_group('nccl', device_id=device)\n",
    "ch/other.py": 'import torch\n\nNEEDS = "2.13"\n',
    "ch/speed.sbatch": "#!/bin/bash\n#SBATCH --nodes=1\nsrun deepspeed other.py\n",
    "ch/plain.py": "import tensorflow\n",
    "ch/hvd.py": "import horovod.torch as hvd\nimport torch\n",
}


def snippets(tmp_path: Path) -> Path:
    root = tmp_path / "snippets"
    for name, text in SCRIPTS.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def centre(tmp_path: Path, extra: str = "", name: str = "centre.toml") -> profile.Profile:
    path = tmp_path / name
    path.write_text(PROFILE + extra)
    return profile.load(path)


def test_a_script_needs_the_newest_release_of_what_it_runs_and_imports(tmp_path):
    root = snippets(tmp_path)
    assert software.needs("ch/train.py", root) == ("2.8", "")  # its own NEEDS; not other.py's
    assert software.needs("ch/job.sbatch", root) == ("2.8", "for train.py")
    assert software.needs("ch/helper.py", root) == (
        "2.3", "it passes device_id to init_process_group")
    assert software.needs("ch/speed.sbatch", root) == ("2.13", "for other.py")
    assert software.needs("ch/plain.py", root) is None


def test_a_script_needs_the_packages_it_and_what_it_runs_import_by_their_pip_names(tmp_path):
    root = snippets(tmp_path)
    # not the standard library, torch or the folder's own modules; yaml from helper.py
    assert software.packages("ch/train.py", root) == ["numpy", "pillow", "pyyaml",
                                                      "scikit-learn"]
    assert software.packages("ch/job.sbatch", root) == software.packages("ch/train.py", root)
    assert software.packages("ch/speed.sbatch", root) == ["deepspeed"]  # its command
    assert software.uses_torch("ch/job.sbatch", root) and not software.uses_torch(
        "ch/plain.py", root)


def test_the_readers_own_environment_lacks_nothing(tmp_path):
    root = snippets(tmp_path)
    own = centre(tmp_path, "")  # no [environment] torch
    assert [software.problems(s, own, root) for s in software.scripts(root)] == [[]] * 7
    assert software.report(own, root) == {}
    assert "no [environment] torch" in software.summary(own, root)[0]


def test_a_release_older_than_the_script_needs_is_one_sentence_and_its_fix(tmp_path):
    """The fix names the change to the job script: another module in place of the module
    lines, else a virtual environment; in a container, another image, else no container."""
    root = snippets(tmp_path)
    old = centre(tmp_path, 'torch = "2.1.2"\npackages = ["numpy"]\n')
    [problem] = software.problems("ch/job.sbatch", old, root)
    assert problem.sentence == ("needs PyTorch ≥ 2.8 (for train.py); the environment of "
                                "Testbed gives 2.1.2")
    assert problem.fix == (
        "Use a module with PyTorch 2.8 or newer, if Testbed has one: put its `module load` "
        "lines in place of those of the job script. Otherwise use a virtual environment "
        "with PyTorch 2.8 or newer: in place of the module lines, load only the modules it "
        "was made with (not a PyTorch module), then `source .venv/bin/activate`")
    assert (problem.reason, problem.kind) == ("needs PyTorch ≥ 2.8 for train.py",
                                              "needs PyTorch ≥ 2.8")
    assert problem.page == "slurm/environment" and problem.lines == ()
    [own] = software.problems("ch/helper.py", old, root)
    assert own.reason == "needs PyTorch ≥ 2.3: it passes device_id to init_process_group"
    assert "of the job script that runs it" in own.fix
    assert software.problems("ch/plain.py", old, root) == []  # no PyTorch: not its business
    assert software.untested("ch/job.sbatch", old, {}, root) == ""  # refused, not untested
    boxed = centre(tmp_path, 'torch = "2.1.2"\ncontainer_image = "/images/torch.sif"\n'
                             'container_exec = "apptainer exec"\n', "boxed.toml")
    [problem] = software.problems("ch/job.sbatch", boxed, root)
    assert problem.fix == (
        "Use an image with PyTorch 2.8 or newer, if Testbed has one: name it in the `export "
        "CONTAINER=` line of the job script. Otherwise use a virtual environment with "
        "PyTorch 2.8 or newer: in the job script, put `source .venv/bin/activate` in place "
        "of the module lines, and start the commands without `apptainer exec $CONTAINER`")


def test_a_missing_package_is_one_sentence_and_the_lines_that_add_it(tmp_path):
    """A virtual environment on the module that sees its packages, the package added,
    and the job script's change: activate it, and torchrun, which comes with the module,
    through the environment's Python; deepspeed, installed into it, stays."""
    root = snippets(tmp_path)
    new = centre(tmp_path, 'torch = "2.13.0"\npackages = ["NumPy", "PyYAML", "pillow"]\n')
    [problem] = software.problems("ch/job.sbatch", new, root)
    assert problem.sentence == ("needs scikit-learn (for train.py), which the environment "
                                "of Testbed does not provide")
    assert (problem.reason, problem.kind) == ("needs scikit-learn for train.py",
                                              "needs scikit-learn")
    assert problem.lines == ("module purge", "module load pytorch/2.1.2",
                             "python -m venv --system-site-packages .venv",
                             f"{software.SEE_BASE}  # where the Python of the module is a virtual environment",
                             ".venv/bin/python -m pip install scikit-learn")
    assert problem.after() == "Then add `source .venv/bin/activate` to the job script, after " \
                              "its module lines."  # it runs python only
    [own] = software.problems("ch/train.py", new, root)
    assert own.sentence.startswith("imports scikit-learn, which")
    assert own.after() == (
        "Then add `source .venv/bin/activate` to the job script that runs it, after its "
        "module lines, and write `python -m torch.distributed.run` for `torchrun`: "
        "`torchrun` starts its processes with the Python it runs under, which may be the "
        "Python of the module, and that one does not see `.venv`.")
    assert own.again("job.sbatch") == (
        "With the virtual environment of the note under `job.sbatch`, add `source "
        ".venv/bin/activate` to the job script that runs it, after its module lines, and "
        "write `python -m torch.distributed.run` for `torchrun`.")
    [speed] = software.problems("ch/speed.sbatch", new, root)
    assert speed.lines[-1] == ".venv/bin/python -m pip install deepspeed"
    assert speed.after() == ("Then add `source .venv/bin/activate` to the job script, after "
                             "its module lines.")  # .venv's own deepspeed: no change
    assert software.problems("ch/helper.py", new, root) == []  # 2.3 and pyyaml: given
    assert list(software.reasons(new, root).items()) == [  # most scripts first
        ("needs scikit-learn", ["ch/job.sbatch", "ch/train.py"]),
        ("needs horovod", ["ch/hvd.py"]), ("needs deepspeed", ["ch/speed.sbatch"])]
    [horovod] = software.problems("ch/hvd.py", new, root)  # built, not installed by pip
    assert horovod.lines[-1] == "PYTHON=.venv/bin/python bash build_horovod.sh"


def test_in_a_container_the_package_goes_into_a_virtual_environment_it_runs(tmp_path):
    """Not pip's --user, which a container whose Python is a virtual environment refuses:
    a virtual environment made and filled through the container, and the job script's
    commands run with its programs; torchrun of the image becomes its module."""
    root = snippets(tmp_path)
    boxed = centre(tmp_path, 'torch = "2.13.0"\npackages = ["numpy", "pillow", "pyyaml"]\n'
                             'container_image = "/images/torch.sif"\n'
                             'container_exec = "apptainer exec"\n')
    [problem] = software.problems("ch/train.py", boxed, root)
    run = "apptainer exec $CONTAINER"
    assert problem.lines == (
        "module purge", "module load pytorch/2.1.2", "export CONTAINER=/images/torch.sif",
        f"{run} python -m venv --system-site-packages .venv",
        f"{run} {software.SEE_BASE}  # where the Python of the container image is a virtual "
        f"environment",
        f"{run} .venv/bin/python -m pip install scikit-learn")
    assert problem.then == (f"Then, in the job script that runs it, write `{run} "
                            f".venv/bin/python` for `{run} python` and `{run} .venv/bin/python "
                            f"-m torch.distributed.run` for `{run} torchrun`")
    [speed] = software.problems("ch/speed.sbatch", boxed, root)
    assert speed.then == (f"Then, in the job script, write `{run} .venv/bin/deepspeed` for "
                          f"`{run} deepspeed`") and speed.because == ""
    [horovod] = software.problems("ch/hvd.py", boxed, root)
    assert horovod.lines[-1] == f"{run} env PYTHON=.venv/bin/python bash build_horovod.sh"


WORKER = "import os, sys\nimport tinypkg\nprint('worker', sys.executable, tinypkg.NAME)\n"


def wheel(folder: Path) -> Path:
    """A wheel of the package tinypkg, for pip to install without an index."""
    path = folder / "tinypkg-1.0-py3-none-any.whl"
    info = "tinypkg-1.0.dist-info"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr("tinypkg.py", "NAME = 'tinypkg'\n")
        whl.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n")
        whl.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: hand\n"
                                      "Root-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(f"{info}/RECORD", f"tinypkg.py,,\n{info}/METADATA,,\n{info}/WHEEL,,\n"
                                       f"{info}/RECORD,,\n")
    return path


@pytest.mark.timeout(120)
def test_the_notes_lines_add_a_package_that_torchrun_through_the_environment_sees(tmp_path):
    """A note's lines, run as they are on top of this Python, which is itself a virtual
    environment (as a container's /opt/venv can be): the new environment sees its torch
    (base.pth names its folder: --system-site-packages alone shows only the packages of
    the Python that one was made from) and the package pip adds, here from a wheel; with
    the job script's change, torchrun's processes run in it, and with the module's own
    torchrun they do not."""
    (tmp_path / "ch").mkdir()
    (tmp_path / "ch" / "train.py").write_text("import tinypkg\nimport torch\n")
    path = tmp_path / "centre.toml"
    path.write_text(PROFILE.replace('"module purge", "module load pytorch/2.1.2"',
                                    '"export MODULE_LOADED=1"')
                    + f'torch = "{torch_versions.torch_release()}"\n')
    [problem] = software.problems("ch/train.py", profile.load(path), tmp_path)
    assert problem.lines[-1] == ".venv/bin/python -m pip install tinypkg"
    assert "`python -m torch.distributed.run` for `torchrun`" in problem.then
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "worker.py").write_text(WORKER)
    bin_ = Path(sys.executable).parent  # "the module's" python and torchrun
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1",
           "PIP_FIND_LINKS": str(wheel(tmp_path).parent), "OMP_NUM_THREADS": "1",
           "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}"}
    env.pop("VIRTUAL_ENV", None)

    def bash(*lines):  # torchrun and its workers in a session of their own, ended on a timeout
        run = subprocess.Popen(["bash", "-euc", "\n".join(lines)], cwd=folder, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
        try:
            out, err = run.communicate(timeout=100)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            raise
        return subprocess.CompletedProcess(run.args, run.returncode, out, err)
    made = bash(*problem.lines)
    assert made.returncode == 0, made.stdout + made.stderr
    torch_folder = str(Path(importlib.util.find_spec("torch").origin).parents[1])
    assert torch_folder in (folder / ".venv" / sysconfig.get_path(
        "purelib", "posix_prefix", {"base": ""}).lstrip("/") / "base.pth").read_text()
    launch = "--standalone --nproc_per_node=1 worker.py"
    job = bash("source .venv/bin/activate", f"python -m torch.distributed.run {launch}")
    assert f"worker {folder}/.venv/bin/python tinypkg" in job.stdout, job.stdout + job.stderr
    theirs = bash("source .venv/bin/activate", f"{bin_ / 'torchrun'} {launch}")
    assert theirs.returncode != 0 and "No module named 'tinypkg'" in theirs.stderr, \
        theirs.stdout + theirs.stderr


def test_a_release_outside_the_tested_range_is_untested_not_a_problem(tmp_path):
    root = snippets(tmp_path)
    releases = {"ch/helper.py": {"2.4.1": "failed", "2.6.0": "passed", "2.13.0": "passed"}}
    older = centre(tmp_path, 'torch = "2.4.1"\npackages = ["pyyaml"]\n')
    assert software.problems("ch/helper.py", older, root) == []
    assert software.untested("ch/helper.py", older, releases, root) == (
        "not yet tested with 2.4.1 (tested with 2.6.0–2.13.0)")
    inside = centre(tmp_path, 'torch = "2.8.0"\npackages = ["pyyaml"]\n', "inside.toml")
    assert software.untested("ch/helper.py", inside, releases, root) == ""


def test_alpha_centauris_module_cannot_run_what_needs_newer_or_more():
    """The shipped profile of ZIH's Alpha Centauri (its PyTorch 2.1.2 module), through
    the command line: the scripts it cannot run, grouped by what stops them with their
    counts (FSDP2's hybrid script, the node check: device_id came in 2.3, the quick start:
    scikit-learn, DeepSpeed's scripts), then the untested ones and the command that tests
    them. The guide's own environment lacks what requirements-extras.txt and Horovod's
    build add."""
    ran = subprocess.run([sys.executable, "-m", "harness.software", "profiles/zih-alpha.toml"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0].startswith("profiles/zih-alpha.toml: the environment of Alpha Centauri "
                               "gives PyTorch 2.1.2 and numpy; it cannot run ")
    assert all(len(line) <= 100 for line in lines if line.startswith("    ")), ran.stdout
    groups = {line.strip(): i for i, line in enumerate(lines) if line.startswith("  needs")}
    listed = {kind.split(":")[0]: " ".join(lines[i + 1:min([j for j in groups.values()
                                                             if j > i] + [len(lines)])])
              for kind, i in groups.items()}
    for kind, script in [("needs PyTorch ≥ 2.10", "model_parallel/hybrid_2d.py"),
                         ("needs PyTorch ≥ 2.3", "troubleshooting/node_health.py"),
                         ("needs scikit-learn", "quickstart/train.py"),
                         ("needs deepspeed", "memory/deepspeed_zero.sbatch")]:
        assert script in listed[kind].replace(",", " ").split(), ran.stdout
    counts = [int(kind.split(": ")[1].split()[0]) for kind in groups]
    assert counts == sorted(counts, reverse=True) and f"cannot run {sum(counts)} scripts" \
        in lines[0]
    assert any(line.startswith("Not yet tested with PyTorch 2.1.2: ") and line.endswith(
        "more scripts; make test CENTRE=profiles/zih-alpha.toml runs their tests on it:")
        for line in lines), ran.stdout
    default = subprocess.run([sys.executable, "-m", "harness.software", "profiles/default.toml"],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert default.returncode == 0 and "no [environment] torch" in default.stdout
    assert ("which has every package the scripts import but accelerate and horovod "
            "(requirements-extras.txt adds accelerate; frameworks/build_horovod.sh builds "
            "horovod; make test-extras installs them here)") in default.stdout


def test_the_plugin_acts_only_on_the_release_of_the_centres_environment(tmp_path, monkeypatch):
    release = torch_versions.torch_release()
    monkeypatch.delenv(profile.ENV_VAR, raising=False)
    assert claimed.centre_on_its_release() is None
    for torch, acts in [(release, True), (release.rsplit(".", 1)[0], True),  # "2.13" too
                        ("1.13.1", False), ("", False)]:
        path = tmp_path / f"centre-{torch or 'own'}.toml"
        path.write_text(PROFILE + (f'torch = "{torch}"\n' if torch else ""))
        monkeypatch.setenv(profile.ENV_VAR, str(path))
        assert (claimed.centre_on_its_release() is not None) == acts, torch


def test_on_the_centres_release_only_the_tests_of_scripts_it_can_run_are_selected(tmp_path):
    """A session on the installed release with a centre whose environment gives it, and
    no other package: the quick start's test (scikit-learn) and a test tied to no snippet
    are deselected, the basics' test and the older_torch tests stay, and the header says
    what is not run and why."""
    path = tmp_path / "centre.toml"
    path.write_text(PROFILE + f'torch = "{torch_versions.torch_release()}"\n')
    env = {**os.environ, profile.ENV_VAR: str(path)}
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-o", f"cache_dir={tmp_path}",
         "-p", "no:xdist", "tests/basics/test_ranks.py", "tests/quickstart/test_train.py",
         "tests/harness/test_outputs.py", "tests/test_snippet_tests.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    files = {line.split("::")[0].strip().removeprefix("<Module ").rstrip(">")
             for line in ran.stdout.splitlines() if "<Module " in line}
    assert files == {"test_ranks.py", "test_snippet_tests.py"}, ran.stdout
    assert "test_on_an_older_pytorch_a_guarded_script_stops" in ran.stdout
    assert "test_a_page_names_the_release_its_script_asks_for" not in ran.stdout
    assert f"centre centre.toml: PyTorch {torch_versions.torch_release()} is the release" \
        in ran.stdout
    assert "not run: needs scikit-learn (" in ran.stdout and "quickstart/train.py" in ran.stdout


def test_make_test_for_a_centre_runs_on_its_environments_release(tmp_path):
    """TORCH defaults to the release of CENTRE's environment where it is not the pin;
    TORCH= on the command line wins."""
    pin = next(line.split("==")[1] for line in (ROOT / "requirements.txt").read_text()
               .splitlines() if line.startswith("torch=="))

    def pytest_of(torch, *args):
        path = tmp_path / f"{torch or 'own'}.toml"
        path.write_text(PROFILE + (f'torch = "{torch}"\n' if torch else ""))
        ran = subprocess.run(["make", "-n", "test", f"CENTRE={path}", *args], cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
        return next(line.split()[0] for line in ran.stdout.splitlines()
                    if "pytest -m" in line)

    assert pytest_of("2.4.1") == ".venv-torch-2.4.1/bin/pytest"
    assert pytest_of("2.4.1", "TORCH=") == ".venv/bin/pytest"
    assert pytest_of("2.4.1", "TORCH=2.6.0") == ".venv-torch-2.6.0/bin/pytest"
    assert pytest_of(pin) == pytest_of("") == ".venv/bin/pytest"
