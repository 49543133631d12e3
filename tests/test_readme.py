"""The README, top to bottom, in a fresh directory: every ``python`` and ``sh`` block runs as
written, with the package installed and nothing else prepared, and prints what the README
says it prints (see :mod:`tests.readme_blocks` for how blocks that run forever are handled).
Blocks take their timestamps from what they created, so the README never goes stale."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.readme_blocks import Block, readme_blocks

ROOT = Path(__file__).resolve().parent.parent
BLOCKS = readme_blocks(ROOT / "README.md")
#: What one block may take (the Spark ones start a session).
BLOCK_SECONDS = 300
#: The environment a sh block leaves behind, for the blocks after it (one terminal's worth).
ENV_FILE = ".readme_env"

pytestmark = pytest.mark.timeout(1200)


def _script(block: Block, index: int, where: Path) -> str:
    prelude = f"set -eo pipefail\n[ -f {ENV_FILE} ] && source {ENV_FILE}\n"
    if block.language == "python":
        program = where / f"readme_block_{index}.py"
        program.write_text(block.text, encoding="utf-8")
        return prelude + f"exec python {program.name}\n"
    return prelude + block.text + f"export -p > {ENV_FILE}\n"


def _start(block: Block, index: int, where: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["bash", "-c", _script(block, index, where)],
        cwd=where,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _stop(process: subprocess.Popen[str], how: int = signal.SIGINT) -> str:
    """Press Ctrl-C on the block's whole process group; its output once it has exited."""
    if process.poll() is None:
        os.killpg(process.pid, how)
    try:
        output, _ = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        raise AssertionError(f"did not stop on Ctrl-C within 60 s:\n{output}") from None
    return output


def _wait_for(url: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"exited before {url} answered:\n{_stop(process)}")
        try:
            # A self-signed certificate of the README's own making: trusted here.
            if httpx.get(url, timeout=1, verify=False).status_code < 500:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer within 60 s:\n{_stop(process)}")


def _check(block: Block, output: str, code: int, allowed: tuple[int, ...]) -> None:
    where = f"README line {block.line} ({block.language})"
    assert code in allowed, f"{where} exited {code}:\n{block.text}\n--- output ---\n{output}"
    assert "Traceback" not in output, f"{where} printed a traceback:\n{output}"
    position = 0
    for expected in block.expected:
        found = output.find(expected, position)
        assert found >= 0, (
            f"{where} should print {expected!r} (after what matched so far):\n{output}"
        )
        position = found + len(expected)


def test_the_readme_blocks_are_marked_and_each_says_what_it_prints() -> None:
    assert len(BLOCKS) >= 10
    for block in BLOCKS:
        assert block.directive in ("", "background", "interrupt", "skip"), block.line
        if block.directive == "skip":
            assert block.argument, f"README line {block.line}: a skip needs its reason"
        elif block.directive != "background":
            assert block.expected, f"README line {block.line}: say what the block prints"


def test_every_readme_block_runs_as_written(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    env = {key: value for key, value in os.environ.items() if not key.startswith("CHANGESTREAM_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "200"
    running: list[subprocess.Popen[str]] = []
    try:
        for index, block in enumerate(BLOCKS):
            if block.directive == "skip":
                continue
            process = _start(block, index, tmp_path, env)
            if block.directive == "background":
                running.append(process)
                _wait_for(block.argument, process)
                continue
            if block.directive == "interrupt":
                time.sleep(float(block.argument))
                output = _stop(process)
                _check(block, output, process.returncode, (0, 130))
                continue
            try:
                output, _ = process.communicate(timeout=BLOCK_SECONDS)
            except subprocess.TimeoutExpired:
                output = _stop(process, signal.SIGKILL)
                message = f"README line {block.line} ran over {BLOCK_SECONDS} s:\n{output}"
                raise AssertionError(message) from None
            _check(block, output, process.returncode, (0,))
    finally:
        for process in running:
            _stop(process)
