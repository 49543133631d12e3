"""``python -m changestream``: the ``changestream`` command."""

from changestream.cli import main

main()
