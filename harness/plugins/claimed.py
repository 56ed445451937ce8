"""pytest plugin of the other releases of PyTorch: which tests run on a release.

- ``--claimed-by=RELEASE`` runs only the tests of the snippets whose oldest tested release
  is RELEASE (docs/_data/torch_versions.json), and the tests marked older_torch.
- A centre's release: when the installed torch is the release that the centre profile's
  environment gives (``[environment] torch``; ``make test CENTRE=profiles/x.toml`` runs in
  .venv-torch-<that release>), only the tests of the snippets that environment can run
  (tests/<chapter>/test_<name>.py of snippets/<chapter>/<name>.*; harness/software.py
  says which it cannot) and the tests marked older_torch run, and the header and the
  summary name the scripts left out and why. Whole test files run or none, so
  ``--record-releases`` records the release for the snippets whose tests pass.
"""

import os

import pytest

from harness import profile, software, torch_versions
from harness.plugins.strictness import keep_only


def pytest_addoption(parser):
    parser.addoption("--claimed-by", metavar="RELEASE",
                     help="run only the tests of the snippets whose oldest tested PyTorch "
                          "release is RELEASE (docs/_data/torch_versions.json), and the tests "
                          "marked older_torch")


def centre_on_its_release() -> profile.Profile | None:
    """The centre profile ($CENTRE) whose environment gives the installed release of
    torch ("2.4" counts for 2.4.1), or None."""
    if not os.environ.get(profile.ENV_VAR):
        return None
    try:
        centre = profile.load()
    except profile.ProfileError as error:
        raise pytest.UsageError(str(error)) from None
    if not centre.torch:
        return None
    wanted = torch_versions.key(centre.torch)
    installed = torch_versions.key(torch_versions.torch_release())
    return centre if installed[:len(wanted)] == wanted else None


def _centre(config) -> profile.Profile | None:
    if not hasattr(config, "_centre_on_its_release"):
        config._centre_on_its_release = centre_on_its_release()
    return config._centre_on_its_release


def _not_run(config, centre: profile.Profile) -> list[str]:
    """"not run: needs PyTorch ≥ 2.10 (model_parallel/hybrid_2d.py, ...)", a line for each
    reason the environment cannot run scripts, worked out once for the header and the
    summary."""
    if not hasattr(config, "_centre_not_run"):
        config._centre_not_run = [f"not run: {reason} ({', '.join(scripts)})"
                                  for reason, scripts in software.reasons(centre).items()]
    return config._centre_not_run


def pytest_report_header(config):
    centre = _centre(config)
    if centre is None:
        return None
    return [f"centre {centre.path.name}: PyTorch {torch_versions.torch_release()} is the "
            f"release of its environment; only the tests of the snippets that environment "
            f"can run, and those marked older_torch", *_not_run(config, centre)]


@pytest.hookimpl(tryfirst=True)  # select before the others order or mark
def pytest_collection_modifyitems(config, items):
    release = config.getoption("claimed_by")
    if release:
        claims = torch_versions.claims()
        if release not in claims.values():
            raise pytest.UsageError(f"--claimed-by={release}: no snippet claims it (claimed: "
                                    f"{sorted(set(claims.values()), key=torch_versions.key)})")
        keep_only(config, items, lambda item: (
            item.get_closest_marker("older_torch") is not None
            or any(claims.get(s) == release for s in _snippets(item))))
    centre = _centre(config)
    if centre is not None:
        stopped = {}

        def runs(snippet):
            if snippet not in stopped:
                stopped[snippet] = bool(software.problems(snippet, centre))
            return not stopped[snippet]
        keep_only(config, items, lambda item: (
            item.get_closest_marker("older_torch") is not None
            or bool(_snippets(item)) and all(runs(s) for s in _snippets(item))))


def _snippets(item) -> list[str]:
    return torch_versions.snippets_of(item.nodeid.split("::")[0])


def pytest_terminal_summary(terminalreporter, config):
    centre = _centre(config)
    if centre is not None and not hasattr(config, "workerinput"):
        lines = _not_run(config, centre)
        if lines:
            terminalreporter.section(f"not run in the environment of {centre.name}")
            for line in lines:
                terminalreporter.line(line)
