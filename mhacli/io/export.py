"""Exports a student can check: a run as ``.npz`` (plain dtypes: ``np.load`` needs no ``allow_pickle``) and as
JSON, and the npz read back into a Trace without recomputing anything (:func:`load_trace`).
"""

from __future__ import annotations

import json
import os
import warnings
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from mhacli.version import __version__
from mhacli.attention.config import Config
from mhacli.attention.embed import vocabulary
from mhacli.attention.trace import Trace
from mhacli.attention.errors import UsageError
from mhacli.io.files import atomic_write

if TYPE_CHECKING:
    from mhacli.measures.analysis import Analysis

ARRAY_FIELDS = ("X", "W_q", "W_k", "W_v", "W_o", "Q", "K", "V", "heads", "scores", "weights",
                "concat", "output")
SCALAR_FIELDS = ("num_heads", "d_model", "seed", "causal")
NPZ_KEYS = ("tokens", *ARRAY_FIELDS, *SCALAR_FIELDS)  # every trace file, 0.1.0's included
# Format 2 (mhacli 0.2) keeps the whole Config and what the weights were made of; format 1 (0.1.0,
# no format_version member) lacks these and still loads, with the Config's defaults for them.
FORMAT_VERSION = 2
CONFIG_FIELDS = ("tokenizer", "positions", "weight_kind", "dtype", "word_values", "folds_case")  # beside SCALAR_FIELDS
BIAS_FIELDS = ("b_q", "b_k", "b_v", "b_o")
OPTIONAL_ARRAYS = ("embeddings", "position_encoding", "token_ids", *BIAS_FIELDS)
TEXT_LISTS = ("rules", "relations")
#: A grammar model's report card as JSON text (one string, so np.load needs no pickle): rows, counts, rates,
#: intervals, the baselines a name must beat and each head's name, as ``--json``'s ``card`` (Card.to_dict).
CARD = "card"
#: True when a grammar model read a sentence it parses: mha show parses the tokens again, so the heads keep
#: the names they had ("verb → subject"); without it a saved run's heads are named by their top tokens.
PARSED = "grammar_parse"
#: --words: (m, 3) strings, each mapped word, its grammar class and the word the model read it as.
MAPPED = "mapped_words"
KNOWN_KEYS = frozenset((*NPZ_KEYS, "format_version", "mhacli_version", *CONFIG_FIELDS, *OPTIONAL_ARRAYS,
                        *TEXT_LISTS, PARSED, MAPPED, CARD, "kv_heads", "rope_theta"))
MAX_MEMBERS = 64  # a trace has ~30 members; a zip of thousands is not one


def trace_biases(trace: Trace) -> dict[str, np.ndarray]:
    """The trace's biases b_q, b_k, b_v, b_o (those it has), by name; empty without biases."""
    return {k: np.asarray(v) for k, v in trace.biases.items()}


def npz_arrays(run: Any) -> dict[str, np.ndarray]:
    """The arrays of an npz export of a run (or a bare trace), by name (format :data:`FORMAT_VERSION`); a grammar
    model's run adds each head's name (``relations``), its card as JSON text, the parse and --words."""
    trace, card = run, getattr(run, "card", None)
    c = trace.config
    out: dict[str, np.ndarray] = {"tokens": np.array(trace.tokens, dtype=np.str_)}
    for name in ARRAY_FIELDS:
        out[name] = np.asarray(getattr(trace, name))
    out["num_heads"] = np.array(trace.num_heads, dtype=np.int64)
    if trace.kv_heads != trace.num_heads:  # shared keys and values: K, V, W_k, W_v hold g blocks, not h
        out["kv_heads"] = np.array(trace.kv_heads, dtype=np.int64)
    if trace.rope_theta is not None:  # a Llama-style layer: Q and K were turned by position
        out["rope_theta"] = np.array(trace.rope_theta, dtype=np.float64)
    out["d_model"] = np.array(trace.d_model, dtype=np.int64)
    out["seed"] = np.array(c.seed, dtype=np.int64)
    out["causal"] = np.array(c.causal, dtype=np.bool_)
    out["format_version"] = np.array(FORMAT_VERSION, dtype=np.int64)
    out["mhacli_version"] = np.array(__version__, dtype=np.str_)
    out["tokenizer"] = np.array(c.tokenizer, dtype=np.str_)
    out["positions"] = np.array(c.positions, dtype=np.bool_)
    out["weight_kind"] = np.array(c.weights, dtype=np.str_)
    out["dtype"] = np.array(c.dtype, dtype=np.str_)
    if trace.model_ids:  # a trained model's own ids (and whether it folds capitals): mha show shows them again
        out["token_ids"] = np.asarray(trace.token_ids, dtype=np.int64)
        out["folds_case"] = np.array(trace.folds_case, dtype=np.bool_)
    if trace.word_values:  # V = E W_v: verify needs to know (older files lack the member: values from X)
        out["word_values"] = np.array(True, dtype=np.bool_)
    if trace.embeddings is not None:
        out["embeddings"] = np.asarray(trace.embeddings)
    if trace.positions is not None:
        out["position_encoding"] = np.asarray(trace.positions)
    out.update(trace_biases(trace))
    if trace.rules:
        out["rules"] = np.array(trace.rules, dtype=np.str_)
    if card is not None and card.names:
        out["relations"] = np.array(tuple(card.names), dtype=np.str_)
    if card is not None and card.data is not None:
        out[CARD] = np.array(json.dumps(card.data), dtype=np.str_)
    if getattr(trace, "parse", None) is not None:
        out[PARSED] = np.array(True)
    if getattr(trace, "mapped", ()):
        out[MAPPED] = np.array(trace.mapped, dtype=np.str_)  # (m, 3)
    return out


def save_npz(run: Any, path: Path) -> Path:
    """Write a run (or a bare trace) as an uncompressed npz, atomically (:func:`npz_arrays`)."""
    arrays = npz_arrays(run)
    return atomic_write(Path(path), lambda handle: np.savez(handle, **arrays))  # type: ignore[arg-type]


def _shape_error(path: Path, detail: str) -> UsageError:
    from mhacli.attention.messages import shown_path

    return UsageError(f"{shown_path(path)} is not a valid mha trace: {detail}.")


def _describe_read_error(exc: BaseException) -> str:
    """Why numpy could not open the file, in words a student can act on."""
    text = str(exc)
    if isinstance(exc, (zipfile.BadZipFile, EOFError)) or "zip" in text.lower():
        return "it is truncated or damaged (was it copied before 'mha explain' finished?); write it again"
    if "Object arrays" in text:
        return "it holds Python objects, which mha never writes"
    if "pickle" in text.lower():
        return "it is not an npz file (text or another format)"
    return f"it cannot be read as npz ({type(exc).__name__})"


_HINT = "write one with 'mha explain TEXT --save-npz FILE'"


def _read_members(path: Path) -> dict[str, np.ndarray]:
    """Every trace member of the npz, through the one bounded reader (:func:`mhacli.io.archive.read_npz`)."""
    from mhacli.io.archive import read_npz

    def check_names(names: list[str]) -> None:
        missing = [k for k in NPZ_KEYS if k not in names]
        if {"kind", "readout", "in_proj_weight"} <= set(names):  # a file mha wrote, but not a run
            raise _shape_error(path, "it is a model 'mha train --save' wrote, not a saved run: 'mha explain TEXT "
                                     "--weights FILE --save-npz run.npz' saves a run of it")
        from mhacli.io.archive import is_attention_npz

        if is_attention_npz(names):  # your model's attention: weights after softmax, none of a run's steps
            raise _shape_error(path, "it holds attention weights (your model's, which 'mha show' draws), not a saved "
                                     "run: verify recomputes every step of a run from its inputs and weights; "
                                     "'mha explain TEXT --save-npz run.npz' saves one")
        if len(missing) == len(NPZ_KEYS):
            found = ", ".join(sorted(names)[:6]) or "nothing"
            raise _shape_error(path, f"it was not written by mha (it holds {found}); {_HINT}")
        if missing:
            raise _shape_error(path, f"missing {', '.join(missing)}")

    return read_npz(path, noun="trace file", hint=_HINT, bad=lambda detail: _shape_error(path, detail),
                    cap=None, max_members=MAX_MEMBERS, names_check=check_names,
                    wanted=lambda name: name in KNOWN_KEYS, kinds="biufU")


def load_trace(path: Path) -> Trace:
    """Read an npz written by ``mha explain --save-npz`` back into a Trace (no recomputation)."""
    return load_saved(path)[0]


def load_saved(path: Path) -> tuple[Trace, Any, tuple[tuple[str, str, str], ...]]:
    """A saved run: its Trace, and what its grammar model read in the sentence (the parse, or None; --words); every
    member bounded and checked against the format before use (format 1 files get the Config's defaults)."""
    if isinstance(path, str) and path == "":  # Path('') is '.': "'.' is a folder" would name nothing given
        raise UsageError("the trace file's name is empty (''); give the .npz 'mha explain TEXT --save-npz FILE' "
                         "wrote.")
    path = Path(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            arrays = _read_members(path)  # its refusals (a missing file, no permission, no memory) said already
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError, NotImplementedError, RuntimeError) as exc:
        raise _shape_error(path, _describe_read_error(exc)) from None
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return _trace_from_arrays(path, arrays)


def _whole(path: Path, a: dict[str, np.ndarray], name: str, default: int | None = None) -> int:
    """A scalar member that must be a whole number (an integer dtype; no inf, no NaN, no 2.5)."""
    if name not in a:
        if default is None:
            raise _shape_error(path, f"missing {name}")
        return default
    value = a[name]
    if value.shape != () or value.dtype.kind not in "iu":
        if value.shape == () and value.dtype.kind == "f":
            raise _shape_error(path, f"{name} must be a whole number, got {float(value)!r}")
        raise _shape_error(path, f"{name} must be a single whole number")
    return int(value)


def _flag(path: Path, a: dict[str, np.ndarray], name: str, default: bool) -> bool:
    if name not in a:
        return default
    value = a[name]
    if value.shape != () or value.dtype.kind not in "biu" or int(value) not in (0, 1):
        raise _shape_error(path, f"{name} must be true or false")
    return bool(value)


def _word(path: Path, a: dict[str, np.ndarray], name: str, default: str) -> str:
    if name not in a:
        return default
    value = a[name]
    if value.shape != () or value.dtype.kind != "U":
        raise _shape_error(path, f"{name} must be a single string")
    return str(value)


def _texts(path: Path, a: dict[str, np.ndarray], name: str, h: int) -> tuple[str, ...] | None:
    if name not in a:
        return None
    value = a[name]
    if value.dtype.kind != "U" or value.shape != (h,):
        raise _shape_error(path, f"{name} must hold one string per head ({h})")
    return tuple(str(r) for r in value)


def _trace_from_arrays(path: Path, a: dict[str, np.ndarray]) -> tuple[Trace, Any, tuple[tuple[str, str, str], ...]]:
    """Check every member against the format and the others, then build the Trace; with it the saved parse
    and --words (:func:`load_saved`)."""
    version = _whole(path, a, "format_version", default=1)
    if version < 1 or version > FORMAT_VERSION:
        raise _shape_error(path, f"it is format {version}, newer than this mhacli reads "
                           f"({FORMAT_VERSION}); upgrade mhacli")
    h, d = _whole(path, a, "num_heads"), _whole(path, a, "d_model")
    seed, causal = _whole(path, a, "seed"), _flag(path, a, "causal", False)
    if a["tokens"].dtype.kind != "U" or a["tokens"].ndim != 1:
        raise _shape_error(path, "tokens must be a 1-D array of strings")
    n = a["tokens"].shape[0]
    if n < 1 or h < 1 or d < 1 or d % h:
        raise _shape_error(path, f"inconsistent sizes (N={n}, d_model={d}, num_heads={h})")
    g = _whole(path, a, "kv_heads", default=h)  # key/value heads: h unless the heads shared them
    if g < 1 or h % g:
        raise _shape_error(path, f"kv_heads {g} does not divide num_heads {h}")
    expected = {
        "X": (n, d), "W_q": (d, d), "W_k": (g * d // h, d), "W_v": (g * d // h, d), "W_o": (d, d),
        "Q": (h, n, d // h), "K": (g, n, d // h), "V": (g, n, d // h), "heads": (h, n, d // h),
        "scores": (h, n, n), "weights": (h, n, n), "concat": (n, d), "output": (n, d),
        "embeddings": (n, d), "position_encoding": (n, d),
        **{b: (d,) for b in BIAS_FIELDS},
    }
    for name, shape in expected.items():
        if name not in a:
            continue  # only the optional ones can be missing here
        if a[name].shape != shape:
            raise _shape_error(path, f"{name} has shape {a[name].shape}, expected {shape}")
        if a[name].dtype.kind != "f":
            raise _shape_error(path, f"{name} is not a float array")
        finite = np.isfinite(a[name])
        if name == "scores":
            finite |= np.isneginf(a[name])  # masked scores are −∞ by design
        if not finite.all():
            raise _shape_error(path, f"{name} holds infinite or NaN values (tampered?)")
    w = a["weights"]
    if np.any(w < 0) or not np.allclose(w.sum(-1), 1.0, atol=1e-4):
        raise _shape_error(path, "its attention weights are not rows of probabilities (tampered?)")
    dtype = "float32" if a["X"].dtype == np.float32 else "float64"
    try:
        config = Config(heads=h, d_model=d, seed=seed, causal=causal, dtype=_word(path, a, "dtype", dtype),
                        tokenizer=_word(path, a, "tokenizer", "word"),
                        positions=_flag(path, a, "positions", True),
                        weights=_word(path, a, "weight_kind", "random"), kv_heads=None if g == h else g)
    except UsageError as exc:
        raise _shape_error(path, str(exc).rstrip(".")) from None
    tokens = tuple(str(t) for t in a["tokens"])
    rules = _texts(path, a, "rules", h)
    _texts(path, a, "relations", h)  # checked; the names come again from the model's card
    biases = {b: a[b] for b in BIAS_FIELDS if b in a}
    from mhacli.attention.attention import causal_mask

    word_values = _flag(path, a, "word_values", False)
    if word_values and "embeddings" not in a:
        raise _shape_error(path, "its values come from the embeddings, which it lacks")
    extra: dict[str, Any] = dict(biases)  # the Trace keeps b_q, b_k, b_v, b_o as fields of their own
    if "rope_theta" in a:
        theta = a["rope_theta"]
        if theta.shape != () or theta.dtype.kind != "f" or not np.isfinite(theta) or float(theta) <= 0:
            raise _shape_error(path, "rope_theta must be one positive number")
        extra["rope_theta"] = float(theta)
    mapped = _mapped(path, a)
    ids = a.get("token_ids")
    if ids is not None and (ids.shape != (n,) or ids.dtype.kind not in "iu" or np.any(ids < 0)):
        raise _shape_error(path, f"token_ids must hold {n} whole numbers from 0, one per token")
    trace = Trace(
        config=config, tokens=tokens, token_ids=vocabulary(tokens)[1] if ids is None else ids.astype(np.int64),
        model_ids=ids is not None, folds_case=_flag(path, a, "folds_case", False),
        **cast(dict[str, Any], {name: a[name] for name in ARRAY_FIELDS}),
        mask=causal_mask(n) if causal else None, rules=rules,
        source=os.fsencode(path).decode("utf-8", "backslashreplace"),  # valid Unicode: a page must encode it
        embeddings=a.get("embeddings"), positions=a.get("position_encoding"),
        word_values=word_values, **extra,
    )
    return trace, _parse(path, a, tokens, rules, mapped), mapped


def _mapped(path: Path, a: dict[str, np.ndarray]) -> tuple[tuple[str, str, str], ...]:
    """The saved --words (word, class, read as), each checked as the option checks it."""
    if MAPPED not in a:
        return ()
    value = a[MAPPED]
    if value.dtype.kind != "U" or value.ndim != 2 or value.shape[1] != 3:
        raise _shape_error(path, f"{MAPPED} must hold (word, class, read as) strings, one row per word")
    from mhacli.grammar.words import CLASSES, word_map

    rows = tuple((str(w), str(c), str(r)) for w, c, r in value)
    try:
        word_map({w: c for w, c, _ in rows})
    except UsageError as exc:
        raise _shape_error(path, f"its {MAPPED} are not ones --words takes ({str(exc).rstrip('.')})") from None
    if len({w for w, _, _ in rows}) != len(rows) or any(r not in CLASSES[c] for _, c, r in rows):
        raise _shape_error(path, f"its {MAPPED} read a word as one outside its class")
    return rows


def _parse(path: Path, a: dict[str, np.ndarray], tokens: tuple[str, ...], rules: tuple[str, ...] | None,
           mapped: tuple[tuple[str, str, str], ...] = ()) -> Any:
    """The grammar's parse of a saved sentence a grammar model read (the same pure function of the tokens)."""
    if not _flag(path, a, PARSED, False):
        return None
    from mhacli.grammar.words import WordMap, parse

    found = parse(tokens, WordMap(tuple((w, c) for w, c, _ in mapped)))
    if found is None or not rules:  # the tokens or the names were edited: the saved names cannot stand
        raise _shape_error(path, f"it says a grammar model read a sentence, but its "
                           f"{'tokens are not one the grammar parses' if found is None else 'heads have no names'}")
    return found


def _jsonable(a: np.ndarray) -> Any:
    """Nested lists; −∞ (masked scores) becomes null, since JSON has no infinity."""
    if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
        return np.where(np.isfinite(a), a, np.array(None)).tolist()
    return a.tolist()


def trace_document(result: Any, arrays: bool = True) -> dict[str, Any]:
    """Everything a student needs to check a run, as one JSON-ready dict of what the run holds (nothing computed);
    ``arrays=False`` (``--no-json-arrays``) leaves the (h, N, N) and (N, d) arrays out (``"arrays": null``)."""
    trace, card = result.trace, result.card
    biases = trace_biases(trace)
    return {
        "format_version": FORMAT_VERSION,
        "mhacli_version": __version__,
        "config": trace.config.to_dict(),
        "weight_kind": trace.config.weights,
        "tokens": list(trace.tokens),
        "token_ids": trace.token_ids.tolist(),
        "steps": [s.to_dict() for s in trace.steps],
        "total_madds": sum(s.madds for s in trace.steps),
        "parameters": trace.parameters.to_dict(),
        "split_equals_direct_max_diff": result.split_diff,
        "rules": list(trace.rules) if trace.rules else None,
        "relations": list(card.names) if card is not None else None,
        **({} if card is None else {"card": card.data}),
        "biases": {k: _jsonable(v) for k, v in biases.items()} or None,
        **head_measures(trace, result.analysis),
        "notes": {
            "layout": "PyTorch nn.MultiheadAttention: Q = X @ W_q.T; head i uses rows i*d_k:(i+1)*d_k of W_q.",
            "masked_scores": "Masked scores are -inf in the npz and null here (JSON has no infinity).",
            "schema": "mhacli/io/trace.schema.json in the package describes this document.",
            **({} if arrays else {"arrays": "Left out (--no-json-arrays); --save-npz keeps every array."}),
        },
        "arrays": {name: _jsonable(np.asarray(a)) for name, a in npz_arrays(trace).items()
                   if name in ARRAY_FIELDS or name in ("embeddings", "position_encoding")} if arrays else None,
    }


def head_measures(shown: Any, measures: Analysis) -> dict[str, Any]:
    """The run's per-query measures as JSON: ``head_summaries`` (each head's pattern and pattern_share),
    ``agreement`` (h×h), ``js_divergence_bits`` (h×h), ``counted_rows``, the cautions, the parse and --words."""
    from mhacli.measures.narrate import cautions

    heads = []
    for s in measures.heads:
        entry = s.to_dict()
        entry["pattern_token"] = None if s.pattern_key is None else shown.tokens[s.pattern_key]
        del entry["outside_window"]  # the document shows every token: nothing is outside
        heads.append(entry)
    out = {"head_summaries": heads, "agreement": measures.agreement.tolist(),
           "js_divergence_bits": measures.js.tolist(), "counted_rows": measures.counted_rows,
           "close_to_uniform": measures.close_to_uniform, "cautions": cautions(measures)}
    if measures.reading is not None:  # a grammar model's sentence: the parse and where each head looks from it
        out["grammar"] = measures.reading.to_dict()
    if measures.mapped:  # --words: each new word, its grammar class and the word the model read it as
        out["words"] = [{"word": w, "class": c, "read_as": r} for w, c, r in measures.mapped]
    return out


def trace_schema() -> dict[str, Any]:
    """The JSON Schema of :func:`trace_document`, shipped in the package (:func:`mhacli.io.schemas.schema`)."""
    from mhacli.io.schemas import schema

    return schema("trace")
