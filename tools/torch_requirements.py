"""Print the requirements of the tests' virtual environment for one release of torch.

    python tools/torch_requirements.py 2.6.0 > .venv-torch-2.6.0/requirements.txt

prints requirements.txt with ``torch==2.6.0`` in place of its pin, and with the packages
that tools/torch-releases.txt lists for that release in place of theirs. ``make test
TORCH=2.6.0`` installs the result.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "tools" / "torch-releases.txt"


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def overrides(release: str) -> list[str]:
    """The requirement specifiers tools/torch-releases.txt gives for the release."""
    found = []
    for line in TABLE.read_text().splitlines():
        fields = line.split("#", 1)[0].split()
        if fields and fields[0] == release:
            found.extend(fields[1:])
    return found


def requirements(release: str) -> list[str]:
    replace = {_name(r): r for r in [f"torch=={release}", *overrides(release)]}
    lines = []
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        text = line.split("#", 1)[0].strip()
        if text and _name(text) in replace:
            line = replace.pop(_name(text))
        lines.append(line)
    return lines + list(replace.values())  # packages requirements.txt does not have


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tools/torch_requirements.py <torch release, e.g. 2.6.0>")
    if not re.fullmatch(r"\d+\.\d+\.\d+", sys.argv[1]):  # e.g. a profile's "2.1"
        sys.exit(f"tools/torch_requirements.py: PyTorch {sys.argv[1]!r} is not a release pip "
                 f"can install: name all three numbers, such as 2.6.0")
    print("\n".join(requirements(sys.argv[1])))
