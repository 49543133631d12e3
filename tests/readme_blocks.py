"""The README's code blocks, in order, as the README test runs them.

A ``python`` or ``sh`` block is run as written. An ``output`` block right after it lists lines
its output must contain, in order (each a substring of one line). An HTML comment right before
a block steers the test, where a block cannot simply run to its end:

- ``<!-- readme-test: background URL -->``: start the block and leave it running (a server)
  until the test ends; the next block runs once ``URL`` answers.
- ``<!-- readme-test: interrupt SECONDS -->``: the block runs until Ctrl-C (a worker, a live
  view); the test presses it after ``SECONDS`` and expects a clean exit.
- ``<!-- readme-test: skip REASON -->``: not run, for the reason given (the test itself, or a
  long demo tested on its own).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_FENCE = re.compile(r"^```(\w*)\s*$")
_DIRECTIVE = re.compile(r"^<!-- readme-test: (background|interrupt|skip) ?(.*?) -->\s*$")
RUNNABLE = ("python", "sh")


@dataclass
class Block:
    """One runnable block: its language, text, first line in the README, and how to run it."""

    language: str
    text: str
    line: int
    directive: str = ""
    argument: str = ""
    expected: list[str] = field(default_factory=list)


def readme_blocks(path: Path) -> list[Block]:
    """Every ``python`` and ``sh`` block of the README at ``path``, with its expected output."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    pending: tuple[str, str] | None = None
    last: Block | None = None
    index = 0
    while index < len(lines):
        line = lines[index]
        directive = _DIRECTIVE.match(line)
        fence = _FENCE.match(line)
        if directive:
            pending = (directive.group(1), directive.group(2))
        elif fence:
            language = fence.group(1)
            end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
            body = lines[index + 1 : end]
            if language == "output":
                if last is None:
                    raise ValueError(f"README line {index + 1}: an output block follows no code")
                last.expected = [text for text in body if text.strip()]
            elif language in RUNNABLE:
                kind, argument = pending or ("", "")
                last = Block(language, "\n".join(body) + "\n", index + 1, kind, argument)
                blocks.append(last)
            else:
                last = None
            pending = None
            index = end
        elif line.strip():
            pending = None
            last = None  # an output block belongs to the code block right above it
        index += 1
    return blocks
