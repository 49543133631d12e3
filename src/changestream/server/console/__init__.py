"""The web console's files: one HTML page and its script and style sheet, shipped in the
package and served by ``changestream serve`` under ``/console`` (no build step, nothing fetched
at run time). The page reads the server's own HTTP API with the token kept in the tab's
``sessionStorage`` and sent in the Authorization header: never in a URL, never in a cookie."""

from __future__ import annotations

from pathlib import Path

#: The script and style sheet, served under ``/console/static``.
STATIC = Path(__file__).with_name("static")
#: The page served at ``/console``.
INDEX_HTML = (STATIC / "index.html").read_text(encoding="utf-8")
