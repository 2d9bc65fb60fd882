"""``jsonschema.validate`` against a shipped schema, the schema checked once per process (issue 29.4).

``jsonschema.validate(document, schema(kind))`` checks the schema itself against its metaschema at every call
(0.09 CPU s on the 2-core machine, more than the in-process ``mha`` run whose output it validates) before it
validates the document. :func:`validate` does the same work in the same order, the schema's check done once per
kind and process: the same validator class, the same errors (the best match, raised), the same exceptions."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest


@cache
def _validator(kind: str) -> Any:
    """The validator of the shipped schema ``kind``, its schema checked against the metaschema first."""
    jsonschema = pytest.importorskip("jsonschema")
    from mhacli.io.schemas import schema

    shipped = schema(kind)
    cls = jsonschema.validators.validator_for(shipped)
    cls.check_schema(shipped)  # raises SchemaError for a broken schema, as jsonschema.validate does
    return cls(shipped)


def validate(document: Any, kind: str) -> None:
    """``jsonschema.validate(document, schema(kind))``: raises the best-matching ``ValidationError``."""
    validator = _validator(kind)  # skips the test where jsonschema is not installed
    from jsonschema.exceptions import best_match

    error = best_match(validator.iter_errors(document))
    if error is not None:
        raise error
