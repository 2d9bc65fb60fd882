"""Your own attention weights from a file: a state dict as npz, ``.pt`` (with PyTorch) or ``.safetensors``, one
layer picked by ``layer``; read through the bounded readers of :mod:`mhacli.io.archive`, never unpickled.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from mhacli.attention.errors import UsageError
from mhacli.attention.messages import shown_path
from mhacli.models.state_dict import AttentionWeights, checked_heads, from_state_dict
from mhacli.models.shipped import UNTRAINED_GRAMMAR, shipped_model_path

MAX_WEIGHT_BYTES = 2 * 2**30  # a d = 8192 layer is 1 GiB in float64; more is not a teaching run
MAX_STATE_MEMBERS = 4096  # a 48-layer model's state dict has ~800 tensors
SUFFIXES = (".npz", ".pt", ".pth", ".safetensors")
_HINT = "give an .npz, .pt or .safetensors file of weights (docs/your-model.md)"
_NOUN = "weights file"


def _where(path: Path) -> str:
    return f"the weights in {shown_path(path)}"


def _bad(path: Path, what: str = ".npz") -> Any:
    return lambda detail: UsageError(f"{shown_path(path)} is not a readable {what} of weights: {detail}.")


def _check_file(path: Path) -> None:
    """Refuse at once what is not a regular file of a sane size (a device would be read forever)."""
    from mhacli.io.archive import open_regular

    handle, _ = open_regular(path, noun=_NOUN, hint=_HINT, max_bytes=MAX_WEIGHT_BYTES,
                             too_big="an attention layer for teaching needs")
    handle.close()


def _read_npz(path: Path) -> dict[str, Any]:
    from mhacli.io.archive import read_npz

    def not_a_run(names: list[str]) -> None:
        """A saved run or an attention file holds tokens (text), which a state dict never does: say what it is."""
        if "tokens" in names and "in_proj_weight" not in names:
            what = "a saved run ('mha explain --save-npz')" if "W_q" in names else "an attention file"
            raise _bad(path)(f"it is {what}, which 'mha show' reads; a weights file holds a layer's state dict "
                             "(in_proj_weight, out_proj.weight, …)")

    return read_npz(path, noun=_NOUN, hint=_HINT, bad=_bad(path), cap=MAX_WEIGHT_BYTES,
                    max_members=MAX_STATE_MEMBERS, kinds="biuf", names_check=not_a_run)


# What a state dict's pickle names: tensors and their storages (torch, torch._utils), the dict and its codecs.
# Anything else (torch.nn.modules.…, a class of the user's own) is an object torch.save(model) pickled whole.
_STATE_DICT_GLOBALS = ("torch", "collections", "builtins", "_codecs", "copyreg")


def saved_object(pickled: bytes) -> str | None:
    """The first class a .pt file's pickle names that no state dict holds (``torch.nn.modules.activation.
    MultiheadAttention``), read from its opcodes alone: nothing is imported or run."""
    import pickletools

    texts: list[str] = []  # the strings pushed last: protocol 4's STACK_GLOBAL takes its names from them
    try:
        for opcode, arg, _ in pickletools.genops(pickled):
            if opcode.name in ("GLOBAL", "INST"):
                module, _, name = str(arg).partition(" ")
            elif opcode.name == "STACK_GLOBAL" and len(texts) >= 2:
                module, name = texts[-2], texts[-1]
            else:
                if isinstance(arg, str):
                    texts.append(arg)
                continue
            root = module.split(".")[0]
            if root not in _STATE_DICT_GLOBALS or module.startswith("torch.nn.modules"):
                return f"{module}.{name}"
    except Exception:  # a damaged pickle: torch.load names it
        return None
    return None


def _refuse_saved_module(path: Path) -> None:
    """A file ``torch.save(model)`` wrote holds the model pickled whole, which is never unpickled here: say so,
    with the save that works, before PyTorch is even imported."""
    from mhacli.io.archive import torch_pickle

    data = torch_pickle(path)
    found = saved_object(data) if data is not None else None
    if found is not None:
        raise UsageError(f"{shown_path(path)} holds a whole model or object ({found}), as torch.save(model) "
                         "writes it, not a state dict; save its weights with torch.save(model.state_dict()) and "
                         "give that file.")


def _read_pt(path: Path) -> dict[str, Any]:
    from mhacli.models.torch_import import TorchUnavailable, load_torch
    from mhacli.io.archive import check_zip_archive

    check_zip_archive(path, _bad(path, "PyTorch file"), MAX_WEIGHT_BYTES, MAX_STATE_MEMBERS)
    _refuse_saved_module(path)
    try:
        torch = load_torch()
    except TorchUnavailable as exc:
        raise UsageError(f"{shown_path(path)} is a PyTorch file and {exc}; save the state dict as .npz or "
                         ".safetensors instead (see docs/your-model.md).") from None
    try:
        # weights_only: never unpickles arbitrary objects.  PyTorch's own warnings about the file
        # ("Detected pickle protocol 4 ...") are silenced: the one line below says what matters.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except MemoryError:
        raise UsageError(f"{shown_path(path)} would not fit in this machine's memory.") from None
    except Exception as exc:  # torch raises many kinds for a bad file
        why = ""
        if type(exc).__name__ == "UnpicklingError":  # the zip format names its objects, checked above
            with open(path, "rb") as handle:
                zipped = handle.read(2) == b"PK"
            why = ("; it holds objects PyTorch's safe loader refuses: save torch.save(model.state_dict())" if zipped
                   else " in PyTorch's legacy format, which its safe loader cannot read; load it and save "
                   "torch.save(model.state_dict()) again (a recent PyTorch writes the zip format)")
        raise UsageError(f"{shown_path(path)} is not a readable PyTorch state dict ({type(exc).__name__}){why}.") \
            from None
    if not isinstance(state, dict):
        raise UsageError(f"{shown_path(path)} holds a {type(state).__name__}, not a state dict.")
    return state


def _read_safetensors(path: Path) -> dict[str, Any]:
    """A .safetensors file through the ``safetensors`` package (numpy API; bfloat16 through PyTorch, if present)."""
    try:
        from safetensors import safe_open
    except ImportError:
        raise UsageError(f"{shown_path(path)} is a .safetensors file and the 'safetensors' package is not "
                         "installed; pip install safetensors, or save the state dict as .npz.") from None
    from mhacli.models.torch_import import torch_or_none

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with safe_open(str(path), framework="np") as handle:
                dtypes = {name: handle.get_slice(name).get_dtype() for name in handle.keys()}
                _refuse_unreadable(path, dtypes)
                plain = {name: handle.get_tensor(name) for name, kind in dtypes.items() if kind != "BF16"}
            half = [name for name, kind in dtypes.items() if kind == "BF16"]
            if half:
                torch = torch_or_none()
                if torch is None:
                    raise UsageError(f"{shown_path(path)} holds bfloat16 tensors ({half[0]!r}), which numpy cannot "
                                     "hold; install PyTorch to convert them on load, or save them as float32.")
                with safe_open(str(path), framework="pt") as handle:
                    plain.update({name: handle.get_tensor(name).float().numpy() for name in half})
    except UsageError:
        raise
    except MemoryError:
        raise UsageError(f"{shown_path(path)} would not fit in this machine's memory.") from None
    except Exception as exc:  # safetensors raises its own SafetensorError, OSError, TypeError
        raise UsageError(f"{shown_path(path)} is not a readable .safetensors file ({type(exc).__name__}).") from None
    return plain


#: The safetensors dtypes numpy reads as they are (BF16 goes through PyTorch); F8_*, C64 and others do not.
NUMPY_DTYPES = ("F64", "F32", "F16", "I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8", "BOOL")


def _refuse_unreadable(path: Path, dtypes: dict[str, str]) -> None:
    """Refuse, naming it, a tensor whose dtype numpy has no type for (float8 above all), before any is read."""
    odd = next(((name, kind) for name, kind in dtypes.items() if kind not in NUMPY_DTYPES + ("BF16",)), None)
    if odd is not None:
        name, kind = odd
        why = "attention weights are real numbers" if kind.startswith("C") else "numpy has no such type"
        raise UsageError(f"{shown_path(path)} holds {name!r} as {kind} ({why}); save the layer as F32 "
                         "(tensor.float()), which mhacli reads.")


def read_state(path: Path) -> dict[str, Any]:
    """The arrays of a weights file, by name, after the file itself was checked."""
    path = Path(path)
    _check_file(path)
    suffix = path.suffix.lower()
    if suffix in (".pt", ".pth"):
        return _read_pt(path)
    if suffix == ".safetensors":
        return _read_safetensors(path)
    return _read_npz(path)


def _is_trained(path: Path) -> bool:
    """A file written by ``mha train --save`` (its ``kind`` member says so), read from the zip's names alone."""
    from mhacli.io.archive import zip_names

    names = zip_names(path) or []
    return "kind" in names and "embedding" in names


def resolve_weights(value: str, heads: object = None, layer: object = None) -> Any:
    """``--weights VALUE`` that is not random or designed: a shipped trained model (which has its own heads and one
    layer), or AttentionWeights from a file (``layer``: one of several) with their head count; else a refusal."""
    from mhacli.attention.config import WEIGHT_KINDS
    from mhacli.attention.messages import shown
    from mhacli.models.trained import load_trained

    if value in ("trained", "grammar"):
        no_layer(layer, f"the shipped {value} model")
        return load_trained(shipped_model_path(name=value))[0]
    if value == UNTRAINED_GRAMMAR:  # the same layer before training: the shipped model's shapes and seed
        from mhacli.grammar.untrained import untrained

        no_layer(layer, "the untrained grammar model")
        return untrained(load_trained(shipped_model_path(name="grammar"))[0])
    path = Path(value)
    try:
        exists = path.exists()
    except (OSError, ValueError) as exc:  # a name the file system refuses (too long): a bad value, not a failure
        raise UsageError(f"cannot use the weights file {shown_path(path)}: "
                         f"{getattr(exc, 'strerror', None) or exc}.") from None
    if not exists and path.suffix.lower() not in SUFFIXES:
        raise UsageError(f"unknown weights {shown(value)}; choose one of: {', '.join(WEIGHT_KINDS)}, "
                         "or give the path of a weights file (.npz, .pt or .safetensors).")
    _check_file(path)
    if path.suffix.lower() == ".npz" and _is_trained(path):
        no_layer(layer, f"the trained model {shown_path(path)}")
        return load_trained(path)[0]
    return load_weights(path, heads=heads, layer=layer)


def no_layer(layer: object, what: str) -> None:
    if layer is not None:
        raise UsageError("{layer:name} picks one layer of a weights file holding several; " + what.replace(
            "{", "{{").replace("}", "}}") + " has one (drop {layer:name}).", layer=layer)


def load_weights(path: Path, heads: object = None, layer: object = None) -> AttentionWeights:
    """Your self-attention layer's weights from an npz, .pt or .safetensors file, checked, with its head count."""
    where = _where(path)
    weights = _layer_of(read_state(path), heads=heads, layer=layer, where=where)
    return replace(weights, heads=checked_heads(weights, heads, where))  # a Llama layer's g and base kept too


def own_weights(given: Any, heads: object = None, layer: object = None) -> AttentionWeights:
    """Weights passed in Python (a state dict, :class:`AttentionWeights`, anything else refused), with their heads."""
    if isinstance(given, AttentionWeights):
        weights = _checked(given)
        if layer is not None:
            no_layer(layer, "AttentionWeights")
    else:
        weights = _layer_of(given, heads=heads, layer=layer)
    return replace(weights, heads=checked_heads(weights, heads))  # a Llama layer's g and base kept too


def _layer_of(state: Any, heads: object, layer: object, where: str = "the weights") -> AttentionWeights:
    """One self-attention layer of a state dict: a Llama-style one (q_proj … o_proj) or any layout
    :func:`~mhacli.models.state_dict.from_state_dict` reads."""
    from mhacli.models.llama import from_llama, llama_layers

    if isinstance(state, Mapping) and all(isinstance(k, str) for k in state) and llama_layers(state):
        return from_llama(state, heads, layer, where)
    return from_state_dict(state, heads=heads, layer=layer, where=where)


def _checked(weights: AttentionWeights) -> AttentionWeights:
    """:class:`AttentionWeights` made in Python, each array checked as a file's are (finite, of sane size)."""
    from mhacli.models.state_dict import _array

    names = ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")
    arrays: dict[str, Any] = {name: _array(name, getattr(weights, name), "AttentionWeights")
                              for name in names if getattr(weights, name) is not None}
    return replace(weights, **arrays)
