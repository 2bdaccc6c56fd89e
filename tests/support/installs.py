"""Fake server installs for the tests: a site folder with distributions' metadata and a
torch/version.py, behind a `python` wrapper that puts it on PYTHONPATH."""

from __future__ import annotations

import sys
from pathlib import Path


def fake_python(root: Path, dists: dict[str, str], cuda: str | None, hip: str | None) -> Path:
    """A python whose environment holds `dists` (name -> version) and a torch built for
    `cuda` / `hip` (torch/version.py as torch writes it: `cuda: Optional[str] = '12.8'`)."""
    site = root / "site"
    for name, version in {**dists, "torch": "2.9.0"}.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text("")
    (site / "torch" / "version.py").write_text(
        f"from typing import Optional\n__version__ = '2.9.0'\n"
        f"cuda: Optional[str] = {cuda!r}\nhip: Optional[str] = {hip!r}\n"
    )
    python = root / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return python
