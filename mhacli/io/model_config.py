"""A Hugging Face ``config.json`` the user has, read for ``mha shapes --config``: nothing is downloaded."""

from __future__ import annotations

import json
from pathlib import Path

from mhacli.attention.errors import UsageError
from mhacli.attention.messages import shown_path
from mhacli.attention.kv import Sharing, from_config
from mhacli.io.inputs import read_file

OPTION = "--config"


def read_model_config(path: Path, dtype: str | None = None) -> Sharing:
    """The attention sizes of the model whose ``config.json`` is at ``path`` (``dtype``: given, wins)."""
    text = read_file(path, OPTION)
    where = f"{OPTION} {shown_path(path)}"
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where} is not JSON ({exc.msg} on line {exc.lineno}); give a model's config.json."
                         ) from None
    except RecursionError:
        raise UsageError(f"{where} nests too deeply to be a model's config.json.") from None
    if not isinstance(config, dict):
        kind = {list: "an array", str: "a string", bool: "true or false", type(None): "null"}.get(type(config),
                                                                                              "a number")
        raise UsageError(f"{where} holds {kind}, not a JSON object; give a model's config.json.")
    try:
        return from_config(config, dtype)
    except UsageError as exc:  # the config's own words (its keys), said of the file
        raise UsageError(f"{where}: {exc.for_cli()}") from None


__all__ = ["read_model_config"]
