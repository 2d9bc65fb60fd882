"""The folders are the architecture: each room imports only the rooms below it.

attention  the article's attention: numpy and the standard library (threadpoolctl for the schedule); never the host
grammar    + attention: the grammar model, its training, report card, knockout and sweep
measures   + grammar: measures and words about a run (analysis, narrate, compare, lesson, quiz, views)
io         + measures, and every read of the host: where text comes from, where files go
models     + io: weights and models read from files (torch / safetensors only to read your files, when installed)
request    mhacli/request.py, what one command asks for (frozen data, the standard library only)
pipeline   + models, request: mhacli/pipeline.py, the one place a run is assembled into its result
render     + pipeline's result type, rich, matplotlib (the only room that draws or prints)
notebook   + render: mhacli/notebook.py, what a notebook calls (a result made once, then drawn)
bench      + render: timing, apart from the product (only the cli's `mha bench` imports it)
cli        + everything, typer (the only room that talks to the command line)
version    mhacli/version.py, the package's version: imports nothing, read by every room

Every import statement in the package is read (including the lazy ones inside
functions), so a late ``import rich`` in the attention fails here even if no test runs it.
"""

from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "mhacli"
STDLIB = set(sys.stdlib_module_names)

_ATTENTION = {"numpy", "threadpoolctl", "mhacli.attention", "mhacli.version"}  # the version: every room
_GRAMMAR = _ATTENTION | {"mhacli.grammar"}
_MEASURES = _GRAMMAR | {"mhacli.measures"}
# io names the BLAS numpy loaded (io/host.py)
_IO = _MEASURES | {"mhacli.io"}
# torch only to read a .pt state dict, safetensors a .safetensors one, when installed
_MODELS = _IO | {"mhacli.models", "torch", "safetensors"}
_PIPELINE = _MODELS | {"mhacli.request", "mhacli.pipeline"}
_RENDER = _PIPELINE - {"mhacli.request"} | {"mhacli.render", "rich", "matplotlib", "mpl_toolkits", "PIL"}
ALLOWED: dict[str, set[str]] = {
    "attention": _ATTENTION,
    "grammar": _GRAMMAR,
    "measures": _MEASURES,
    "io": _IO,
    "models": _MODELS,
    "request": {"mhacli.request"},  # what a command asks for: plain frozen data, no computation
    "version": set(),  # mhacli/version.py imports nothing
    "pipeline": _PIPELINE,
    "render": _RENDER,
    "notebook": _RENDER | {"mhacli.notebook"},
    "bench": _RENDER | {"mhacli.bench"},
    "cli": _RENDER | {"mhacli.request", "mhacli.cli", "mhacli.bench", "typer"},
}
#: The rooms that compute (a renderer takes types, constants and words from them, never a computation).
COMPUTING_ROOMS = ("attention", "grammar", "measures")
#: A layer that is one module rather than a folder.
SINGLE_FILE_LAYERS = {"notebook", "pipeline", "request", "version"}


def _parsed(path: Path) -> ast.Module:
    """``path``'s syntax tree, parsed once per worker per version of the file (its size and mtime): each of the
    280 checks here read and parsed the modules it looks at again (every renderer five times, the whole package
    for the import graph). The checks only read a tree, never change one."""
    stat = path.stat()
    return _parsed_at(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=None)
def _parsed_at(path: str, mtime_ns: int, size: int) -> ast.Module:
    return ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)


@functools.lru_cache(maxsize=None)
def _walked(node: ast.AST) -> tuple[ast.AST, ...]:
    """``ast.walk(node)``, listed once per tree (a node is its own key): the checks walk the same parsed trees
    again and again (each module's for the import graph, each renderer's for every rule), about half of this
    file's CPU when each walk went through ``ast.walk``'s queue. A tree here is never changed."""
    return tuple(ast.walk(node))


def imported_modules(path: Path) -> set[str]:
    """Every module an import statement in ``path`` names (absolute; relative imports resolved)."""
    tree = _parsed(path)
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    names: set[str] = set()
    for node in _walked(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            names.add(module)
    return names


def allowed(module: str, rules: set[str]) -> bool:
    top = module.split(".")[0]
    if top in STDLIB and top != "mhacli":
        return True
    return any(module == rule or module.startswith(rule + ".") for rule in rules)


def layer_files() -> list[tuple[str, Path]]:
    return [(layer, path) for layer in ALLOWED
            for path in ([PACKAGE / f"{layer}.py"] if layer in SINGLE_FILE_LAYERS
                         else sorted((PACKAGE / layer).rglob("*.py")))]


@pytest.mark.parametrize("layer,path", layer_files(), ids=lambda v: str(v).split("mhacli/")[-1])
def test_each_module_imports_only_the_layers_below_it(layer, path):
    bad = sorted(m for m in imported_modules(path) if not allowed(m, ALLOWED[layer]))
    assert not bad, f"{path.relative_to(PACKAGE.parent)} ({layer}) imports {bad}"


def test_every_module_lives_in_a_layer():
    """Nothing new may sit loose beside the layers (only the package's entry points do)."""
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert loose == ["__init__.py", "__main__.py", *(f"{layer}.py" for layer in sorted(SINGLE_FILE_LAYERS))], loose


def test_the_rule_bites(tmp_path):
    """The reader sees a lazy import inside a function, so the check can fail."""
    sneaky = tmp_path / "mhacli" / "attention" / "sneaky.py"
    sneaky.parent.mkdir(parents=True)
    sneaky.write_text("def f():\n    import rich\n    from matplotlib import pyplot\n")
    global PACKAGE
    saved, PACKAGE = PACKAGE, tmp_path / "mhacli"
    try:
        found = imported_modules(sneaky)
    finally:
        PACKAGE = saved
    assert {"rich", "matplotlib"} <= found
    assert not allowed("rich", ALLOWED["attention"]) and not allowed("matplotlib.pyplot", ALLOWED["attention"])
    assert allowed("json", ALLOWED["attention"]) and not allowed("mhacli.render.theme", ALLOWED["io"])
    assert not allowed("mhacli.grammar.words", ALLOWED["attention"]) and not allowed("mhacli.models", ALLOWED["io"])


# ---------------------------------------------------------------------------
# Renderers only draw: from the core they take types, constants and words, never a computation
# ---------------------------------------------------------------------------

#: What render/ may import from the computing rooms besides classes and UPPER_CASE constants: the words (narrate,
#: whose sentences the renderers ask for), the one-line messages, and how tokens are shown as labels.
RENDER_MAY_USE = {
    "mhacli.measures.narrate": {"*"},
    "mhacli.attention.messages": {"*"},
    "mhacli.attention.errors": {"*"},
    "mhacli.attention.tokenize": {"label", "labels", "graphemes"},
    "mhacli.attention.config": {"human_bytes", "about_bytes"},
    "mhacli.attention.designed": {"rules_note"},
    "mhacli.grammar.grammar": {"short_name"},  # a learned head's label in a few words
    "mhacli.attention.numbers": {"whole_number"},  # the one number rule, for a --query the user typed
    "mhacli.measures": {"narrate"},
    "mhacli.grammar.score": {"percent"},  # an accuracy as printed, one decimal
}


COMPUTING = (*(f"mhacli.{room}" for room in COMPUTING_ROOMS), "mhacli.pipeline")  # where numbers are reached


def _imported_names(path: Path) -> list[tuple[str, str]]:
    """(module, name) for every ``from <a computing room or the pipeline> import name`` in ``path``, lazy ones too."""
    tree = _parsed(path)
    return [(node.module, alias.name) for node in _walked(tree)
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(COMPUTING)
            for alias in node.names] + [
        (alias.name, "*") for node in _walked(tree) if isinstance(node, ast.Import)
        for alias in node.names if alias.name.startswith(COMPUTING)]


#: Methods of the core's result types a renderer may call: they read or format what is stored (a head's
#: words, a window's note, a dict for JSON, one layer or one head's rows of a weight matrix), computing nothing new.
#: The magnifiers' and the page's queries are ranked by the pipeline (``Window.showcase``, ``Page.start_query``),
#: and the report card's words and names by ``pipeline.card_shown`` (``CardShown``), so neither
#: ``showcase_queries`` nor the card's ``named``, ``title`` and ``caption`` is listed.
RENDER_MAY_CALL = {"describe", "note", "to_dict", "arithmetic", "head_weights", "at_layer", "astype"}

#: What narrate's sentences may take from the rest of the core and still only be words: how a row is named.
WORD_FORMATTERS = {"short_name", "long_name", "relation_words"}


@functools.lru_cache(maxsize=1)
def measuring_words() -> frozenset[str]:
    """narrate's functions that measure before they speak: each calls a computation of the core (the card's
    disagreements, the knockout's mismatches), or another such function.  The pipeline calls them, never render."""
    tree = _parsed(PACKAGE / "measures" / "narrate.py")
    functions = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    measuring = {name for name, f in functions.items() for node in _walked(f)
                 if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(COMPUTING[:-1])
                 for alias in node.names if alias.name not in WORD_FORMATTERS
                 and not _is_type_or_constant(node.module, alias.name)}
    while True:
        calling = {name for name, f in functions.items() if name not in measuring and any(
            isinstance(n, ast.Name) and n.id in measuring for n in _walked(f))}
        if not calling:
            return frozenset(measuring)
        measuring |= calling


def _computing_files() -> list[Path]:
    return sorted(p for room in COMPUTING_ROOMS for p in (PACKAGE / room).rglob("*.py"))


@functools.lru_cache(maxsize=1)
def core_methods() -> frozenset[str]:
    """The names of every method (not property) defined on a class of the computing rooms."""
    names = set()
    for path in _computing_files():
        for cls in _walked(_parsed(path)):
            if isinstance(cls, ast.ClassDef):
                names.update(f.name for f in cls.body if isinstance(f, ast.FunctionDef) and not f.name.startswith("_")
                             and not any(getattr(d, "id", None) == "property" for d in f.decorator_list))
    return frozenset(names)


def computations_called(path: Path) -> list[str]:
    """What ``path`` calls of the core's and the pipeline's computations: imported functions, result methods."""
    bad = []
    for module, name in _imported_names(path):
        if name in RENDER_MAY_USE.get(module, ()) or "*" in RENDER_MAY_USE.get(module, ()):
            continue
        if name != "*" and _is_type_or_constant(module, name):
            continue
        bad.append(f"{module}.{name}")
    methods = core_methods() - RENDER_MAY_CALL
    tree = _parsed(path)
    bad += [f".{n.func.attr}()" for n in _walked(tree) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute) and n.func.attr in methods]
    words = measuring_words()
    bad += [f"narrate.{name}" for module, name in _imported_names(path)
            if module == "mhacli.measures.narrate" and name in words]
    bad += [f"narrate.{n.attr}" for n in _walked(tree) if isinstance(n, ast.Attribute) and n.attr in words
            and getattr(n.value, "id", None) == "narrate"]
    return bad


@functools.lru_cache(maxsize=1)
def deciding_properties() -> frozenset[str]:
    """The core's properties that decide with the evidence module's thresholds (the one rule against chance), or
    read another that does: a word such a property gives is a verdict, computed when its object is made and
    read from a field, never worked out in a renderer's reach (``Knockout.matters`` was one)."""
    bodies: dict[str, list[ast.FunctionDef]] = {}
    for path in _computing_files():
        for cls in _walked(_parsed(path)):
            if isinstance(cls, ast.ClassDef):
                for f in cls.body:
                    if isinstance(f, ast.FunctionDef) and any(getattr(d, "id", None) == "property"
                                                              for d in f.decorator_list):
                        bodies.setdefault(f.name, []).append(f)
    deciding = {name for name, fs in bodies.items() for f in fs for n in _walked(f)
                if isinstance(n, ast.Name) and n.id == "evidence"
                or isinstance(n, ast.ImportFrom) and n.module == "mhacli.attention" and any(a.name == "evidence"
                                                                                       for a in n.names)}
    while True:
        reading = {name for name, fs in bodies.items() if name not in deciding for f in fs for n in _walked(f)
                   if isinstance(n, ast.Attribute) and n.attr in deciding}
        if not reading:
            return frozenset(deciding)
        deciding |= reading


def properties_deciding(path: Path) -> list[str]:
    """Which of :func:`deciding_properties` ``path`` reads (by name: a field of the same name elsewhere would be
    caught too, and renamed)."""
    tree = _parsed(path)
    return sorted({f".{n.attr}" for n in _walked(tree) if isinstance(n, ast.Attribute)
                   and n.attr in deciding_properties()})


def evidence_thresholds() -> frozenset[str]:
    """The evidence rule's numbers (mhacli/attention/evidence.py's numeric constants: shares, margins, points)."""
    from mhacli.attention import evidence

    return frozenset(name for name, value in vars(evidence).items() if name.isupper()
                     and isinstance(value, (int, float)) and not isinstance(value, bool))


def thresholds_read(path: Path) -> list[str]:
    """Which of the evidence rule's numbers ``path`` names (as ``evidence.X``, ``narrate.X`` or imported): a
    renderer that compares against one decides a word itself; the verdict belongs in the run."""
    tree = _parsed(path)
    names = {n.attr for n in _walked(tree) if isinstance(n, ast.Attribute)}
    names |= {n.id for n in _walked(tree) if isinstance(n, ast.Name)}
    return sorted(names & evidence_thresholds())


def _is_type_or_constant(module: str, name: str) -> bool:
    import importlib
    import inspect

    value = getattr(importlib.import_module(module), name, None)
    return inspect.isclass(value) or (name.isupper() and not callable(value))


@pytest.mark.parametrize("path", sorted((PACKAGE / "render").rglob("*.py")), ids=lambda p: str(p).split("mhacli/")[-1])
def test_renderers_call_no_computation_of_the_core(path):
    where = str(path.relative_to(PACKAGE))
    bad = computations_called(path)
    assert not bad, f"{where} calls the core's computations {bad}: put the numbers in the pipeline's result"


@pytest.mark.parametrize("path", sorted((PACKAGE / "render").rglob("*.py")), ids=lambda p: str(p).split("mhacli/")[-1])
def test_renderers_read_no_property_that_decides_against_chance(path):
    where = str(path.relative_to(PACKAGE))
    bad = properties_deciding(path)
    assert not bad, f"{where} reads {bad}, worked out against the evidence rule when read: store it when made"


@pytest.mark.parametrize("path", sorted((PACKAGE / "render").rglob("*.py")), ids=lambda p: str(p).split("mhacli/")[-1])
def test_renderers_compare_against_no_threshold_of_the_evidence_rule(path):
    where = str(path.relative_to(PACKAGE))
    bad = thresholds_read(path)
    assert not bad, f"{where} reads the evidence rule's {bad}: decide the word where the run is made, read it here"


def test_a_planted_threshold_in_a_renderer_is_caught(tmp_path):
    """terminal.grammar_panel once bolded a cell when its weight reached narrate.ANSWER_SHARE (now Look.answered)."""
    assert {"ANSWER_SHARE", "KNOCKOUT_POINTS", "MOSTLY"} <= evidence_thresholds()
    planted = tmp_path / "planted.py"
    planted.write_text("from mhacli.attention import evidence\nfrom mhacli.measures import narrate\n\n\n"
                       "def bold(w, cost):\n"
                       "    return w >= narrate.ANSWER_SHARE or cost >= evidence.KNOCKOUT_POINTS\n")
    assert thresholds_read(planted) == ["ANSWER_SHARE", "KNOCKOUT_POINTS"]


def test_a_planted_deciding_property_read_is_caught(tmp_path):
    """The properties that apply the evidence rule are found (and those that read them), and a renderer that
    reads one fails; the knockout's verdicts are fields now, made with it."""
    assert {"near_chance", "close_to_uniform"} <= deciding_properties()
    assert "matters" not in deciding_properties() and "num_heads" not in deciding_properties()
    planted = tmp_path / "planted.py"
    planted.write_text("def draw(analysis, knock):\n"
                       "    return analysis.close_to_uniform, analysis.heads[0].near_chance, knock.matters\n")
    assert properties_deciding(planted) == [".close_to_uniform", ".near_chance"]


def test_a_planted_computation_in_a_renderer_is_caught(tmp_path):
    """A renderer that measures for itself fails the check: through the pipeline, the core, or a result's method."""
    planted = tmp_path / "planted.py"
    planted.write_text("def draw(run):\n"
                       "    from mhacli.pipeline import result_of\n"
                       "    from mhacli.measures.analysis import analyse\n"
                       "    from mhacli.pipeline import Run\n"
                       "    return result_of(run.trace), analyse(run.trace), run.trace.split_equals_direct()\n")
    assert computations_called(planted) == ["mhacli.pipeline.result_of", "mhacli.measures.analysis.analyse",
                                            ".split_equals_direct()"]


def test_a_planted_card_word_in_a_renderer_is_caught(tmp_path):
    """The report card's names, titles and caption, and narrate's sentences that measure the card against a
    sentence or a knockout, are the pipeline's to compute (``pipeline.card_shown``): a renderer asking is caught."""
    planted = tmp_path / "planted.py"
    planted.write_text("from mhacli.measures import narrate\n"
                       "from mhacli.measures.narrate import knockout_sentences\n\n\n"
                       "def draw(card, parse, weights, knock):\n"
                       "    return (card.named(0, 0), card.title(0), card.caption(), knockout_sentences(card, knock),\n"
                       "            narrate.card_sentence_lines(card, parse, weights), narrate.card_row_name('a'))\n")
    assert measuring_words() >= {"card_sentence_lines", "knockout_sentences"}
    assert "card_row_name" not in measuring_words() and "mapped_words" not in measuring_words()
    assert computations_called(planted) == [".named()", ".title()", ".caption()", "narrate.knockout_sentences",
                                            "narrate.card_sentence_lines"]


# ---------------------------------------------------------------------------
# No import cycle anywhere
# ---------------------------------------------------------------------------


def _module_name_in(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path | None = None) -> dict[str, set[str]]:
    """Module -> the mhacli modules it imports, every import statement counted: at the top, inside functions
    (lazy), relative; a ``from pkg import name`` of a submodule counts as that module.  Only the imports under
    ``if TYPE_CHECKING:`` are left out: they never run."""
    package = package or PACKAGE
    paths = {_module_name_in(p, package): p for p in sorted(package.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        targets = set()
        tree = _parsed(path)
        typing_only = {id(n) for block in _walked(tree) if isinstance(block, ast.If)
                       and getattr(block.test, "id", None) == "TYPE_CHECKING" for n in _walked(block)}
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _walked(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names if a.name in paths)
            elif isinstance(node, ast.ImportFrom):
                base = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                module = (f"{base}.{node.module}" if node.module else base) if node.level else node.module or ""
                if module in paths:
                    targets.add(module)
                targets.update(f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in paths)
        graph[name] = {t for t in targets if t != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (as a path that ends where it starts), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


# Pairs of modules allowed to import each other: none.
LEAVING: set[tuple[str, str]] = set()


def test_no_import_cycle_anywhere():
    """Lazy imports inside functions count too, and so do package ``__init__``s: ``from mhacli.cli import build``
    runs mhacli/cli/__init__.py, so a package whose ``__init__`` imports a module that imports the package back
    is a circle (mhacli.cli -> cli.app -> cli.commands.classroom -> mhacli.cli was one)."""
    cycle = find_cycle({m: {t for t in ts if (m, t) not in LEAVING}
                        for m, ts in import_graph().items()})
    assert cycle is None, " -> ".join(cycle or [])


def test_a_lazy_import_inside_a_function_makes_a_cycle(tmp_path):
    """The graph holds the imports inside functions and the relative ones: a planted lazy cycle is found."""
    root = tmp_path / "mhacli"
    for folder in ("core", "render"):
        (root / folder).mkdir(parents=True)
        (root / folder / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "core" / "lazy.py").write_text("def f():\n    from mhacli.render.page import g\n")
    (root / "render" / "page.py").write_text("from ..core import lazy\n\ndef g():\n    return lazy\n")
    graph = import_graph(root)
    assert graph["mhacli.core.lazy"] == {"mhacli.render.page"} and "mhacli.core.lazy" in graph["mhacli.render.page"]
    assert find_cycle(graph) == ["mhacli.core.lazy", "mhacli.render.page", "mhacli.core.lazy"]


def test_the_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


#: What reads the host (cores, address space, /proc): io/host.py's business, never the core's.
HOST_READS = {"sched_getaffinity", "getrlimit", "cpu_count", "environ", "getenv"}


def host_reads(path: Path) -> list[str]:
    """Every read of the host in ``path``: the calls above, ``import resource``, a '/proc' path."""
    tree = _parsed(path)
    found = [n.attr for n in _walked(tree) if isinstance(n, ast.Attribute) and n.attr in HOST_READS]
    found += ["resource" for n in _walked(tree) if isinstance(n, ast.Import)
              for a in n.names if a.name == "resource"]
    found += [n.value for n in _walked(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
              and n.value.startswith("/proc")]
    return found


@pytest.mark.parametrize("path", _computing_files(), ids=lambda p: p.name)
def test_the_core_never_reads_the_host(path):
    assert not host_reads(path), f"{path.name} reads the host: {host_reads(path)} (read it in io/host.py)"


def test_the_host_check_bites():
    assert set(host_reads(PACKAGE / "io" / "host.py")) >= {"sched_getaffinity", "getrlimit", "/proc/self/status"}
