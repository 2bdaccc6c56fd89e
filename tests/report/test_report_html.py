"""report.html: self-contained, and it shows its plots when a real browser renders it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from loadgen.report.cmd import write_report

from support.run_fixtures import sample, stream, ticks, write_run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DATA_PNG = re.compile(
    r"<img class=.plot. alt=.([a-z ]+). src=.data:image/png;base64,[A-Za-z0-9+/=]+"
)


def mixed_run(path: Path) -> Path:
    w = stream("w", group="whale", prompt=60000, chunks=[6.0, *ticks(6.04, 60, 0.04)])
    minnows = [
        stream(f"m{i}", group="minnows", prompt=4000, sent=0.001, chunks=ticks(6.0 + i, 40, 0.05))
        for i in (1, 2, 3)
    ]
    live = stream(
        "m0", group="minnows", prompt=4000, sent=0.001,
        chunks=[0.3, *ticks(1.0, 5, 1.0), *ticks(6.05, 60, 0.05)],
    )  # fmt: skip
    polls = [
        sample(t / 4, running=min(4, 1 + t // 4), waiting=max(0, 3 - t // 4), kv=t / 50, gen=3 * t)
        for t in range(45)
    ]
    return write_run(path, [w, live, *minnows], polls)


def test_report_html_is_self_contained_with_three_plots(tmp_path: Path):
    run = mixed_run(tmp_path / "run")
    write_report(run)
    page = (run / "report.html").read_text()
    assert DATA_PNG.findall(page) == ["stream timeline", "latency percentiles", "server metrics"]
    assert "http://" not in page.replace("http://127.0.0.1:1/v1", "")  # only the target's label
    assert "<script" not in page and "https://" not in page
    assert "Whale + minnows" in page and "Verdicts per group" in page


def test_report_html_without_metrics_says_so(tmp_path: Path):
    run = write_run(tmp_path / "run", [stream("a", chunks=[0.1, 0.2, 0.3])])
    write_report(run)
    page = (run / "report.html").read_text()
    assert DATA_PNG.findall(page) == ["stream timeline", "latency percentiles"]
    assert "no server metrics" in page


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install chromium)")
def test_chromium_renders_the_plots(tmp_path: Path):
    run = mixed_run(tmp_path / "run")
    write_report(run)
    shot = tmp_path / "shot.png"
    cmd = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
        "--dump-dom", "--window-size=1400,3000", (run / "report.html").as_uri(),
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert DATA_PNG.findall(done.stdout) == [
        "stream timeline",
        "latency percentiles",
        "server metrics",
    ]
    image = Image.open(shot).convert("RGB")
    assert image.size == (1400, 3000)
    # The top of the page holds the stream timeline: coloured bars, not a blank page.
    top = image.crop((0, 0, 1400, 600))
    colours = top.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 200
    white = max(count for count, rgb in colours if rgb == (255, 255, 255))
    assert white < 0.9 * 1400 * 600
    assert len(image.getcolors(maxcolors=1 << 22) or []) > 1000
