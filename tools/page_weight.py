"""What a reader downloads for each page of the site, measured in a real browser.

    .venv/bin/python tools/page_weight.py                  # builds the site first
    .venv/bin/python tools/page_weight.py docs/_build/html  # a site already built

Each page is opened in headless Chromium (Debian's /usr/bin/chromium) with an empty
cache, as on a reader's first visit, and every response it loads is counted by kind:
the page's HTML, stylesheets, scripts, fonts, images and the rest. Sizes are as sent
by a server that does not compress, and gzipped, as most web servers send text.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import http.server
import os
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
#: Headless, as root, and off the network: no background services, and every host
#: name but localhost resolves to nothing.
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]
KINDS = ["html", "css", "js", "font", "image", "other"]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serve(directory: Path):
    """Serve a folder on localhost; yield its base URL."""
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def launch(playwright):
    """Debian's Chromium; Playwright gives it a new, empty profile and downloads nothing."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def build_site(out: Path) -> Path:
    """Build the site from docs/ into out/html; return that folder."""
    subprocess.run([sys.executable, "-m", "sphinx", "-q", "-b", "html", "-d", str(out / ".doctrees"),
                    str(ROOT / "docs"), str(out / "html")], check=True, timeout=600)
    return out / "html"


def pages(site: Path) -> list[str]:
    """Every HTML page of the site, as paths relative to its root."""
    return sorted(str(p.relative_to(site)) for p in site.rglob("*.html")
                  if not p.relative_to(site).parts[0].startswith("_"))


def kind(resource_type: str, url: str) -> str:
    if resource_type == "document":
        return "html"
    if resource_type == "stylesheet":
        return "css"
    if resource_type == "script" or url.split("?")[0].endswith(".js"):
        return "js"
    if resource_type in ("font", "image"):
        return resource_type
    return "other"


@dataclass
class Weight:
    page: str
    raw: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    gz: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    urls: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.raw.values())

    @property
    def total_gz(self) -> int:
        return sum(self.gz.values())


class Recorder:
    """Collects what a browser page loads, to weigh it page by page."""

    def __init__(self, page, base_url: str, site: Path):
        self.base_url, self.site = base_url, site
        self.requests = []
        page.on("requestfinished", lambda request: self.requests.append(request))

    def visit(self, page, name: str) -> Weight:
        """Open a page, wait until it and its fonts are loaded, and weigh what it loaded."""
        self.requests.clear()  # nothing that the page before loaded late
        visit(page, name)
        weight = Weight(name)
        for request in self.requests:
            response = request.response()
            if response is None or response.status != 200:
                continue
            path = request.url.removeprefix(self.base_url).split("?")[0]
            # the file served, read from the site (a response's body is not always kept)
            body = (self.site / (path or "index.html")).read_bytes()
            assert len(body) == int(response.header_value("content-length")), path
            k = kind(request.resource_type, request.url)
            weight.raw[k] += len(body)
            weight.gz[k] += len(gzip.compress(body, 6))
            weight.urls.append(request.url.removeprefix(self.base_url))
        self.requests.clear()
        return weight


def visit(page, name: str) -> None:
    """Open a page and wait until it and its fonts are loaded."""
    page.goto(name, wait_until="load")
    page.evaluate("document.fonts.ready.then(() => true)")


def measure(browser, base_url: str, site: Path, names: list[str]) -> list[Weight]:
    """Open each page with an empty cache and add up what it loaded, fonts included."""
    weights = []
    for name in names:
        context = browser.new_context(base_url=base_url)
        page = context.new_page()
        weights.append(Recorder(page, base_url, site).visit(page, name))
        context.close()
    return weights


def table(weights: list[Weight]) -> str:
    """One row per page: kilobytes by kind, then the totals as sent and gzipped."""
    head = f"{'page':<36}" + "".join(f"{k:>7}" for k in KINDS) + f"{'total':>8}{'gzip':>7}"
    rows = [head, "-" * len(head)]
    for w in weights:
        rows.append(f"{w.page:<36}" + "".join(f"{w.raw[k] / 1024:>7.0f}" for k in KINDS)
                    + f"{w.total / 1024:>8.0f}{w.total_gz / 1024:>7.0f}")
    rows.append("kB on a first visit with an empty cache; gzip: as a compressing server sends it")
    return "\n".join(rows)


def main(argv: list[str]) -> None:
    from playwright.sync_api import sync_playwright

    with contextlib.ExitStack() as stack:
        if argv:
            site = Path(argv[0])
        else:
            site = build_site(Path(stack.enter_context(tempfile.TemporaryDirectory())))
        base_url = stack.enter_context(serve(site))
        playwright = stack.enter_context(sync_playwright())
        browser = launch(playwright)
        print(table(measure(browser, base_url, site, pages(site))))
        browser.close()


if __name__ == "__main__":
    main(sys.argv[1:])
