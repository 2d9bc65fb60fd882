"""Where the models shipped inside the package lie: one module both the weights reader and the trained-model
reader import, so neither imports the other back (tests/test_imports.py finds no cycle)."""

from __future__ import annotations

from pathlib import Path

#: The --weights names of the models shipped in the package.
SHIPPED_NAMES = ("trained", "grammar")
#: The seeds the shipped grammar model was chosen among (docs/training.md: the one seed whose card names a head
#: for each of the verb's three roles).
GRAMMAR_CHOSEN_AMONG = range(5)
#: The grammar model's layer before training (grammar/untrained.py): built from grammar.npz's config, not a file.
UNTRAINED_GRAMMAR = "grammar-untrained"


def shipped_model_path(alone: bool = False, name: str = "trained") -> Path:
    """A model that ships in mhacli/data/ (``--weights trained`` or ``grammar``, made by the commands in
    docs/training.md), or its one-head twin (the same command with ``--heads 1``)."""
    from importlib import resources

    file = f"{'grammar' if name == 'grammar' else 'trained'}{'-1-head' if alone else ''}.npz"
    return Path(str(resources.files("mhacli") / "data" / file))


def chosen_note(name: str | None, seed: int) -> str | None:
    """Where a shipped model's seed was chosen among others, the sentence that says so wherever its card is shown
    (issue 28: the choice disclosed); None for any other model."""
    if name != "grammar":
        return None
    among = GRAMMAR_CHOSEN_AMONG
    return (f"The shipped model is seed {seed} of seeds {among.start}–{among.stop - 1}, chosen as the one whose "
            f"card names a head for each of the verb's three roles, subject, object and recipient (docs/training.md "
            f"gives all {len(among)}; mha train --task grammar --seeds {among.start}-{among.stop - 1} trains them).")
