"""Packaging: the wheel builds without deprecation warnings, and installed in a clean venv with
no extras it runs every command or says which extra it needs (issue 17, items 11 and 12).

The clean venv gets the wheel (``pip install --no-deps``) and the core dependencies only, linked
from this environment (nothing is downloaded while testing): the extras' packages are simply
not there, as on a user's machine after ``pip install changestream``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """(the wheel built from the repository, pip's output while building it)."""
    where = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(where), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (found,) = where.glob("changestream-*.whl")
    yield found, built.stdout + built.stderr


def test_the_wheel_builds_without_warnings(wheel: tuple[Path, str]) -> None:
    path, output = wheel
    assert "project.license" not in output and "Deprecat" not in output, output[-2000:]
    with zipfile.ZipFile(path) as archive:
        meta = next(n for n in archive.namelist() if n.endswith("METADATA"))
        text = archive.read(meta).decode()
        assert "changestream/py.typed" in archive.namelist()
        for name in ("index.html", "console.js", "console.css"):  # the web console's files
            assert f"changestream/server/console/static/{name}" in archive.namelist()
    assert "License-Expression: Apache-2.0" in text


def _core_distributions() -> list[metadata.Distribution]:
    """changestream's required distributions, and theirs, without any extra's."""
    found: dict[str, metadata.Distribution] = {}
    pending = [r for r in metadata.requires("changestream") or [] if "extra ==" not in r]
    while pending:
        name = re.split(r"[ ;<>=!~\[]", pending.pop(), maxsplit=1)[0].lower()
        if name in found:
            continue
        found[name] = metadata.distribution(name)
        pending += [r for r in found[name].requires or [] if "extra ==" not in r]
    return list(found.values())


@pytest.fixture(scope="module")
def bare(wheel: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin directory of a clean venv holding the wheel and its core dependencies."""
    home = tmp_path_factory.mktemp("bare") / "venv"
    venv.EnvBuilder(with_pip=False).create(home)
    python = home / "bin" / "python"
    (site,) = home.glob("lib/python*/site-packages")
    for distribution in _core_distributions():
        installed = Path(str(distribution.locate_file("")))
        tops = {Path(str(f)).parts[0] for f in distribution.files or []}
        for top in tops - {"..", "__pycache__"}:
            if (installed / top).exists() and not (site / top).exists():
                (site / top).symlink_to(installed / top)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "--quiet", str(wheel[0])],
        check=True,
        timeout=300,
    )  # fmt: skip
    return home / "bin"


def run_bare(bare: Path, where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(bare / "changestream"), *args],
        cwd=where,
        env={**env, "CHANGESTREAM_TOKEN": "cs_unused"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_bare_install_has_no_extra(bare: Path) -> None:
    probe = subprocess.run(
        [str(bare / "python"), "-c", "import changestream, httpx"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert "No module named 'httpx'" in probe.stderr, probe.stderr  # the venv really is bare


def test_without_extras_each_command_works_or_names_its_extra(bare: Path, tmp_path: Path) -> None:
    table = "CREATE TABLE T (K INT64 NOT NULL, V STRING(MAX)) PRIMARY KEY (K)"
    stream = "CREATE CHANGE STREAM S FOR ALL OPTIONS (value_capture_type = 'NEW_ROW')"
    works = [
        ("ddl", "x.db", table, stream),
        ("sql", "x.db", "SELECT * FROM T"),
        ("partitions", "x.db", "S"),
        ("leases", "x.db", "S", "--once"),
        ("policy", "x.db"),
        ("discover", "x.db"),
        ("streams", "create", "s", "--db", "x.db", "--change-stream", "S", "--destination", "o"),
        ("streams", "start", "s", "--db", "x.db"),
        ("streams", "list", "--db", "x.db"),
        ("token", "create", "--tokens", "tokens.jsonl", "--scope", "read"),
        ("demo", "--path", "demo.db", "--tail-seconds", "0.5"),
    ]
    for args in works:
        ran = run_bare(bare, tmp_path, *args)
        assert ran.returncode == 0, (args, ran.stdout[-500:], ran.stderr[-2000:])
        assert "Traceback" not in ran.stderr, (args, ran.stderr)
    needs_extra = [
        (("serve", "x.db", "--tokens", "tokens.jsonl"), "server"),
        (("sql", "http://127.0.0.1:9/x", "SELECT 1"), "client"),
        (("streams", "list", "--db", "http://127.0.0.1:9/x"), "client"),
        (("pipeline", "run", "s", "--db", "x.db"), "spark"),
        (("demo", "--pipeline", "1"), "spark"),
    ]
    for args, extra in needs_extra:
        ran = run_bare(bare, tmp_path, *args)
        assert ran.returncode == 2, (args, ran.stdout[-500:], ran.stderr[-2000:])
        assert "Traceback" not in ran.stderr, (args, ran.stderr)
        assert f"needs the {extra} extra" in ran.stderr, (args, ran.stderr)
        assert f"pip install 'changestream[{extra}]'" in ran.stderr, (args, ran.stderr)
