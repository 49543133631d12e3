"""``/openapi.json`` made from the endpoint declarations of :mod:`.api`, and ``/docs``: Swagger
UI, served from the assets the ``swagger-ui-py`` package ships (nothing is fetched at run time).
"""

from __future__ import annotations

import os
import re
from functools import cache
from typing import Any

import jinja2
import msgspec
import swagger_ui

import changestream
from changestream.wire import api, models

#: Swagger UI's files, served under ``/docs/static``.
SWAGGER_UI_STATIC = os.path.join(os.path.dirname(swagger_ui.__file__), "static")

INTRO = """\
The change-stream database over HTTP: the same operations as the embedded
`changestream.Database`, for `changestream.connect(url, token=...)` and any HTTP client.

**Auth**: `Authorization: Bearer <token>`; tokens carry the scopes `read`, `write` and
`admin` (see each operation). A missing or unknown token answers 401, a missing scope 403.

**Errors** are JSON: `{"error": {"code": "<changestream.errors class>", "message": "..."}}`:
400 invalid argument, 401, 403, 404 not found, 409 already exists, 412 failed precondition
(e.g. a file that is not a changestream database), 413 body too large, 429 a limit reached,
503 busy or shutting down.

**Typed values**: JSON has no bytes, timestamps, dates, decimals, non-finite floats or the
commit-timestamp sentinel, so values (mutation rows, keys, query parameters, result rows)
write them as single-key objects: `{"$bytes": base64}`, `{"$datetime": iso}`,
`{"$date": iso}`, `{"$numeric": text}`, `{"$float": "NaN"}`, `{"$int": text}`,
`{"$commit_timestamp": true}`, `{"$key_range": {...}}`; an object with a key starting with
`$` is wrapped as `{"$object": {...}}`.

**Streams** (`read_change_stream`, `sql`) answer NDJSON, one line per object, each with a
`type`; `shutdown` means the server is stopping and the client should reconnect.
"""

_REF = "#/components/schemas/{name}"
_ERROR_STATUSES = ("400", "401", "403", "404", "409", "412", "413", "429", "503")


def _operation(endpoint: api.Endpoint, schemas: dict[Any, Any]) -> dict[str, Any]:
    media = "application/x-ndjson" if endpoint.stream else endpoint.media_type
    content: dict[str, Any] = {media: {}}
    if endpoint.response is not None:
        content[media]["schema"] = schemas[endpoint.response]
    elif media == "text/plain":
        content[media]["schema"] = {"type": "string"}
    responses: dict[str, Any] = {"200": {"description": "Success", "content": content}}
    error = {
        "description": "An error",
        "content": {"application/json": {"schema": {"$ref": _REF.format(name="Error")}}},
    }
    operation: dict[str, Any] = {"operationId": endpoint.name, "summary": endpoint.summary}
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in re.findall(r"{(\w+)}", endpoint.path)
    ]
    parameters += [
        {"name": name, "in": "query", "required": False, "schema": {"type": "string"}}
        for name in endpoint.query
    ]
    parameters += [
        {
            "name": name,
            "in": "header",
            "required": False,
            "description": description,
            "schema": {"type": "string"},
        }
        for name, description in endpoint.headers
    ]
    if parameters:
        operation["parameters"] = parameters
    if endpoint.request is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": schemas[endpoint.request]}},
        }
    if endpoint.scope is None:
        operation["security"] = []
    else:
        operation["description"] = f"Needs a token with the `{endpoint.scope}` scope."
        responses.update({status: error for status in _ERROR_STATUSES})
    operation["responses"] = responses
    return operation


@cache
def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of every declared endpoint, with every schema."""
    types: list[Any] = [models.Error]
    for endpoint in api.ENDPOINTS:
        types += [t for t in (endpoint.request, endpoint.response) if t is not None]
    unique = list(dict.fromkeys(types))
    found, components = msgspec.json.schema_components(unique, ref_template=_REF)
    schemas = dict(zip(unique, found, strict=True))
    paths: dict[str, dict[str, Any]] = {}
    for endpoint in api.ENDPOINTS:
        paths.setdefault(endpoint.path, {})[endpoint.method.lower()] = _operation(endpoint, schemas)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "changestream",
            "version": changestream.__version__,
            "description": INTRO,
        },
        "servers": [{"url": "/"}],
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": paths,
    }


def _docs_page() -> str:
    templates = os.path.join(os.path.dirname(swagger_ui.__file__), "templates")
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(templates), autoescape=True)
    return environment.get_template("doc.html").render(
        title="changestream API",
        url_prefix="/docs",
        parameters={
            "url": '"/openapi.json"',
            "dom_id": '"#swagger-ui"',
            "deepLinking": "true",
            "presets": "[SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset]",
            "layout": '"StandaloneLayout"',
        },
    )


#: The ``/docs`` page: Swagger UI's own page from ``swagger-ui-py``, pointed at this document.
DOCS_HTML = _docs_page()
