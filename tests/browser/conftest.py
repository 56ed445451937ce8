"""The built site, served on localhost, and Debian's Chromium driven by Playwright.

The site is built from the current sources into a temporary folder once per test
session: a clean build, so the tests never see a stale docs/_build. Chromium is the
system's /usr/bin/chromium, started off the network (tools/page_weight.py says how);
Playwright never downloads a browser here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.launch import ROOT
from tests.browser import axe
from tools.page_weight import CHROMIUM, Recorder, Weight, launch, pages, serve

#: A reader's page waits for nothing: no transitions between light and dark.
NO_MOTION = "*, *::before, *::after { transition: none !important; animation: none !important; }"


def _missing_browser() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "needs Playwright (pip install playwright; it needs no browser download)"
    if not (shutil.which(CHROMIUM) or Path(CHROMIUM).is_file()):
        return f"needs Chromium at {CHROMIUM} (Debian: apt-get install chromium)"
    return None


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    """The site, built from docs/ as `make html` builds it (warnings are not errors here)."""
    reason = _missing_browser()
    if reason:
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run(
        [sys.executable, "-m", "sphinx", "-q", "-b", "html", "-d", str(out / ".doctrees"),
         str(ROOT / "docs"), str(out / "html")],
        capture_output=True, text=True, timeout=600)
    html = out / "html"
    if build.returncode != 0 or not (html / "index.html").is_file():
        pytest.fail(f"the site did not build:\n{build.stderr[-3000:]}")
    return html


@pytest.fixture(scope="session")
def base_url(site) -> str:
    with serve(site) as url:
        yield url


@pytest.fixture(scope="session")
def browser(site):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = launch(playwright)
        yield chromium
        chromium.close()


@contextlib.contextmanager
def new_page(browser, base_url):
    """A page in a new browser context (empty cache) that may use the clipboard."""
    context = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 900})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base_url.rstrip("/"))
    page = context.new_page()
    page.add_init_script(f"""
        document.addEventListener('DOMContentLoaded', () => {{
            const style = document.createElement('style');
            style.textContent = {NO_MOTION!r};
            document.head.appendChild(style);
        }});""")
    try:
        yield page
    finally:
        context.close()


@pytest.fixture
def page(browser, base_url):
    with new_page(browser, base_url) as page:
        yield page


@dataclasses.dataclass
class Visits:
    violations: dict  # (page, "light" | "dark") -> axe's violations
    weights: list[Weight]  # what each page loaded with an empty cache


@pytest.fixture(scope="session")
def every_page(site, browser, base_url) -> Visits:
    """Every page opened once, with an empty cache, two at a time: weighed, then checked
    by axe in light and in dark mode."""
    source = axe.source()
    names = sorted(pages(site), key=lambda name: name not in axe.EVERY_RULE_ON)
    visits = Visits({}, [])
    checked_styles = {"light": set(), "dark": set()}
    with contextlib.ExitStack() as stack:
        tabs = [stack.enter_context(new_page(browser, base_url)) for _ in range(axe.WORKERS)]
        recorders = []
        for tab in tabs:
            tab.context.new_cdp_session(tab).send("Network.setCacheDisabled",
                                                  {"cacheDisabled": True})
            recorders.append(Recorder(tab, base_url, site))
        for start in range(0, len(names), axe.WORKERS):
            batch = names[start:start + axe.WORKERS]
            for tab, recorder, name in zip(tabs, recorders, batch):
                visits.weights.append(recorder.visit(tab, name))
                tab.add_script_tag(content=source)
                tab.evaluate(axe.ONE_TOKEN_PER_STYLE)
            for mode in ("light", "dark"):
                checked = axe.check_batch(tabs, batch, mode, checked_styles[mode])
                for name, found in checked.items():
                    visits.violations[name, mode] = found
    visits.weights.sort(key=lambda weight: weight.page)
    return visits
