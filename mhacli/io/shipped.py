"""Where the models shipped inside the package lie: one module both the weights reader and the trained-model
reader import, so neither imports the other back (tests/test_imports.py finds no cycle)."""

from __future__ import annotations

from pathlib import Path

SHIPPED_MODEL = "trained.npz"  # in mhacli/data/, made by the command in docs/training.md
SHIPPED_ALONE = "trained-1-head.npz"  # the same task and command with --heads 1: mha compare's lone head


def shipped_model_path(alone: bool = False) -> Path:
    """The trained model that ships in the package (``--weights trained``), or its one-head twin."""
    from importlib import resources

    return Path(str(resources.files("mhacli") / "data" / (SHIPPED_ALONE if alone else SHIPPED_MODEL)))
