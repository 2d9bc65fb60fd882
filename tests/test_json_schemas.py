"""Every ``--json`` document carries ``format_version`` and follows the JSON Schema shipped beside it.

The documents are the real output of ``mha``'s commands (``COMMANDS``), run in-process
through Typer's CliRunner (the app the installed script runs; that script's own way out is
tested in tests/test_cli_conventions.py), validated with jsonschema against
``mhacli/io/<kind>.schema.json`` (``scripts/json_schemas.py`` drafts those schemas from
the same commands).
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

ENV = {"MPLBACKEND": "Agg", "COLUMNS": "100"}

# (kind, arguments): each command of every --json document, a few variants where the shape can differ.
COMMANDS: list[tuple[str, list[str]]] = [
    ("trace", ["explain", "the cat sat", "--json", "--no-plots"]),
    ("trace", ["explain", "the cat sat", "--json", "--no-json-arrays", "--no-plots", "--weights", "designed"]),
    ("trace", ["explain", "the king sent the boy to the queen", "--json", "--no-json-arrays", "--no-plots",
               "--weights", "grammar"]),  # the grammar's parse, a recipient among its relations
    ("trace", ["explain", "the lion crossed the park", "--json", "--no-json-arrays", "--no-plots", "--weights",
               "grammar", "--words", "lion=animal", "--words", "park=place"]),  # mapped words, the option twice
    ("trace", ["show", "t.npz", "--json", "--no-plots"]),
    ("view", ["show", "att.npz", "--json", "--no-plots"]),
    ("view", ["show", "layers.npz", "--json", "--no-plots", "--layer", "1"]),
    # head names, a head on one fixed token, a window of 3 of 5 tokens: the fields that are null above
    ("view", ["show", "named.npz", "--json", "--no-plots", "--max-tokens", "3"]),
    ("compare", ["compare", "the cat sat on the mat", "--json", "--no-plots"]),
    ("compare", ["compare", "the cat sat", "--json", "--no-plots", "--weights", "trained"]),
    ("compare", ["compare", "the lion crossed the park", "--json", "--no-plots", "--weights", "grammar", "--words",
                 "lion=animal park=place"]),  # the mapped words (issue 28 item 6)
    ("verify", ["verify", "t.npz", "--json"]),
    ("train", ["train", "--steps", "3", "--json", "--no-plots"]),
    ("train", ["train", "--steps", "3", "--json", "--no-plots", "--compare", "1,2"]),
    ("train", ["train", "--task", "grammar", "--steps", "3", "--json", "--no-plots", "--knockout"]),
    ("train", ["train", "--task", "grammar", "--steps", "3", "--json", "--no-plots", "--seeds", "0-1",
               "--compare", "1,2"]),
    ("train", ["train", "--task", "grammar", "--steps", "3", "--json", "--kv-heads", "1,4", "--seeds", "0-1"]),
    ("samples", ["samples", "--json"]),
    ("samples", ["samples", "cat", "--json"]),
    ("shapes", ["shapes", "--json"]),
    ("shapes", ["shapes", "--json", "--kv-heads", "2", "--layers", "3"]),  # the sharing and the cache (issue 45)
    ("shapes", ["shapes", "--json", "--config", "llama.json", "--tokens", "4096"]),
    ("shapes", ["shapes", "--json", "--config", "latent.json"]),  # head_dim is not d/h: no step table; a latent
    ("tiles", ["tiles", "--json"]),
    ("tiles", ["tiles", "the cat sat on the mat", "--causal", "--block", "2", "--query", "0", "--json"]),  # null max
    ("quiz", ["quiz", "--json"]),
    ("quiz", ["quiz", "--json", "--answers"]),
    ("bench", ["bench", "--max-tokens", "16", "--repeats", "1", "--json"]),
    ("bench-train", ["bench", "--train", "--repeats", "1", "--json"]),
    ("bench-tiles", ["bench", "--tiles", "--max-tokens", "512", "--json"]),
    ("bench-startup", ["bench", "--startup", "--repeats", "1", "--json"]),  # timed stand-ins in the test (below)
]


def _mha(args: list[str], folder: Path) -> tuple[int, str, str]:
    """``mha ARGS`` run in ``folder`` through the CliRunner: (exit code, stdout, stderr)."""
    from typer.testing import CliRunner

    from mhacli.cli.app import app

    here = Path.cwd()
    os.chdir(folder)
    try:
        result = CliRunner().invoke(app, args, env=ENV)
    finally:
        os.chdir(here)
    return result.exit_code, result.stdout, result.stderr


def _inputs(folder: Path) -> None:
    code, _, err = _mha(["explain", "the cat sat", "--save-npz", "t.npz", "--no-plots", "--quiet"], folder)
    assert code == 0, err
    np.savez(folder / "att.npz", weights=np.full((2, 3, 3), 1 / 3), tokens=np.array(["a", "b", "c"]))
    w = np.random.default_rng(0).random((3, 2, 4, 4))
    np.savez(folder / "layers.npz", weights=w / w.sum(-1, keepdims=True), tokens=np.array(list("abcd")))
    fixed = np.zeros((2, 5, 5))  # (h, N, N): head 1 on key 2 from every query, head 2 uniform
    fixed[0, :, 2], fixed[1] = 1.0, 1 / 5
    np.savez(folder / "named.npz", weights=fixed, tokens=np.array(list("abcde")),
             head_names=np.array(["on c", "spread"]))
    (folder / "llama.json").write_text(json.dumps({"hidden_size": 8192, "num_attention_heads": 64,
                                                   "num_key_value_heads": 8, "num_hidden_layers": 80,
                                                   "torch_dtype": "float16"}))
    (folder / "latent.json").write_text(json.dumps({"hidden_size": 5120, "num_attention_heads": 128,
                                                    "num_hidden_layers": 60, "kv_lora_rank": 512,
                                                    "qk_rope_head_dim": 64, "v_head_dim": 128,
                                                    "torch_dtype": "bfloat16"}))


@lru_cache(maxsize=1)
def _folder() -> Path:
    """One folder of inputs per process (each pytest-xdist worker makes its own), removed when the process ends:
    every run of the suite left one per worker in /tmp."""
    import atexit
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="mha-json-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    _inputs(folder)
    return folder


@lru_cache(maxsize=None)
def _document(args: tuple[str, ...]) -> Any:
    """The document of one command: each test runs only its own, so the workers share the commands out."""
    code, out, err = _mha(list(args), _folder())
    assert code == 0, (args, err)
    return json.loads(out)


def real_documents() -> Iterator[tuple[str, Any]]:
    for kind, args in COMMANDS:
        yield kind, _document(tuple(args))


# What differs with PyTorch installed (bench's torch columns, verify's reference) runs in both legs of .ci/run.
AWARE = ("bench", "bench-train", "verify")


@pytest.mark.parametrize(("kind", "args"), [pytest.param(k, a, marks=[pytest.mark.torch_aware] if k in AWARE else [])
                                            for k, a in COMMANDS], ids=[" ".join(a) for _, a in COMMANDS])
@pytest.mark.slow
def test_each_json_document_follows_its_shipped_schema(kind, args):
    jsonschema = pytest.importorskip("jsonschema")
    from mhacli.io.schemas import schema

    with pytest.MonkeyPatch.context() as mp:
        if kind == "bench-startup":
            # The document of two rounds of the five commands, timed: its shape is what the schema checks, and the
            # real commands took 12.5 CPU s of the suite. Stand-ins with the same names (tests/test_bench.py) are
            # timed instead; the real ones run in test_wiring's SIGTERM test, the bench's warm-up round up to the
            # timed explain's first figure (any failing before it ends that bench, and that test, with an error).
            from test_bench import fake_commands

            from mhacli.bench import startup

            mp.setattr(startup, "startup_commands", fake_commands)
        document = _document(tuple(args))
    assert isinstance(document, dict) and "format_version" in document
    assert list(document)[0] == "format_version"
    jsonschema.validate(document, schema(kind))


def test_every_kind_has_a_schema_beside_the_traces_and_a_test():
    from mhacli.io.schemas import KINDS, schema

    assert {kind for kind, _ in COMMANDS} == set(KINDS)
    for kind in KINDS:
        assert schema(kind)["type"] == "object"


def test_a_document_without_its_version_or_a_key_fails_its_schema():
    jsonschema = pytest.importorskip("jsonschema")
    from mhacli.io.schemas import schema

    (args,) = [a for k, a in COMMANDS if k == "verify"]
    document = _document(tuple(args))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**document, "format_version": 99}, schema("verify"))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({k: v for k, v in document.items() if k != "checks"}, schema("verify"))
