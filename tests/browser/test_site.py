"""The built site, used as a reader uses it: copy, download, tabs, solutions, search, dark mode."""

from __future__ import annotations

import json
import textwrap

import pytest

from harness import profile
from harness.launch import SNIPPETS
from tools.page_weight import pages

pytestmark = pytest.mark.browser

#: A page with a tab set of launchers, an exercise with a solution, and a snippet.
LESSON = "basics/dataparallel.html"


def snippet_files(name: str) -> list[bytes]:
    """The files of that name in snippets/, a job script as the centre profile renders it."""
    return [(profile.render_file(p).encode() if profile.needs_rendering(p) else p.read_bytes())
            for p in SNIPPETS.rglob(name) if p.is_file()]


@pytest.fixture(scope="module")
def snippet_pages(site):
    """Pages that offer a snippet for download."""
    return [name for name in pages(site)
            if 'class="snippet-download"' in (site / name).read_text()]


def show(block):
    """Open the tab or the dropdown that hides a block, as a reader would."""
    if block.is_visible():
        return
    tab = block.locator("xpath=ancestor::div[contains(@class, 'sd-tab-content')][1]"
                        "/preceding-sibling::label[1]")
    if tab.count():
        tab.click()
    for opener in ("xpath=ancestor::details[1]/summary",
                   "xpath=ancestor::*[contains(@class, 'dropdown')][1]"
                   "//*[contains(@class, 'admonition-title')][1]"):
        toggle = block.locator(opener)
        if not block.is_visible() and toggle.count():
            toggle.first.click()
    block.wait_for(state="visible")


def is_excerpt(copied: bytes, whole: bytes) -> bool:
    """The copied lines are consecutive lines of the file, maybe with their common
    indentation removed (a page quotes a function's body with :dedent:)."""
    lines, file_lines = copied.rstrip(b"\n").split(b"\n"), whole.split(b"\n")
    for start in range(len(file_lines) - len(lines) + 1):
        window = b"\n".join(file_lines[start:start + len(lines)])
        if window == b"\n".join(lines) or textwrap.dedent(window.decode()).encode() == b"\n".join(lines):
            return True
    return False


def test_every_snippet_is_copied_and_downloaded_exactly_as_its_file(page, snippet_pages):
    checked = whole = 0
    for name in snippet_pages:
        page.goto(name)
        blocks = page.locator("div.literal-block-wrapper:has(+ p.snippet-download)")
        for i in range(blocks.count()):
            block = blocks.nth(i)
            link = block.locator("xpath=following-sibling::p[1]//a")
            file_name = link.text_content().strip().removeprefix("Download ")
            downloaded = page.request.get(link.get_attribute("href"),
                                          fail_on_status_code=True).body()
            assert downloaded in snippet_files(file_name), f"{name}: {file_name} differs"
            show(block)
            block.locator("button.copybtn").click()
            copied = page.evaluate("navigator.clipboard.readText()").encode()
            shown = block.locator("pre").text_content().encode()
            # exactly what the page shows: the whole file, or the lines of it a page quotes
            assert copied.rstrip(b"\n") == shown.rstrip(b"\n"), f"{name}: {file_name}"
            if file_name.endswith(".ipynb"):  # a notebook's blocks are its code cells
                cells = [("".join(cell["source"])).rstrip("\n").encode()
                         for cell in json.loads(downloaded)["cells"]
                         if cell["cell_type"] == "code"]
                assert copied.rstrip(b"\n") in cells, f"{name}: {file_name} is not its cell"
            else:
                assert is_excerpt(copied, downloaded), f"{name}: {file_name} is not its file"
            whole += copied in (downloaded, downloaded.rstrip(b"\n"))
            checked += 1
    assert checked >= len(snippet_pages) > 0
    assert whole >= len(snippet_pages) // 2  # most snippets are shown whole


def test_launcher_tabs_switch(page):
    page.goto(LESSON)
    tabs = page.locator("div.sd-tab-set").first
    labels = tabs.locator("> label")
    contents = tabs.locator("> div.sd-tab-content")
    assert labels.count() >= 2
    assert contents.nth(0).is_visible() and not contents.nth(1).is_visible()
    labels.nth(1).click()
    assert contents.nth(1).is_visible() and not contents.nth(0).is_visible()
    assert "CPU" in labels.nth(1).inner_text()


def test_a_solution_is_hidden_until_opened(page):
    page.goto(LESSON)
    solution = page.locator("div.solution").first
    body = solution.locator("section, div.section, > :not(.admonition-title)").last
    assert solution.is_visible() and not body.is_visible()
    solution.locator(".admonition-title, button.toggle-button").first.click()
    body.wait_for(state="visible")
    assert "load_state_dict" in solution.inner_text()


def test_search_finds_distributedsampler_on_the_ddp_pages(page, site):
    page.goto("search.html?q=DistributedSampler")
    page.locator("#search-results p.search-summary").wait_for(timeout=60_000)  # all shown
    results = page.locator("#search-results ul.search li a")
    hrefs = [results.nth(i).get_attribute("href") for i in range(results.count())]
    if (site / "ddp" / "code_changes.html").is_file():
        assert any("ddp/code_changes.html" in h for h in hrefs), hrefs
    results.first.click()
    page.wait_for_load_state()
    assert "DistributedSampler" in page.locator("article").inner_text()


def test_dark_mode_renders(page, tmp_path):
    page.goto(LESSON)
    light = page.screenshot()
    page.locator("button.theme-switch-button").first.click()  # opens the colour menu
    page.locator('button.theme-change-button[data-mode="dark"]').first.click()
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    red, green, blue = (int(c) for c in background[background.index("(") + 1:-1].split(",")[:3])
    assert red + green + blue < 3 * 80, background  # dark, not white
    dark = page.screenshot(path=tmp_path / "dark.png")
    assert dark != light and len(dark) > 20_000  # a rendered page, not a blank one
    page.reload()  # the choice is remembered
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
