"""Fuzz every endpoint from the server's own OpenAPI document: no 5xx, every error is JSON,
every answer (each line of a streamed one) fits the response schema the document declares.

Each operation of the document gets a bounded number of requests that fit its schema and of
requests that do not, sent to a real server holding a real database. Answers are checked with
jsonschema-rs, a validator independent of the models the document is made from.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

import changestream
from changestream.server import TokenFile, create_token
from changestream.server.openapi import openapi_document
from tests.conftest import ACCOUNT_BALANCE
from tests.server_support import response_validator, serving

#: Requests per operation and mode: a fixed budget in CI, randomized (new requests every run,
#: hypothesis prints how to reproduce a failure); CHANGESTREAM_FUZZ=nightly for the nightly size,
#: CHANGESTREAM_FUZZ_EXAMPLES=N for any other.
EXAMPLES = int(
    os.environ.get(
        "CHANGESTREAM_FUZZ_EXAMPLES",
        "500" if os.environ.get("CHANGESTREAM_FUZZ") == "nightly" else "30",
    )
)
OPERATIONS = [
    r.ok() for r in schemathesis.openapi.from_dict(openapi_document()).get_all_operations()
]
# Requests that do not fit the schema exist only for operations that take a JSON body.
CASES = [(op, GenerationMode.POSITIVE) for op in OPERATIONS] + [
    (op, GenerationMode.NEGATIVE) for op in OPERATIONS if op.body
]


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(server URL, a token with every scope) for a server over a database with a stream."""
    tmp = tmp_path_factory.mktemp("fuzz")
    tokens = str(tmp / "tokens")
    token = create_token(tokens, ("read", "write", "admin"))
    with changestream.open(str(tmp / "fuzz.db")) as db:
        db.execute_ddl([ACCOUNT_BALANCE, "CREATE CHANGE STREAM Bank FOR AccountBalance"])
        # A short idle timeout, so DML the fuzzer gets right cannot hold the write lock long.
        with serving({"fuzz": db}, TokenFile(tokens), session_idle_seconds=1.0) as running:
            yield running.url, token


def check(case: Any, url: str, token: str) -> None:
    if "database" in (case.path_parameters or {}):
        case.path_parameters["database"] = "fuzz"  # reach the engine, not only the 404
    if case.path.endswith("/tail"):
        case.query = {**(case.query or {}), "end": "0"}  # bounded: the request must end
    response = case.call(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=20)
    assert response.status_code < 500, (case.method, case.path, case.body, response.text)
    if response.status_code >= 400:
        assert response.headers["content-type"][0].startswith("application/json"), response.text
        error = orjson.loads(response.content)["error"]
        assert isinstance(error["code"], str) and isinstance(error["message"], str)
        return
    validator = response_validator(case.method, case.path)
    if case.path.endswith(("/sql", "/read_change_stream", "/tail")):
        lines = [orjson.loads(line) for line in response.content.splitlines()]
        assert lines[-1]["type"] in ("end", "error"), lines[-1]
    else:
        lines = [orjson.loads(response.content)] if validator is not None else []
    for line in lines:
        errors = [e.message for e in validator.iter_errors(line)]
        assert not errors, (case.method, case.path, line, errors[:3])


@pytest.mark.parametrize(
    ("operation", "mode"), CASES, ids=[f"{op.label} {mode.value}" for op, mode in CASES]
)
def test_no_server_errors_and_errors_are_json(
    operation: Any, mode: GenerationMode, fuzzed: tuple[str, str]
) -> None:
    url, token = fuzzed

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=False,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        check(case, url, token)

    run()
