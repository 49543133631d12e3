"""Layers import only downward (DESIGN.md's table): every ``changestream`` import in the source,
module level or inside a function, is checked against what its package may import."""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "src" / "changestream"

#: The bottom: standard library (and each other's errors) only.
_BASE = {
    "errors",
    "values",
    "clock",
    "types",
    "codecs",
    "extras",
    "deprecation",
    "retry",
    "threads",
    "processes",
}
#: What each package may import (besides itself), from DESIGN.md's layer table. ``store``
#: reads DML through ``sql``; ``server`` serves the consumers above ``streams``.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "values": {"errors"},
    "clock": {"errors"},
    "types": {"errors", "values", "clock", "deprecation"},
    "codecs": {"errors", "values", "clock", "types"},
    "extras": {"errors"},
    "deprecation": set(),
    "retry": set(),
    "threads": set(),
    "processes": set(),
    "ddl": _BASE,
    "sql": _BASE | {"ddl"},
    "store": _BASE | {"ddl", "sql"},
    "streams": _BASE | {"ddl", "sql", "store"},
    "client": _BASE | {"ddl", "sql", "store", "streams"},
    "watch": _BASE | {"ddl", "sql", "store", "streams"},
    "embedded": _BASE | {"ddl", "sql", "store", "streams", "watch"},
    "wire": _BASE | {"ddl", "sql", "store", "streams"},
    # The remote client offers the stream resources (datastream's definitions, for typing).
    "remote": _BASE | {"ddl", "sql", "store", "streams", "watch", "wire", "datastream"},
    "datastream": _BASE | {"ddl", "sql", "store", "streams"},
    # A source writes into a local database (positions in the same transaction as changes).
    "sources": _BASE | {"ddl", "sql", "store", "streams", "embedded"},
    "spark": _BASE | {"ddl", "sql", "store", "streams", "datastream"},
    # ``server`` still hands out the remote client under its old names (deprecated).
    "server": _BASE
    | {"ddl", "sql", "store", "streams", "watch", "datastream", "client", "embedded", "wire"}
    | {"remote"},
    "render": _BASE | {"streams"},
    # The tours use the public API: the package top, streams (datastream) and the pipeline.
    "demo": {"*"},
    "cli": {"*"},
    "__init__": {"*"},
    "__main__": {"*"},
}
#: Imports that go up today, each with why; the facade redesign (issue 16) removes them.
KNOWN_UPWARD = {
    # The document's version is the package's.
    ("server/openapi.py", "__init__"),
}


def _imports(path: Path) -> set[str]:
    """The ``changestream`` packages (or top-level modules) ``path`` imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module == "changestream":
            # `from changestream import errors` imports a module; anything else, the top.
            names = [
                f"changestream.{a.name}" if (SOURCE / f"{a.name}.py").exists() else "changestream"
                for a in node.names
            ]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "changestream":
                found.add(parts[1] if len(parts) > 1 else "__init__")
    return found


def test_every_package_imports_only_the_layers_below_it() -> None:
    wrong = []
    checked = 0
    for path in sorted(SOURCE.rglob("*.py")):
        relative = path.relative_to(SOURCE)
        package = relative.parts[0] if len(relative.parts) > 1 else relative.stem
        allowed = ALLOWED[package]
        for target in _imports(path) - {package}:
            checked += 1
            if "*" in allowed or target in allowed:
                continue
            if (relative.as_posix(), target) not in KNOWN_UPWARD:
                wrong.append(f"{relative} imports changestream.{target}")
    assert checked > 100
    assert not wrong, "\n".join(wrong)


def test_the_known_upward_imports_are_still_there() -> None:
    """An exception that is gone must leave the list, so the list never hides a new one."""
    for module, target in KNOWN_UPWARD:
        assert target in _imports(SOURCE / module), (module, target)


#: What the demo tours may import: the public API only.
PUBLIC = {
    "__init__",
    "clock",
    "errors",
    "extras",
    "render",
    "datastream",
    "spark",
    "demo",
}


def test_the_demo_tours_use_only_the_public_api() -> None:
    wrong = [
        f"{path.relative_to(SOURCE)} imports changestream.{target}"
        for path in sorted((SOURCE / "demo").rglob("*.py"))
        for target in _imports(path) - PUBLIC
    ]
    assert not wrong, "\n".join(wrong)


#: The store's modules that hold plain types and the shared transaction surface, not the engine.
STORE_MODELS = {
    "changestream.store.models",
    "changestream.store.keys",
    "changestream.store.transaction_api",
}


def test_the_remote_client_and_spark_use_no_engine_module() -> None:
    wrong = []
    for package in ("remote", "spark"):
        for path in sorted((SOURCE / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.module:
                    module = node.module
                    if module.startswith(("changestream.embedded", "changestream.server")) or (
                        module.startswith("changestream.store") and module not in STORE_MODELS
                    ):
                        wrong.append(f"{path.relative_to(SOURCE)} imports {module}")
    assert not wrong, "\n".join(wrong)
