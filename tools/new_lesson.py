"""Write a new lesson that passes every check as it stands: its page, its snippet and its
test, and the page's entry in its chapter's table of contents (``make new-lesson``).

Usage: python tools/new_lesson.py CHAPTER NAME
Then edit the three files and run ``make check SNIPPET=CHAPTER/NAME.py``.
"""

import re
import sys
from pathlib import Path
from string import Template

ROOT = Path(__file__).resolve().parent.parent
INDEX = ROOT / "docs" / "index.md"

PAGE = Template('''\
# $title

```{overview}
Every {term}`rank` holds a number; an {term}`all-reduce` gives each of them the sum.
Replace this overview with what the reader learns here and why it matters.
```

```{objectives}
- Sum a tensor over every rank with one call.
```

## The sum over every rank

The script adds up the ranks' numbers and prints the sum on rank 0 only:

```{snippet} $chapter/$name.py
```

```{snippet-output} $chapter/$name.out
```

```{exercise} Four ranks
:label: $chapter-$name-four

What does the script print with 4 {term}`processes <process>`?
```

```{solution} $chapter-$name-four
:class: dropdown

`world size 4, sum of the ranks 6`: 0 + 1 + 2 + 3.
```

```{keypoints}
- An all-reduce leaves the same result on every rank.
```

```{how-tested}
The output on this page comes from a run on CPUs with gloo, 2 processes under
`torchrun --standalone`.
```
''')

SNIPPET = Template('''\
"""Every rank adds its rank to a sum that every rank receives.

    torchrun --standalone --nproc_per_node=2 $name.py
"""

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def setup():
    """NCCL on this process's GPU where there are GPUs, gloo on the CPU otherwise."""
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=60))
    return device


def main():
    device = setup()
    try:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        total = torch.tensor([float(rank)], device=device)
        dist.all_reduce(total)
        if rank == 0:
            print(f"world size {world_size}, sum of the ranks {total.item():.0f}")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
''')

TEST = Template('''\
"""snippets/$chapter/$name.py, shown on docs/$chapter/$name.md."""

from harness.launch import run
from tests.devices import on_each_device

SNIPPET = "$chapter/$name.py"


@on_each_device(gpus=2, one_gpu=True)
def test_every_rank_receives_the_sum_of_the_ranks(device):
    ranks = device.ranks(2)
    result = run(SNIPPET, launcher="torchrun", nproc=ranks, env=device.env(),
                 timeout=device.pick(60, 180))
    device.check_output(result)
    device.assert_ran(ranks, result=result)
    assert result.stdout == f"world size {ranks}, sum of the ranks {sum(range(ranks))}\\n"
''')


def add_to_toctree(index: str, chapter: str, name: str) -> str:
    """The index with ``chapter/name`` after the last page of the chapter's toctree."""
    pages = list(re.finditer(rf"^{re.escape(chapter)}/\S+\n", index, re.M))
    if not pages:
        sys.exit(f"new_lesson.py: docs/index.md has no table of contents with {chapter}/ "
                 "pages: give CHAPTER as one of the folders it lists")
    end = pages[-1].end()
    return index[:end] + f"{chapter}/{name}\n" + index[end:]


def main(chapter: str, name: str) -> None:
    if not all(re.fullmatch(r"[a-z][a-z0-9_]*", part) for part in (chapter, name)):
        sys.exit("usage: make new-lesson CHAPTER=<chapter> NAME=<name> "
                 "(lower case letters, digits and _)")
    files = {ROOT / "docs" / chapter / f"{name}.md": PAGE,
             ROOT / "snippets" / chapter / f"{name}.py": SNIPPET,
             ROOT / "tests" / chapter / f"test_{name}.py": TEST}
    taken = [str(p.relative_to(ROOT)) for p in files if p.exists()]
    if taken:
        sys.exit(f"new_lesson.py: {', '.join(taken)} exists already: choose another NAME")
    index = add_to_toctree(INDEX.read_text(), chapter, name)
    title = name.replace("_", " ").capitalize()
    for path, template in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template.substitute(chapter=chapter, name=name, title=title))
        print(f"wrote {path.relative_to(ROOT)}")
    INDEX.write_text(index)
    print(f"added {chapter}/{name} to docs/index.md; edit the three files, then run "
          f"make check SNIPPET={chapter}/{name}.py")


if __name__ == "__main__":
    main(*(sys.argv[1:] + ["", ""])[:2])
