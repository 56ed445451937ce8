"""The runs of snippets/recipes/train_ddp.py and train_one_gpu.py that the tests of
docs/recipes/own_script.md compare with, each once per session (harness.launch.shared),
and what the tests read in a run: its losses, validation lines and checkpoint.
"""

import re
import tempfile
from pathlib import Path

from harness.launch import Result, run, shared, snippet, snippet_code
from harness.outputs import LOOSEST, Tolerance
from tests.compare import load

DDP = "recipes/train_ddp.py"
ONE_GPU = "recipes/train_one_gpu.py"
EPOCHS = 3
#: Images per step over all processes (--batch-size is STEP_BATCH // world size), as
#: train_one_gpu.py takes them: 30 steps per epoch of the 960 training images.
STEP_BATCH = 32
STEPS_PER_EPOCH = 30
TRAIN_IMAGES = 960
BATCH_INDEPENDENT = Path(__file__).with_name("batch_independent.py")
RECORD_BATCHES = Path(__file__).with_name("record_batches.py")
VAL_IMAGES = 101  # divides by none of 2, 3, 4


#: How far the training figures the page shows may move on another machine. Training at
#: these learning rates carries a rounding difference forward from step to step: with the
#: plainest CPU kernels (ATEN_CPU_CAPABILITY=default), the losses after 90 steps differed
#: from the captured ones by up to 2.3 %, the counts of right answers not at all.
TRAINING = Tolerance(rtol=LOOSEST, why="training carries rounding differences forward: "
                                       "up to 2.3 % after 90 steps with other kernels")


def validations(stdout: str) -> list[tuple[float, int, int]]:
    """(loss, right answers, images) of every validation line."""
    return [(float(m[1]), int(m[2]), int(m[3])) for m in re.finditer(
        r"validation: loss ([\d.]+), accuracy (\d+)/(\d+)", stdout)]


def losses(stdout: str) -> dict[int, float]:
    """The loss printed at each step."""
    return {int(m[1]): float(m[2])
            for m in re.finditer(r"step (\d+)/\d+ loss ([\d.]+)", stdout)}


def checkpoint(result: Result, name: str = "checkpoint.pt") -> dict:
    return load(result.workdir / name)


@shared
def stand_in() -> Path:
    """A stand-in data set, written once by the scripts' own make_stand_in, for the runs
    whose output the page does not show (each links it into its folder as ``images``)."""
    folder = Path(tempfile.mkdtemp(prefix="recipes-images-")) / "images"
    snippet_code(DDP)["make_stand_in"](folder)
    return folder


def folder_with_data(prefix: str) -> Path:
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    (workdir / "images").symlink_to(stand_in())
    return workdir


def train_ddp(*args, world: int, launcher: str = "torchrun", workdir: Path | None = None,
              wrapper: Path | None = None, **options) -> Result:
    """train_ddp.py on ``world`` processes for EPOCHS epochs, STEP_BATCH images per step;
    through ``wrapper`` (a script of tests/recipes that runs it) if given."""
    args = ("--data", "images", "--epochs", str(EPOCHS),
            "--batch-size", str(STEP_BATCH // world), *args)
    if wrapper:
        args = (*options.pop("wrapper_args", ()), str(snippet(DDP)), *args)
    return run(wrapper or DDP, *args, launcher=launcher, nproc=world,
               workdir=workdir or folder_with_data("recipes-ddp-"), timeout=240, **options)


@shared
def two_ranks() -> Result:
    """The page's run: 2 processes of 16 images each, from a folder with no data yet."""
    return train_ddp(world=2, workdir=Path(tempfile.mkdtemp(prefix="recipes-ddp-")))


@shared
def one_process() -> Result:
    """One process on the whole batch of every step."""
    return train_ddp(world=1, launcher="env")


@shared
def batch_independent(world: int) -> Result:
    """``world`` processes, through batch_independent.py: no batch statistics, float32;
    and through record_batches.py, which writes down each step's images and labels."""
    return train_ddp("--workers", "0", world=world, launcher="env", wrapper=RECORD_BATCHES,
                     wrapper_args=(str(BATCH_INDEPENDENT),))
