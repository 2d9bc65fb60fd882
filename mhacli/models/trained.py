"""A trained attention layer as an npz file of plain arrays (docs/training.md lists them: the attention in
PyTorch's layout, the embedding, positions, readouts, config and metrics as JSON), and back; a Trace from it.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from mhacli.version import __version__
from mhacli.grammar.card import Card
from mhacli.attention.config import Config
from mhacli.attention.errors import UsageError
from mhacli.attention.tokenize import tokenize
from mhacli.attention.trace import Trace, run_tokens
from mhacli.grammar.model import TrainConfig, TrainedModel
from mhacli.grammar.train import TrainResult
from mhacli.io.files import atomic_write
from mhacli.io.host import blas_kernel

if TYPE_CHECKING:
    from mhacli.measures.compare import TrainedApart

KIND = "mhacli-trained"
MAX_TRAINED_BYTES = 2**30  # the shipped model is ~50 KB; a d = 512 model with a large vocabulary is a few MB
FORMAT_VERSION = 1
_HINT = "make one with 'mha train --save model.npz'"
#: Every member a trained-model file must have.
TRAINED_KEYS = ("kind", "format_version", "mhacli_version", "task", "config", "metrics", "in_proj_weight",
                "out_proj.weight", "embedding", "vocabulary", "positions", "positions_kind", "readout", "targets",
                "relations", "relation_share")


def trained_arrays(result: TrainResult) -> dict[str, Any]:
    """The arrays of a trained-model file, by name."""
    model, p = result.model, result.model.params
    metrics = {"loss": result.loss, "accuracy": result.accuracy, "parameters": result.parameters,
               "seconds": result.seconds, "steps": result.config.steps,
               "relation_accuracy": dict(zip(result.model.targets, result.relation_accuracy)),
               "blas": blas_kernel()}  # the bits of a long run depend on it: tests retrain exactly only on it
    if model.card is not None:  # additive: a grammar model carries its report card, and its names follow it
        metrics["card"] = model.card.to_dict()
    from mhacli.grammar.score import record

    metrics["held_out"] = record(model)  # its held-out measures, for these parameters: runs read them, not redo them
    return {
        "kind": np.array(KIND),
        "format_version": np.array(FORMAT_VERSION, dtype=np.int64),
        "mhacli_version": np.array(__version__),
        "task": np.array(result.config.task),
        "config": np.array(json.dumps(result.config.record(), sort_keys=True)),
        "metrics": np.array(json.dumps(metrics, sort_keys=True)),
        "in_proj_weight": np.concatenate([p["W_q"], p["W_k"], p["W_v"]]),  # (3d, d): q, k, v
        "out_proj.weight": np.asarray(p["W_o"]),  # (d, d)
        "embedding": np.asarray(p["embedding"]),  # (V, d)
        "vocabulary": np.array(model.vocabulary, dtype=np.str_),  # (V,)
        "positions": np.asarray(p["positions"]),  # (N, d)
        "positions_kind": np.array(result.config.positions),
        "readout": np.asarray(p["readout"]),  # (T, V, d)
        "targets": np.array(model.targets, dtype=np.str_),  # (T,)
        "relations": np.array([name for name, _ in model.relations], dtype=np.str_),  # (h,)
        "relation_share": np.array([share for _, share in model.relations], dtype=np.float64),  # (h,)
    }


def save_trained(result: TrainResult, path: Path) -> Path:
    """Write the trained model as an npz, atomically (an interrupted save leaves no file)."""
    c = result.config
    if c.kv_heads is not None and c.kv_heads != c.heads:  # the file holds (d, d) keys and values, one per head
        raise UsageError(f"a model whose {c.heads} heads share {c.kv_heads} key/value heads cannot be saved: a "
                         "trained-model file holds one key and one value matrix per head; train it without "
                         "kv_heads to save it.")
    arrays = trained_arrays(result)
    return atomic_write(Path(path), lambda handle: np.savez(handle, **arrays))


def _bad(path: Path, detail: str) -> UsageError:
    from mhacli.attention.messages import shown_path

    return UsageError(f"{shown_path(path)} is not a trained mha model: {detail}; {_HINT}.")


def _text(data: Any, key: str, path: Path) -> str:
    value = data[key]
    if value.shape != () or value.dtype.kind != "U":
        raise _bad(path, f"'{key}' is not text")
    return str(value)


def _floats(data: Any, key: str, path: Path, ndim: int) -> np.ndarray:
    value = data[key]
    if value.dtype.kind != "f" or value.ndim != ndim:
        raise _bad(path, f"'{key}' is not a {ndim}-d float array")
    if not np.isfinite(value).all():
        raise _bad(path, f"'{key}' holds values that are not finite")
    from mhacli.models.state_dict import MAX_ABS_WEIGHT

    biggest = float(np.max(np.abs(value), initial=0.0))
    if biggest > MAX_ABS_WEIGHT:  # 1e300 is finite, but its scores are not: trained values are a few tens
        raise _bad(path, f"'{key}' holds values up to {biggest:.3g}, beyond the ±{MAX_ABS_WEIGHT:.0e} a trained "
                   "layer stays within")
    return np.asarray(value, dtype=np.float64)


def _json(data: Any, key: str, path: Path) -> dict[str, Any]:
    """A JSON member as an object, refused naming the member (nested past any reader's depth, not an object)."""
    try:
        value = json.loads(_text(data, key, path))
    except RecursionError:  # "[[[[…" 100,000 deep: json recurses once per level
        raise _bad(path, f"its '{key}' JSON is nested too deeply to be a record mha train wrote") from None
    if not isinstance(value, dict):
        raise _bad(path, f"its '{key}' is not a JSON object")
    return value


def _recorded_config(recorded: dict[str, Any], path: Path) -> TrainConfig:
    """The training config a file records, refused in the file's own terms (never as options the user typed)."""
    from dataclasses import fields

    from mhacli.attention.errors import python_name

    known = {f.name for f in fields(TrainConfig)}
    odd = sorted(set(recorded) - known)
    if odd:
        raise _bad(path, f"its config records {odd[0]!r}, which mha train does not record")
    try:
        return TrainConfig(**recorded)
    except UsageError as exc:
        said = exc.worded(python_name, "=").split(";")[0].rstrip(".")
        raise _bad(path, f"its recorded config was edited or damaged ({said})") from None


def load_trained(path: Path) -> tuple[TrainedModel, dict[str, Any]]:
    """Read a file written by :func:`save_trained`: the model and its metrics, every member validated."""
    from mhacli.io.archive import read_npz

    path = Path(path)
    try:
        # The one bounded reader: a regular file, refused from the zip's declared sizes, never unpickled.
        data = read_npz(path, noun="trained model", hint=_HINT, bad=lambda detail: _bad(path, detail),
                        cap=MAX_TRAINED_BYTES, wanted=lambda name: name in TRAINED_KEYS)
        missing = [k for k in TRAINED_KEYS if k not in data]
        if "kind" in missing or (not missing and _text(data, "kind", path) != KIND):
            raise _bad(path, "it has no 'kind' member saying mhacli-trained")
        if missing:
            raise _bad(path, f"it lacks {', '.join(missing)}")
        version = data["format_version"]
        if version.shape != () or version.dtype.kind not in "iu" or int(version) != FORMAT_VERSION:
            said = version.item() if version.shape == () else f"an array of shape {version.shape}"
            raise _bad(path, f"format_version is {said!r}, this mha reads {FORMAT_VERSION}")
        config = _recorded_config(_json(data, "config", path), path)
        metrics = _json(data, "metrics", path)
        in_proj = _floats(data, "in_proj_weight", path, 2)
        w_o = _floats(data, "out_proj.weight", path, 2)
        embedding = _floats(data, "embedding", path, 2)
        positions = _floats(data, "positions", path, 2)
        readout = _floats(data, "readout", path, 3)
        share = _floats(data, "relation_share", path, 1)
        vocabulary = tuple(str(t) for t in data["vocabulary"])
        targets = tuple(str(t) for t in data["targets"])
        relations = tuple(str(t) for t in data["relations"])
    except UsageError:
        raise
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile, json.JSONDecodeError) as exc:
        raise _bad(path, f"it cannot be read ({type(exc).__name__})") from None
    d, h = config.d_model, config.heads
    if not vocabulary or not targets:  # an edited file: a model with no words divides by zero later
        raise _bad(path, f"its {'vocabulary' if not vocabulary else 'list of targets'} is empty")
    shapes_ok = (in_proj.shape == (3 * d, d) and w_o.shape == (d, d) and embedding.shape == (len(vocabulary), d)
                 and positions.shape == (config.length, d)
                 and readout.shape == (len(targets), len(vocabulary), d)
                 and len(relations) == h and share.shape == (h,))
    if not shapes_ok:
        raise _bad(path, f"its array shapes do not fit d_model={d}, heads={h}")
    params = {"W_q": in_proj[:d], "W_k": in_proj[d:2 * d], "W_v": in_proj[2 * d:], "W_o": w_o,
              "embedding": embedding, "positions": positions, "readout": readout}
    model = TrainedModel(config=config, params=params, vocabulary=vocabulary, targets=targets,
                         relations=tuple(zip(relations, (float(s) for s in share))), card=_card(metrics, h, path))
    from dataclasses import replace

    if model.card is not None and model.card.always is None:  # a card saved before its baselines: measured again
        from mhacli.grammar.heldout import report_card

        model = replace(model, card=report_card(model, model.card.sentences, model.card.seed))
    kept = metrics.get("held_out") if isinstance(metrics, dict) else None
    if isinstance(kept, dict):
        from mhacli.grammar.score import kept_crowd, kept_score, params_digest

        if kept.get("params") == params_digest(model.params):  # measured on exactly these weights: else again
            recorded = replace(model, recorded=kept)
            try:  # read back as every run will read it; an edited record is measured again instead
                kept_score(recorded)
                kept_crowd(recorded)
                model = recorded
            except (KeyError, TypeError, ValueError, IndexError, AttributeError):
                pass
    return model, metrics


def _card(metrics: Any, heads: int, path: Path) -> Card | None:
    """The report card a file's metrics carry (None for a file without one), checked against the model."""
    data = metrics.get("card") if isinstance(metrics, dict) else None
    if data is None:
        return None
    try:
        card = Card.from_dict(data)
    except (KeyError, TypeError, ValueError):
        raise _bad(path, "its report card (metrics 'card') is not one") from None
    _card_rows(card.rows, path)
    if card.heads != heads:
        raise _bad(path, f"its report card has {card.heads} heads, the model {heads}")
    return card


def _card_rows(found: tuple[str, ...], path: Path) -> None:
    """Refuse a card whose rows are not the grammar's, in its order, naming the first that differs: a row is read
    by its place, so a renamed or moved row would put one relation's hit rates under another's name."""
    from mhacli.grammar.card import rows
    from mhacli.attention.messages import shown

    expected = rows()
    if tuple(found) == expected:
        return
    if sorted(found) == sorted(expected):
        raise _bad(path, f"its report card (metrics 'card') lists its rows in another order than the grammar's "
                   f"({', '.join(expected)}), so each row's hit rates would be read under another row's name")
    odd = next((r for r in found if r not in expected), None)
    if odd is None:  # the same count of known names, not each once: one is there twice
        twice = next(r for r in found if found.count(r) > 1)
        raise _bad(path, f"its report card (metrics 'card') has the row {shown(twice)} twice")
    raise _bad(path, f"its report card (metrics 'card') has a row {shown(odd)}, which the grammar's card has not "
               f"({', '.join(expected)})")


def trained_config(model: TrainedModel) -> Config:
    """The run configuration of a trace made with ``model``'s weights."""
    c = model.config
    return Config(heads=c.heads, d_model=c.d_model, seed=c.seed, causal=c.causal,
                  weights=getattr(model, "weight_source", "trained"))


def trained_trace(model: TrainedModel, tokens: Sequence[str]) -> Trace:
    """A normal :class:`Trace` of ``tokens`` through the trained layer (tokens outside its vocabulary: UsageError)."""
    return run_tokens(tokens, trained_config(model), model=model)


def trained_run(text: str, model: TrainedModel) -> Trace:
    """Tokenize ``text`` by words and run it through the trained layer."""
    tokens = tokenize(text, "word")
    if not tokens:
        raise UsageError(f"the text has no tokens; give some of {' '.join(model.vocabulary)}.")
    return trained_trace(model, tokens)


def trained_notes(model: TrainedModel, tokens: Sequence[str]) -> list[str]:
    """What a reader must know about a run of ``tokens`` through ``model``, each said from the numbers."""
    from mhacli.attention.messages import shown

    notes = []
    unknown = model.unknown(tokens) if model.sentences else ()
    if unknown:
        more = f" and {len(unknown) - 6} more" if len(unknown) > 6 else ""
        listed = ", ".join(shown(t) for t in unknown[:6]) + more
        notes.append(f"the grammar model knows {len(model.vocabulary) - 2} words; {listed} "
                     f"{'is' if len(unknown) == 1 else 'are'} not among them, and "
                     f"{'it goes' if len(unknown) == 1 else 'each goes'} in as the one unknown token, which "
                     "carries only its position (docs/training.md lists the words).")
    if model.sentences:
        from mhacli.grammar.words import parse

        if parse(tokens, model.words) is None:
            notes.append("this text is not a sentence of the grammar the model learned (docs/training.md), so "
                         "its heads are named here by the positional relations they follow, not by what they "
                         "learned.")
    stand = model.stand_ins(tokens)
    if stand:
        pairs = ", ".join(f"{shown(t)} → {w}" for t, w in list(stand.items())[:4])
        more = f" and {len(stand) - 4} more" if len(stand) > 4 else ""
        notes.append(f"the trained model knows only the words {' '.join(model.vocabulary)}; other words stand in "
                     f"as one of them by a stable hash ({pairs}{more}): its heads learned positions, not meanings.")
    trained_length = model.config.length
    if len(tokens) > trained_length:
        notes.append(f"the model was trained on sequences of {trained_length} tokens; this text has {len(tokens)}, "
                     "so past that its heads may not follow what they learned (the measures below say).")
    return notes


def trained_caution(model: TrainedModel, tokens: Sequence[str]) -> str | None:
    """One short line for the figures and the walkthrough when ``tokens`` are outside what ``model`` saw
    (a longer text, words it does not know, words that stand in for its letters); None inside it."""
    parts = []
    if len(tokens) > model.config.length:
        parts.append(f"trained on {model.config.length} tokens, this text has {len(tokens)}")
    unknown = model.unknown(tokens) if model.sentences else ()
    if unknown:
        parts.append(f"{len(unknown)} unknown word{'s' if len(unknown) != 1 else ''}")
    stand = model.stand_ins(tokens)
    if stand:
        parts.append(f"{len(stand)} word{'s' if len(stand) != 1 else ''} it never saw, standing in for its letters")
    if not parts:
        return None
    return "outside what the model saw (" + "; ".join(parts) + "): its heads may not follow what they learned"


def shipped_apart(name: str = "trained") -> tuple[TrainedModel, TrainedApart]:
    """The shipped one-head model trained alone (the same command with ``--heads 1``, docs/training.md), and what it
    and the shipped h heads reached: ``mha compare --weights trained`` sets them side by side."""
    from mhacli.measures.compare import trained_apart
    from mhacli.models.shipped import shipped_model_path

    alone, alone_metrics = load_trained(shipped_model_path(alone=True, name=name))
    heads, heads_metrics = load_trained(shipped_model_path(name=name))
    apart = trained_apart(alone, alone_metrics, heads, heads_metrics)
    return alone, apart
