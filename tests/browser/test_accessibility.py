"""axe-core over every page of the site, in light and in dark mode (tests/browser/axe.py
says which rules run where). The pages are visited once for these tests and for the page
weights (the every_page fixture)."""

from collections import Counter

import pytest

pytestmark = pytest.mark.browser

BLOCKING = {"serious", "critical"}


@pytest.fixture(scope="module")
def violations(every_page):
    found = every_page.violations
    summary = Counter((mode, v["impact"], v["id"]) for (name, mode), vs in found.items()
                      for v in vs)
    print(f"\naxe-core on {len(found) // 2} pages:",
          ", ".join(f"{mode} {impact} {rule}: {n} pages"
                    for (mode, impact, rule), n in sorted(summary.items())) or "no violations")
    return found


@pytest.mark.parametrize("mode", ["light", "dark"])
def test_no_serious_or_critical_violations(violations, mode):
    bad = [f"{name}: {v['impact']} {v['id']} ({v['help']}): {v['nodes'][:3]}"
           for (name, m), vs in violations.items() if m == mode
           for v in vs if v["impact"] in BLOCKING]
    assert not bad, "\n".join(bad)


def test_no_violations_at_all(violations):
    """Moderate and minor ones too: the site has none."""
    rest = [f"{name} ({mode}): {v['impact']} {v['id']}: {v['nodes'][:2]}"
            for (name, mode), vs in violations.items() for v in vs]
    assert not rest, "\n".join(rest)
