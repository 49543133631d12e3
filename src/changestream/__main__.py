"""``python -m changestream``: the ``changestream`` command."""

from changestream.cli import run

run()
