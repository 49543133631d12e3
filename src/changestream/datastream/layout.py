"""Where things are under a stream's destination: event files, laid out by object and minute
(see :mod:`changestream.datastream.files`), and the directory of the pipeline's own work.

Needs no extra: the demo and the CLI list event files where the extras that write them are
not installed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Final

#: Each file format's file name ending; ``json.gz`` is JSON lines compressed with gzip.
EXTENSIONS: Final = {"json": ".jsonl", "json.gz": ".jsonl.gz", "avro": ".avro"}
#: The directory under a destination where a pipeline keeps its work (checkpoint, segments,
#: staged replica rows): never event files.
WORK_DIRECTORY: Final = "_changestream"


def event_files(root: str | os.PathLike[str]) -> Sequence[Path]:
    """Every visible event file under ``root``, sorted by path (temporary files and the
    pipeline's work directory excluded).

    Safe beside a running pipeline: a directory removed during the walk is skipped."""
    found: list[Path] = []
    for directory, subdirectories, names in os.walk(root):
        subdirectories[:] = [
            d for d in subdirectories if d != WORK_DIRECTORY and not d.startswith(".")
        ]
        found.extend(
            Path(directory, name)
            for name in names
            if name.endswith(tuple(EXTENSIONS.values())) and not name.startswith(".")
        )
    return sorted(found)
