"""The HTTP service's /docs page works offline: headless Chromium, with no network but loopback, loads
it from a real server process and renders Swagger UI (its scripts and styles come from the
fastapi-offline package, not a CDN); the screenshot is not a white page. Skips where Chromium is not
installed (Debian's chromium package; scripts/setup.sh installs it)."""

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest
from http_service import ServiceProcess

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Chromium's own services stay off: no updates, sync or background traffic, only the page asked for.
QUIET_CHROMIUM = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    command = [CHROMIUM, *QUIET_CHROMIUM, f"--user-data-dir={profile}", "--virtual-time-budget=10000", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)")
def test_the_docs_page_renders_offline_in_headless_chromium(tmp_path: Path, dsn: Callable[..., str]) -> None:
    from PIL import Image

    gateway_switch = tmp_path / "gateway-off"
    gateway_switch.touch()
    environment = {"EMEM_DSN": dsn(), "EMEM_NO_AUTH": "1", "EMEM_TEST_GATEWAY_SWITCH": str(gateway_switch)}
    with ServiceProcess.uvicorn(environment) as service:
        page = f"{service.url}/docs"
        dom = chromium(tmp_path / "profile-dom", "--dump-dom", page).stdout
        screenshot = tmp_path / "docs.png"
        chromium(tmp_path / "profile-shot", f"--screenshot={screenshot}", "--window-size=1200,900", page)
    assert "swagger-ui" in dom and 'class="opblock-summary-path"' in dom  # Swagger UI ran: routes are listed
    assert "/find" in dom and "cdn.jsdelivr.net" not in dom
    with Image.open(screenshot) as image:
        # The colours of a grey-scale ("L") image are single levels, not tuples.
        colours = cast(list[tuple[int, int]], image.convert("L").getcolors(maxcolors=1 << 16) or [])
    dark = sum(count for count, level in colours if level < 200)
    assert dark > 1000, "the screenshot is a blank page"
