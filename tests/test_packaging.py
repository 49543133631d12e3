"""The wheel builds from the repository without deprecation warnings (issue 17, item 12)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_builds_without_warnings(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    output = built.stdout + built.stderr
    assert "project.license" not in output and "Deprecat" not in output, output[-2000:]
    (wheel,) = tmp_path.glob("changestream-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith("METADATA"))
        text = archive.read(metadata).decode()
        assert "changestream/py.typed" in archive.namelist()
    assert "License-Expression: Apache-2.0" in text
