"""The folders are the architecture: each layer imports only the layers below it.

core  numpy and the standard library (threadpoolctl for the schedule; torch only as
      verify's optional second reference)
io    + core (torch only to read your .pt weights, safetensors your .safetensors, when installed)
render+ io, rich, matplotlib (the only layer that draws or prints)
cli   + render, typer (the only layer that talks to the command line)
bench + render, apart from the product: nothing in core/io/render/cli imports it

Every import statement in the package is read (including the lazy ones inside
functions), so a late ``import rich`` in the core fails here even if no test runs it.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "mhacli"
STDLIB = set(sys.stdlib_module_names)

ALLOWED: dict[str, set[str]] = {
    "core": {"numpy", "mhacli.core", "threadpoolctl", "torch"},
    # torch only to read a .pt state dict, safetensors a .safetensors one, when installed
    "io": {"numpy", "mhacli.core", "mhacli.io", "torch", "safetensors"},
    "render": {"numpy", "mhacli.core", "mhacli.io", "mhacli.render", "rich", "matplotlib", "mpl_toolkits", "PIL"},
    "cli": {"numpy", "mhacli.core", "mhacli.io", "mhacli.render", "mhacli.cli", "mhacli.bench", "rich", "typer"},
    "bench": {"numpy", "mhacli.core", "mhacli.io", "mhacli.render", "mhacli.bench", "rich", "matplotlib",
              "threadpoolctl", "torch"},
}


def imported_modules(path: Path) -> set[str]:
    """Every module an import statement in ``path`` names (absolute; relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            if module == "mhacli":  # "from mhacli import __version__" is the package's own metadata
                continue
            names.add(module)
    return names


# Jupyter's display protocol asks the object itself (``_repr_html_``): a run and a view answer by
# handing themselves, lazily, to the one notebook renderer.  This is the only upward import.
DISPLAY_HOOKS = {("core", "mhacli.render.notebook")}


def allowed(module: str, rules: set[str]) -> bool:
    top = module.split(".")[0]
    if top in STDLIB and top != "mhacli":
        return True
    return any(module == rule or module.startswith(rule + ".") for rule in rules)


def layer_files() -> list[tuple[str, Path]]:
    return [(layer, path) for layer in ALLOWED for path in sorted((PACKAGE / layer).rglob("*.py"))]


@pytest.mark.parametrize("layer,path", layer_files(), ids=lambda v: str(v).split("mhacli/")[-1])
def test_each_module_imports_only_the_layers_below_it(layer, path):
    bad = sorted(m for m in imported_modules(path)
                 if not allowed(m, ALLOWED[layer]) and (layer, m) not in DISPLAY_HOOKS)
    assert not bad, f"{path.relative_to(PACKAGE.parent)} ({layer}) imports {bad}"


def test_every_module_lives_in_a_layer():
    """Nothing new may sit loose beside the layers (only the package's entry points do)."""
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert loose == ["__init__.py", "__main__.py"], loose


def test_the_rule_bites(tmp_path):
    """The reader sees a lazy import inside a function, so the check can fail."""
    sneaky = tmp_path / "mhacli" / "core" / "sneaky.py"
    sneaky.parent.mkdir(parents=True)
    sneaky.write_text("def f():\n    import rich\n    from matplotlib import pyplot\n")
    global PACKAGE
    saved, PACKAGE = PACKAGE, tmp_path / "mhacli"
    try:
        found = imported_modules(sneaky)
    finally:
        PACKAGE = saved
    assert {"rich", "matplotlib"} <= found
    assert not allowed("rich", ALLOWED["core"]) and not allowed("matplotlib.pyplot", ALLOWED["core"])
    assert allowed("json", ALLOWED["core"]) and not allowed("mhacli.render.theme", ALLOWED["io"])
