"""The aggregation stages watch() accepts: ``$match`` and ``$project``, with MongoDB semantics.

``$match`` supports field equality, ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``,
``$in``, ``$nin``, ``$exists``, and ``$and``/``$or``/``$nor``, on dotted paths that step into
nested documents and across arrays. As in MongoDB, comparisons only match values of the same
kind (numbers with numbers, strings with strings, ...), ``null`` matches a missing field, and a
condition on an array field matches when any element does. ``$project`` includes or excludes
fields (dotted paths allowed) or computes them from expressions (field paths such as
``"$ns.coll"``, ``$$ROOT``, ``{"$literal": v}``, documents, arrays and literals); ``_id`` stays
unless excluded by name.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from changestream.deprecation import renamed
from changestream.errors import InvalidArgument
from changestream.watch._cluster_time import ClusterTime

Document = dict[str, Any]
Predicate = Callable[[Mapping[str, Any]], bool]
Stage = Callable[[Document], Document | None]

STAGES = ("$match", "$project")
_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "$gt": lambda a, b: a > b,
    "$gte": lambda a, b: a >= b,
    "$lt": lambda a, b: a < b,
    "$lte": lambda a, b: a <= b,
}
_FIELD_OPERATORS = ("$eq", "$ne", *_COMPARISONS, "$in", "$nin", "$exists")
_LOGICAL = ("$and", "$or", "$nor")


class AggregationPipeline:
    """A compiled list of stages; :meth:`apply` runs an event through them."""

    def __init__(self, stages: Sequence[Mapping[str, Any]] | None) -> None:
        if stages is None:
            stages = []
        if isinstance(stages, Mapping | str | bytes) or not isinstance(stages, Sequence):
            raise InvalidArgument(
                f"pipeline must be a list of stages such as [{{'$match': {{...}}}}], got {stages!r}"
            )
        self._stages = [_compile_stage(number, stage) for number, stage in enumerate(stages, 1)]

    @property
    def empty(self) -> bool:
        """Whether it has no stage (every event passes unchanged)."""
        return not self._stages

    def apply(self, event: Document) -> Document | None:
        """The event as the stages leave it, or None when a ``$match`` drops it."""
        current: Document | None = event
        for stage in self._stages:
            if current is None:
                return None
            current = stage(current)
        return current


def _compile_stage(number: int, stage: object) -> Stage:
    if not isinstance(stage, Mapping) or len(stage) != 1:
        raise InvalidArgument(
            f"pipeline stage {number} must be a document with exactly one stage name, "
            f"such as {{'$match': {{...}}}}; got {stage!r}"
        )
    ((name, spec),) = stage.items()
    where = f"{name} (pipeline stage {number})"
    if name == "$match":
        predicate = _compile_match(spec, where)
        return lambda event: event if predicate(event) else None
    if name == "$project":
        return _compile_project(spec, where)
    raise InvalidArgument(
        f"pipeline stage {number} {name!r} is not supported by watch(); "
        f"allowed stages: {', '.join(STAGES)}"
    )


# -- $match ------------------------------------------------------------------------------------


def _compile_match(spec: object, where: str) -> Predicate:
    if not isinstance(spec, Mapping):
        raise InvalidArgument(f"{where} takes a query document, got {spec!r}")
    predicates: list[Predicate] = []
    for key, value in spec.items():
        if not isinstance(key, str):
            raise InvalidArgument(f"{where}: field names must be strings, got {key!r}")
        if key in _LOGICAL:
            predicates.append(_compile_logical(key, value, where))
        elif key.startswith("$"):
            raise InvalidArgument(
                f"{where}: unknown top-level operator {key!r}; allowed: {', '.join(_LOGICAL)}"
            )
        else:
            predicates.append(_compile_field(key, value, where))
    return lambda doc: all(predicate(doc) for predicate in predicates)


def _compile_logical(operator: str, clauses: object, where: str) -> Predicate:
    if (
        isinstance(clauses, Mapping | str | bytes)
        or not isinstance(clauses, Sequence)
        or not clauses
    ):
        raise InvalidArgument(f"{where}: {operator} takes a non-empty list of query documents")
    compiled = [_compile_match(clause, where) for clause in clauses]
    if operator == "$and":
        return lambda doc: all(p(doc) for p in compiled)
    if operator == "$or":
        return lambda doc: any(p(doc) for p in compiled)
    return lambda doc: not any(p(doc) for p in compiled)


def _compile_field(path: str, condition: object, where: str) -> Predicate:
    parts = path.split(".")
    if isinstance(condition, Mapping) and any(str(k).startswith("$") for k in condition):
        if not all(str(k).startswith("$") for k in condition):
            raise InvalidArgument(
                f"{where}: the condition on {path!r} mixes operators and field names: "
                f"{dict(condition)!r}"
            )
        tests = [_compile_operator(path, op, arg, where) for op, arg in condition.items()]
        return lambda doc: all(test(_values_at(doc, parts)) for test in tests)
    return lambda doc: _equals_any(_values_at(doc, parts), condition)


def _compile_operator(
    path: str, operator: str, argument: Any, where: str
) -> Callable[[list[Any]], bool]:
    if operator == "$eq":
        return lambda values: _equals_any(values, argument)
    if operator == "$ne":
        return lambda values: not _equals_any(values, argument)
    if operator in _COMPARISONS:
        compare = _COMPARISONS[operator]
        return lambda values: any(
            _same_kind(v, argument) and compare(v, argument) for v in _flatten(values)
        )
    if operator in ("$in", "$nin"):
        if isinstance(argument, Mapping | str | bytes) or not isinstance(argument, Sequence):
            raise InvalidArgument(f"{where}: {operator} on {path!r} takes a list, got {argument!r}")
        options = list(argument)
        if operator == "$in":
            return lambda values: any(_equals_any(values, option) for option in options)
        return lambda values: not any(_equals_any(values, option) for option in options)
    if operator == "$exists":
        wanted = bool(argument)
        return lambda values: bool(values) == wanted
    raise InvalidArgument(
        f"{where}: unknown operator {operator!r} on {path!r}; allowed: "
        f"{', '.join(_FIELD_OPERATORS)}"
    )


def _values_at(value: Any, parts: list[str]) -> list[Any]:
    """Every value a dotted path reaches; an array is stepped into element by element."""
    if not parts:
        return [value]
    head, rest = parts[0], parts[1:]
    if isinstance(value, Mapping):
        return _values_at(value[head], rest) if head in value else []
    if isinstance(value, list):
        found: list[Any] = []
        if head.isascii() and head.isdigit() and int(head) < len(value):
            found.extend(_values_at(value[int(head)], rest))
        for item in value:
            if isinstance(item, Mapping):
                found.extend(_values_at(item, parts))
        return found
    return []


def _flatten(values: list[Any]) -> list[Any]:
    """The values and, for arrays, their elements: a condition on an array tests both."""
    flat: list[Any] = []
    for value in values:
        flat.append(value)
        if isinstance(value, list):
            flat.extend(value)
    return flat


def _equals_any(values: list[Any], wanted: Any) -> bool:
    if wanted is None and not values:
        return True  # null matches a missing field
    return any(_same_kind(v, wanted) and v == wanted for v in _flatten(values))


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"  # before int: True is not 1 here
    if isinstance(value, int | float | decimal.Decimal):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dt.datetime):
        return "datetime"
    if isinstance(value, ClusterTime):
        return "timestamp"
    if isinstance(value, Mapping):
        return "document"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


def _same_kind(a: Any, b: Any) -> bool:
    return _kind(a) == _kind(b)


# -- $project ----------------------------------------------------------------------------------


_MISSING = object()
Expression = Callable[[Mapping[str, Any]], Any]


def _compile_project(spec: object, where: str) -> Stage:
    """MongoDB's ``$project``: fields included (1/true) or excluded (0/false) by path, or
    computed from expressions — ``"$field.path"``, ``"$$ROOT"``, ``{"$literal": v}``, a
    document or array of expressions, or any other value as a literal. Dotted names and
    nested documents name nested fields. Exclusion cannot mix with anything but ``_id: 0``."""
    if not isinstance(spec, Mapping) or not spec:
        raise InvalidArgument(
            f"{where} takes a non-empty document of fields to include (1), exclude (0) or "
            f"compute (an expression), got {spec!r}"
        )
    include: list[list[str]] = []
    exclude: list[list[str]] = []
    computed: list[tuple[list[str], Expression]] = []
    keep_id = True
    for parts, value in _project_fields(spec, [], where):
        if not isinstance(value, bool):
            computed.append((parts, value))
        elif parts == ["_id"]:
            keep_id = value
        else:
            (include if value else exclude).append(parts)
    if exclude and (include or computed):
        raise InvalidArgument(
            f"{where} cannot mix inclusion and exclusion, nor computed fields and exclusion "
            f"(only _id may be excluded from an inclusion projection): {dict(spec)!r}"
        )
    if include or computed:
        paths = include if not keep_id else [["_id"], *include]
        return lambda event: _projected(event, paths, computed)
    if not keep_id:
        exclude.append(["_id"])
    return lambda event: _excluded(event, exclude)


def _project_fields(
    spec: Mapping[Any, Any], prefix: list[str], where: str
) -> Iterator[tuple[list[str], bool | Expression]]:
    """(path, inclusion flag or compiled expression) of each field a projection names; a
    nested document that is not an expression names nested fields."""
    for name, value in spec.items():
        if not isinstance(name, str) or not name or name.startswith("$"):
            raise InvalidArgument(f"{where}: {name!r} is not a field path")
        parts = [*prefix, *name.split(".")]
        if not all(parts):
            raise InvalidArgument(f"{where}: {name!r} is not a field path")
        if isinstance(value, Mapping) and value and not _is_operator(value):
            yield from _project_fields(value, parts, where)
        elif isinstance(value, bool | int | float):
            yield parts, bool(value)
        else:
            yield parts, _compile_expression(value, where)


def _is_operator(value: Mapping[Any, Any]) -> bool:
    return any(isinstance(k, str) and k.startswith("$") for k in value)


def _compile_expression(spec: Any, where: str) -> Expression:
    """An aggregation expression of the kinds ``$project`` takes here (see its docstring)."""
    if isinstance(spec, str) and spec.startswith("$$"):
        variable, _, rest = spec[2:].partition(".")
        if variable not in ("ROOT", "CURRENT"):
            raise InvalidArgument(f"{where}: unknown variable {spec!r}; allowed: $$ROOT, $$CURRENT")
        parts = rest.split(".") if rest else []
        return lambda doc: _value_at(doc, parts)
    if isinstance(spec, str) and spec.startswith("$"):
        parts = spec[1:].split(".")
        if not all(parts):
            raise InvalidArgument(f"{where}: {spec!r} is not a field path")
        return lambda doc: _value_at(doc, parts)
    if isinstance(spec, Mapping):
        if _is_operator(spec):
            if list(spec) != ["$literal"]:
                raise InvalidArgument(
                    f"{where}: unsupported expression {dict(spec)!r}; expressions here are "
                    "field paths ('$a.b'), $$ROOT, {'$literal': value}, documents, arrays "
                    "and literal values"
                )
            literal = spec["$literal"]
            return lambda doc: literal
        fields = {str(k): _compile_expression(v, where) for k, v in spec.items()}
        return lambda doc: {
            k: value for k, f in fields.items() if (value := f(doc)) is not _MISSING
        }
    if isinstance(spec, list):
        items = [_compile_expression(item, where) for item in spec]
        return lambda doc: [None if (v := f(doc)) is _MISSING else v for f in items]
    return lambda doc: spec


def _value_at(value: Any, parts: list[str]) -> Any:
    """The value a field path reaches (arrays map over their documents), or _MISSING."""
    for index, part in enumerate(parts):
        if isinstance(value, list):
            found = [_value_at(item, parts[index:]) for item in value if isinstance(item, Mapping)]
            return [v for v in found if v is not _MISSING]
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _projected(
    event: Mapping[str, Any],
    paths: list[list[str]],
    computed: list[tuple[list[str], Expression]],
) -> Document:
    out = _included(event, paths)
    for parts, expression in computed:
        value = expression(event)
        if value is _MISSING:
            continue
        target = out
        for part in parts[:-1]:
            branch = target.get(part)
            if not isinstance(branch, dict):
                branch = target[part] = {}
            target = branch
        target[parts[-1]] = value
    return out


def _included(document: Mapping[str, Any], paths: list[list[str]]) -> Document:
    out: Document = {}
    for path in paths:
        _copy_path(document, out, path)
    return out


def _copy_path(source: Mapping[str, Any], target: Document, path: list[str]) -> None:
    head = path[0]
    if head not in source:
        return
    value = source[head]
    if len(path) == 1:
        target[head] = value
    elif isinstance(value, Mapping):
        branch = target.get(head)
        if not isinstance(branch, dict):
            branch = target[head] = {}
        _copy_path(value, branch, path[1:])
    elif isinstance(value, list):
        items = [item for item in value if isinstance(item, Mapping)]
        target[head] = [_included(item, [path[1:]]) for item in items]


def _excluded(document: Mapping[str, Any], paths: list[list[str]]) -> Document:
    out = dict(document)
    for path in paths:
        _drop_path(out, path)
    return out


def _drop_path(target: Document, path: list[str]) -> None:
    head = path[0]
    if head not in target:
        return
    if len(path) == 1:
        del target[head]
        return
    value = target[head]
    if isinstance(value, Mapping):
        # Copy before changing: the event's nested documents may be shared.
        branch = dict(value)
        _drop_path(branch, path[1:])
        target[head] = branch
    elif isinstance(value, list):
        target[head] = [
            _excluded(item, [path[1:]]) if isinstance(item, Mapping) else item for item in value
        ]


# The old name, from before the Spark pipeline job had a class of the same name.
__getattr__ = renamed(__name__, "Pipeline", AggregationPipeline)
