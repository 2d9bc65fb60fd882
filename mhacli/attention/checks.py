"""The Python API's values checked one way: whole numbers and true/false flags.

A notebook passes numpy's own scalars as often as Python's (``heads=np.int64(2)``,
``causal=np.True_``): they are the same values and are taken; a value of
another kind (``causal="no"``, ``layer=1.5``) is a usage error, never read by
its truthiness.
"""

from __future__ import annotations

import numbers
from typing import Sequence

from mhacli.attention.errors import UsageError
from mhacli.attention.messages import literal


def whole_number(name: str, value: object, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an ``int`` if it is a whole number (numpy integers included, bool not) within bounds."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise UsageError("{%s:name} must be a whole number, got %s." % (name, _spelled(value)), **{name: value})
    number = int(value)
    if low is not None and number < low or high is not None and number > high:
        span = f"from {low} to {high}" if low is not None and high is not None else (
            f"at least {low}" if low is not None else f"at most {high}")
        raise UsageError("{%s:name} must be %s, got %s." % (name, span, _spelled(number)), **{name: number})
    return number


def flag(name: str, value: object) -> bool:
    """``value`` as a ``bool`` if it is True/False (numpy's too) or the integers 1/0; anything else refused."""
    if isinstance(value, bool):
        return value
    import numpy as np  # here, not at the top: mha samples reads names through this module without numpy

    if isinstance(value, np.bool_) or isinstance(value, numbers.Integral) and int(value) in (0, 1):
        return bool(value)
    raise UsageError("{%s:name} must be True or False, got %s." % (name, _spelled(value)), **{name: value})


#: What numpy holds exactly after a widening: PyTorch's half floats read as float32.
_WIDENED = ("bfloat16", "float16")


def tensor_values(name: str, value: object, where: str) -> object:
    """A PyTorch tensor's values as a numpy array (any other value as given), or one line naming what it is.

    Read by duck type (core never imports torch): a meta tensor has no values, a sparse or quantized one
    is not a plain layer's weights, and float8 or complex has no numpy float to become.
    """
    if not hasattr(value, "detach"):
        return value
    kind = str(getattr(value, "dtype", "")).replace("torch.", "")
    what = None
    if getattr(value, "is_meta", False) or str(getattr(value, "device", "")) == "meta":
        what = "a meta tensor, which has a shape but no values (made on the meta device, or saved before loading)"
    elif (layout := str(getattr(value, "layout", "torch.strided"))) != "torch.strided":
        what = f"a {layout.replace('torch.', '').replace('_coo', '')} tensor (call .to_dense() first)"
    elif getattr(value, "is_quantized", False):
        what = f"a quantized tensor ({kind}; call .dequantize() first)"
    elif kind.startswith("complex"):
        what = f"a {kind} tensor: attention weights are real numbers"
    elif kind.startswith(("float8", "float4", "q", "bits")):
        what = f"a {kind} tensor, which numpy cannot hold (convert it with .float() first)"
    if what is not None:
        raise UsageError(f"{name!r} of {where} is {what}; mhacli reads plain float tensors.")
    tensor = value.detach().cpu()  # type: ignore[attr-defined]
    if kind in _WIDENED and hasattr(tensor, "float"):
        tensor = tensor.float()  # numpy has no bfloat16; float32 holds every bfloat16 and float16 exactly
    try:
        return tensor.numpy()
    except (TypeError, RuntimeError, NotImplementedError) as exc:  # a kind of tensor not named above
        raise UsageError(f"{name!r} of {where} is a {kind or type(value).__name__} tensor numpy cannot hold "
                         f"({type(exc).__name__}); save it as float32.") from None


def recorded_heads(count: int, d_model: int, where: str) -> int:
    """A head count a file records, refused naming the file when it cannot split its width d."""
    if 1 <= count <= d_model and d_model % count == 0:
        return count
    from mhacli.attention.config import divisors
    from mhacli.attention.errors import shown_value

    ok = ", ".join(str(n) for n in divisors(d_model)[:12])
    safe = literal(where)
    raise UsageError(f"{safe} record {shown_value(count)} heads, which cannot split their d = {d_model} (the "
                     f"head counts that can: {ok}); the file was edited or damaged: record one of those.")


def strings(name: str, value: object, what: str = "one per head", *, ids: bool = True) -> tuple[str, ...] | None:
    """A list of names (``names``, ``layer_names``, ``tokens``) as strings, or None; one string is refused.

    ``names="head"`` is a mistake to report, not four heads 'h', 'e', 'a', 'd'. ``ids=False`` (the tokens) also
    refuses a list of whole numbers, a tokenizer's ids: they would label every row and column with numbers.
    """
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        raise UsageError("{%s:name} must be a list of strings, %s, not one string (got %s)."
                         % (name, what, _spelled(value)), **{name: value})
    try:
        items = list(value)  # type: ignore[call-overload]
    except TypeError:
        raise UsageError("{%s:name} must be a list of strings, %s, got %s." % (name, what, _spelled(value)),
                         **{name: value}) from None
    numbers_given = [] if ids else [_scalar(item) for item in items]  # only the tokens are checked for ids
    if numbers_given and all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in numbers_given):
        said = ", ".join(str(i) for i in numbers_given[:4]) + (", …" if len(items) > 4 else "")
        raise UsageError("{%s:name} are whole numbers (%s): a tokenizer's ids, not its tokens; pass their text, "
                         "e.g. tokenizer.convert_ids_to_tokens(ids)." % (name, said), **{name: value})
    odd = next((i for i, item in enumerate(numbers_given)
                if isinstance(item, numbers.Number) and not isinstance(item, numbers.Integral)), None)
    if odd is not None:  # 1.0 would label a row '1.0': a fraction is never a token's text (a whole 3 may be)
        raise UsageError("{%s:name} must be strings, %s; item %d is %s, a number." % (
            name, what, odd, kind_name(numbers_given[odd])), **{name: value})
    return tuple(str(item) for item in items)


def _scalar(item: object) -> object:
    """A numpy or torch scalar (a tensor's element) as the Python number it holds; anything else as it is."""
    return item.item() if hasattr(item, "item") and hasattr(item, "dtype") else item  # type: ignore[attr-defined]


def text_argument(value: object) -> str | None:
    """The text of ``mhacli.run(text)``: a string (or None, with ``tokens``); anything else refused saying so."""
    if value is None or isinstance(value, str):
        return value
    hint = " (for a list of tokens, pass tokens=[...])" if isinstance(value, (list, tuple)) else (
        " (decode it first: text.decode('utf-8'))" if isinstance(value, (bytes, bytearray)) else "")
    raise UsageError(f"the text must be a string, got {kind_name(value)}{hint}.")


def kind_name(value: object) -> str:
    """What a caller passed, for a message without fields: its type and, shortened, the value (``str 'the cat'``)."""
    text = _shortened(value)
    return type(value).__name__ if "\n" in text or text.startswith("<") else f"{type(value).__name__} {text}"


def chosen(value: object, choices: Sequence[str]) -> object:
    """The one rule for a name a person types: spaces around it and letter case do not count.

    The choice ``value`` names (``" Grammar"`` -> ``"grammar"``), or ``value`` itself when it names
    none, for the caller to refuse quoting it exactly as typed.
    """
    if not isinstance(value, str):
        return value
    folded = value.strip().casefold()
    return next((choice for choice in choices if choice.casefold() == folded), value)


def layer_index(layer: object, names: Sequence[str]) -> int | None:
    """The 0-based index of the layer ``layer`` names among ``names``, or None when it names none.

    A whole number counts from 0, as the model's own objects do (``outputs.attentions[0]``, ``layers.0``); else a name,
    exact first, then by :func:`chosen` (spaces and case ignored), so ``--layer`` reads the same in every command.
    """
    from mhacli.attention.numbers import whole_number as typed_number

    if isinstance(layer, bool):
        return None
    number = int(layer) if isinstance(layer, numbers.Integral) else (
        typed_number(layer) if isinstance(layer, str) else None)
    if number is not None:
        return number if 0 <= number < len(names) else None
    if isinstance(layer, str) and layer in names:  # exact first: 'A' and 'a' may both be layers
        return list(names).index(layer)
    if not isinstance(layer, str):
        return None
    folded = [i for i, name in enumerate(names) if name.casefold() == layer.strip().casefold()]
    if len(folded) > 1:  # 'ATTN' for 'Attn' and 'attn': picking either would be a guess
        from mhacli.attention.messages import shown

        both = " and ".join(shown(names[i]) for i in folded)
        raise UsageError("{layer} names " + f"{len(folded)} layers whose names differ only in letter case, "
                         f"{literal(both)}; give one exactly as it is written.", layer=layer)
    return folded[0] if folded else None


def named_options(options: dict[str, object]) -> dict[str, object]:
    """``options`` with each name (``weights``, ``tokenizer``, ``dtype``) read by :func:`chosen`.

    A named kind of weights wins over a file of the same name, as it always has for the exact name
    (``./Grammar`` names the file).
    """
    from mhacli.attention.config import DTYPES, TOKENIZERS, WEIGHT_KINDS

    named = dict(options)
    for name, choices in (("weights", WEIGHT_KINDS), ("tokenizer", TOKENIZERS), ("dtype", DTYPES)):
        if name in named:
            named[name] = chosen(named[name], choices)
    return named


def _shortened(value: object) -> str:
    from mhacli.attention.messages import shown

    text = shown(value) if isinstance(value, str) else repr(value)
    return text[:40] + "…" if len(text) > 41 else text


def _spelled(value: object) -> str:
    """The value as typed, for a message template with fields: its braces are text."""
    return literal(_shortened(value))


#: What a trained model decides for itself: its heads, width and mask, the seed it was trained from
#: (its weights come from training, not from a seed) and that its positions are added.
TRAINED_DECIDES = ("heads", "d_model", "causal", "seed", "positions")


def trained_options(options: dict[str, object], trained: object, source: str = "trained") -> dict[str, object]:
    """``options`` with every setting a trained model decides taken from it (``trained``: its TrainConfig; ``source``:
    "trained", or "untrained" for its layer before the first step). A given setting that differs from the
    model's is refused with the reason: ``--no-positions`` cannot take out the positions the model was trained with.
    """
    decided: dict[str, object] = {name: getattr(trained, name) for name in TRAINED_DECIDES if name != "positions"}
    decided["positions"] = True  # learned or sinusoidal, the model adds the positions it was trained with
    if options.get("positions", True) is not True:
        kind = str(getattr(trained, "positions", "its"))
        raise UsageError("the trained model adds the %s positions it was trained with, and its heads rely on "
                         "them; {positions} cannot take them out: drop {positions}." % kind,
                         positions=False)
    if "seed" in options and options["seed"] != decided["seed"]:
        raise UsageError("the trained model's weights come from its training (with {seed}), not from a seed; "
                         "leave {seed:name} out to use it.", seed=decided["seed"])
    for name in ("heads", "d_model", "causal"):
        if name in options and options[name] != decided[name]:
            raise UsageError("the trained model has {%s}; leave {%s:name} out to use it." % (name, name),
                             **{name: decided[name]})
    return {**options, **decided, "weights": source}
