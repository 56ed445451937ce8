"""pytest plugin of the other releases of PyTorch: ``--claimed-by=RELEASE`` runs only the
tests of the snippets whose oldest tested release is RELEASE
(docs/_data/torch_versions.json), and the tests marked older_torch."""

import pytest

from harness import torch_versions
from harness.plugins.strictness import keep_only


def pytest_addoption(parser):
    parser.addoption("--claimed-by", metavar="RELEASE",
                     help="run only the tests of the snippets whose oldest tested PyTorch "
                          "release is RELEASE (docs/_data/torch_versions.json), and the tests "
                          "marked older_torch")


@pytest.hookimpl(tryfirst=True)  # select before the others order or mark
def pytest_collection_modifyitems(config, items):
    release = config.getoption("claimed_by")
    if not release:
        return
    claims = torch_versions.claims()
    if release not in claims.values():
        raise pytest.UsageError(f"--claimed-by={release}: no snippet claims it "
                                f"(claimed: {sorted(set(claims.values()), key=torch_versions.key)})")

    def keep(item):
        snippets = torch_versions.snippets_of(item.nodeid.split("::")[0])
        return (item.get_closest_marker("older_torch") is not None
                or any(claims.get(s) == release for s in snippets))
    keep_only(config, items, keep)
