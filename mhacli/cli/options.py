"""Every option and argument of ``mha``, declared once as an ``Annotated`` alias with its help, panel and metavar,
so ``--heads`` reads the same in every command's help; the model defaults come from Config, never restated.
"""

from __future__ import annotations

import functools
import inspect
import typing
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any, Callable, Optional, Sequence

import typer

from mhacli.attention.config import DTYPES, TOKENIZERS, WEIGHT_KINDS, Config
from mhacli.attention.numbers import BOUND, RULE, SEED_RULE, TOO_BIG, TOO_SMALL, too_big, whole_number
from mhacli.request import ModelOptions

#: Config's field defaults (``DEFAULT.heads`` is 4): the one place the model defaults come from.
DEFAULT = SimpleNamespace(**{f.name: f.default for f in fields(Config)})


#: Defaults of the options that are not model settings.
OUT_DIR = Path("mha-output")
MAX_TOKENS = 40
FORMAT = "png"

#: Flags take no value, so none is shown in --help (Typer would write "<bool>").
FLAG = ""


class NotWholeNumber(typer.BadParameter):
    """A value of an integer option outside the one rule (worded by :func:`mhacli.cli.messages.bad_parameter`)."""

    def __init__(self, typed: str, rule: str = RULE, example: bool = True) -> None:
        super().__init__(rule)
        self.typed, self.example = typed, example


def whole_option(value: str | int | None, low: int = -BOUND) -> int | None:
    """The parser of every integer option: the rule every number shares (:func:`~mhacli.attention.numbers.
    whole_number`), then ``value >= low``; each option's own range is checked by the core, in its own words."""
    if value is None or isinstance(value, int) and not isinstance(value, bool):  # a default: None or a number
        return value
    number = whole_number(str(value))
    if number is None:
        if not too_big(str(value)):
            raise NotWholeNumber(str(value))
        below = str(value).strip().startswith("-")  # out of bounds on the negative side: say that side's bound
        rule = (TOO_SMALL if low == -BOUND else f"at least {low}") if below else TOO_BIG
        raise NotWholeNumber(str(value), rule, example=False)
    if number < low:  # typer applies no min= to a parsed option: the bound is checked here
        raise NotWholeNumber(str(number), f"at least {low}", example=False)
    return number


class EmptyName(typer.BadParameter):
    """A path option given as '' (an unset ``--out "$DIR"``): Path('') is '.', so files would land there unasked."""

    def __init__(self, folder: bool) -> None:
        super().__init__("empty")
        self.folder = folder


def _named(value: object, folder: bool) -> object:
    if isinstance(value, str) and value == "":
        raise EmptyName(folder)
    return value


def folder_option(value: str | Path | None) -> Path | None:
    """``--out``: a folder's name; '' is refused (:class:`EmptyName`), not read as the current folder."""
    _named(value, folder=True)
    return None if value is None else Path(value)


def file_option(value: str | Path | None) -> Path | None:
    """``--file``: a file's name; '' is refused, not read as '.' (the saved-run arguments keep Typer's Path, whose
    '' reaches them as '.', then called a folder: a parser would show <Path> in their --help)."""
    _named(value, folder=False)
    return None if value is None else Path(value)


def file_name_option(value: str | None) -> str | None:
    """A file written or read by name, kept as text (a trailing '/' must reach the output plan): '' refused."""
    _named(value, folder=False)
    return value


def seed_option(value: str | int | None) -> int | None:
    """``--seed``: the one rule, except that a negative number too long to read is told the seed's own range
    (the config's words, from 0), not the bound of every number."""
    if isinstance(value, str) and value.strip().startswith("-") and too_big(value):
        raise NotWholeNumber(value, SEED_RULE, example=False)
    return whole_option(value)


def positive_option(value: str | int | None) -> int | None:
    """An integer option that is at least 1 (``--max-tokens``)."""
    return whole_option(value, low=1)


def _starting(choices: Sequence[str], incomplete: str) -> list[str]:
    return [c for c in choices if c.startswith(incomplete)]


def complete_sample(incomplete: str) -> list[str]:
    """Shell completion of --sample: the shipped samples' names."""
    from mhacli.io.samples import sample_names

    return _starting(sample_names(), incomplete)


def complete_tokenizer(incomplete: str) -> list[str]:
    """Shell completion of --tokenizer."""
    return _starting(TOKENIZERS, incomplete)


WEIGHT_FILES = (".npz", ".pt", ".pth", ".safetensors")


def complete_weights(incomplete: str) -> list[str]:
    """Shell completion of --weights: the named kinds, then weight files (and folders) matching what is typed."""
    import glob
    import os

    files = [p + (os.sep if os.path.isdir(p) else "") for p in sorted(glob.glob(glob.escape(incomplete) + "*"))
             if os.path.isdir(p) or p.endswith(WEIGHT_FILES)]
    return _starting(WEIGHT_KINDS, incomplete) + files


def complete_task(incomplete: str) -> list[str]:
    """Shell completion of mha train --task."""
    return _starting(TASK_NAMES, incomplete)


# Panels group the options in --help, so a long option list stays readable on a projector.
INPUT, MODEL, OUTPUT, FIGURES, BENCH, TRAINING = "Input", "Model", "Output", "Figures", "Bench", "Training"

# readable=False on paths: mhacli.io says what is wrong with a file, and how to fix it, in one line.

# --- input ---------------------------------------------------------------------------------------
TextArg = Annotated[Optional[str], typer.Argument(
    help="The text to explain, in quotes; '-' reads standard input.", show_default=False)]
FileOpt = Annotated[Optional[Path], typer.Option(
    "--file", "-f", help="Read the text from a UTF-8 file.", show_default=False, readable=False,
    metavar="PATH", rich_help_panel=INPUT,
    parser=file_option)]
SampleOpt = Annotated[Optional[str], typer.Option(
    "--sample", help="Use one of the ready-made texts (see 'mha samples').", show_default=False,
    metavar="TEXT", rich_help_panel=INPUT, autocompletion=complete_sample)]
TokenizerOpt = Annotated[str, typer.Option(
    "--tokenizer", "-t", help=f"How to split the text: {', '.join(TOKENIZERS)}.", metavar="TEXT",
    rich_help_panel=INPUT, autocompletion=complete_tokenizer)]
TraceArg = Annotated[Path, typer.Argument(
    help="An .npz file written by 'mha explain --save-npz'.", show_default=False, readable=False, metavar="FILE")]
ShowFileArg = Annotated[Path, typer.Argument(
    help="An .npz written by 'mha explain --save-npz', or your model's attention: 'weights' and 'tokens' "
    "(docs/your-model.md in mhacli's source).", show_default=False, readable=False, metavar="FILE")]
SampleNameArg = Annotated[Optional[str], typer.Argument(
    help="Show this sample's text and tokens instead of the list.", show_default=False)]

# --- model ---------------------------------------------------------------------------------------
HeadsOpt = Annotated[int, typer.Option("--heads", "-H", help="Number of heads h.", metavar="N",
                                       rich_help_panel=MODEL, parser=whole_option)]
DModelOpt = Annotated[int, typer.Option("--d-model", "-d", help="Model width d (divisible by --heads).",
                                        metavar="N", rich_help_panel=MODEL, parser=whole_option)]
SeedOpt = Annotated[int, typer.Option("--seed", "-s", help="Seed for the embedding and the weights.",
                                      metavar="N", rich_help_panel=MODEL, parser=seed_option)]
PositionsOpt = Annotated[bool, typer.Option(
    "--positions/--no-positions", metavar=FLAG, help="Add sinusoidal positional encoding to the embedding.",
    rich_help_panel=MODEL)]
CausalOpt = Annotated[bool, typer.Option(
    "--causal/--no-causal", metavar=FLAG,
    help="Let each token attend only to itself and earlier tokens.", rich_help_panel=MODEL)]
WeightsOpt = Annotated[str, typer.Option(
    "--weights", "-w", metavar="TEXT", rich_help_panel=MODEL, autocompletion=complete_weights,
    help=f"Weights: {', '.join(WEIGHT_KINDS)} (designed = heads built by hand to follow named rules), or "
         "the path of your own model's weights (.npz, .pt or .safetensors: an nn.MultiheadAttention, a "
         "TransformerEncoder, BERT or GPT-2 state dict; d is read from the file).")]
WordsOpt = Annotated[Optional[list[str]], typer.Option(
    "--words", show_default=False, metavar="WORD=CLASS", rich_help_panel=MODEL,
    help="With --weights grammar: read a new word as a word of a grammar class, e.g. \"park=place lion=animal\" "
         "(classes: male, female, animal, place, thing, adjective); the model reads it as a word of that class "
         "the sentence does not use. Repeat or space-separate.")]
DtypeOpt = Annotated[str, typer.Option("--dtype", help=f"Float type of the core: {', '.join(DTYPES)}.",
                                       metavar=f"[{'|'.join(DTYPES)}]", rich_help_panel=MODEL)]
TokensOpt = Annotated[int, typer.Option("--tokens", "-n", help="Number of tokens N (no text needed).",
                                        metavar="N", parser=whole_option)]

# --- shapes: heads that share keys and values, and the cache (issue 45) -----------------------------
KvHeadsOpt = Annotated[Optional[int], typer.Option(
    "--kv-heads", show_default=False, metavar="N", rich_help_panel=MODEL, parser=whole_option,
    help="Key/value heads g the h query heads share (g divides h): h is multi-head attention (the default), "
    "1 multi-query, between them grouped-query.")]
LayersOpt = Annotated[Optional[int], typer.Option(
    "--layers", show_default=False, metavar="N", rich_help_panel=MODEL, parser=whole_option,
    help="Layers L whose keys and values the cache holds (default 1, or the config's).")]
CacheDtypeOpt = Annotated[Optional[str], typer.Option(
    "--dtype", show_default=False, metavar="TEXT", rich_help_panel=MODEL,
    help="Number type of the cache: float64, float32, float16 (the default, or the config's torch_dtype), "
    "bfloat16, float8, int8.")]
ModelConfigOpt = Annotated[Optional[Path], typer.Option(
    "--config", show_default=False, metavar="PATH", readable=False, rich_help_panel=MODEL, parser=file_option,
    help="A model's Hugging Face config.json, read for d, h, g, L, head_dim and torch_dtype "
    "(and kv_lora_rank for a latent cache); nothing is downloaded.")]

# The same words as --layer of an attention file, for a weights file holding several layers (issue 22).
WeightsLayerOpt = Annotated[Optional[str], typer.Option(
    "--layer", show_default=False, metavar="TEXT", rich_help_panel=MODEL,
    help="With --weights FILE holding several layers (a TransformerEncoder, BERT or GPT-2 state dict): which "
         "layer's self-attention to run: its number, counted from 0 as the model's module names count them (layers.0 "
         "is 0), or its name.")]

# --- the model-option block ----------------------------------------------------------------------
# The options of every command that runs a model, each None unless given (then the weights or Config's default
# decide, as the help says). A new one is an entry here and a field of mhacli.request.ModelOptions.

def _not_given(alias: Any, default: object, decided: bool = True) -> Any:
    """``alias`` as a model option: None unless given, its help naming ``default`` (``decided``: or the weights')."""
    import copy

    base, info = typing.get_args(alias)
    info = copy.copy(info)
    info.help = f"{info.help} Default {default}" + (", or what --weights brings." if decided else ".")
    info.show_default = False
    return Annotated[Optional[base], info]


MODEL_BLOCK: dict[str, Any] = {
    "heads": _not_given(HeadsOpt, DEFAULT.heads),
    "d_model": _not_given(DModelOpt, DEFAULT.d_model),
    "seed": _not_given(SeedOpt, DEFAULT.seed),
    "tokenizer": _not_given(TokenizerOpt, DEFAULT.tokenizer, decided=False),
    "positions": _not_given(PositionsOpt, "--positions"),
    "causal": _not_given(CausalOpt, "--no-causal"),
    "weights": _not_given(WeightsOpt, DEFAULT.weights, decided=False),
    "layer": WeightsLayerOpt,
    "words": WordsOpt,  # None unless given, as every model option
    "dtype": _not_given(DtypeOpt, DEFAULT.dtype, decided=False),
    "kv_heads": KvHeadsOpt,  # None unless given: then g = h, as its help says
}
assert set(MODEL_BLOCK) == {f.name for f in fields(ModelOptions)}, "one field of ModelOptions per model option"


def unless_given(alias: Any, default: object = None) -> Any:
    """``alias``, None unless given, its help showing ``default`` (None: a flag whose help shows no default)."""
    import copy

    base, info = typing.get_args(alias)
    info = copy.copy(info)
    info.show_default = False if default is None else str(default)
    return Annotated[Optional[base], info]


#: The quiz's --seed: with a trained model it picks the questions only (the model brings its own weights).
QUIZ_SEED = _not_given(Annotated[int, typer.Option(
    "--seed", "-s", help="Seed for the questions; with random or designed weights, for the embedding and the "
                         "weights too (a trained model or a file brings its own, and the seed picks the questions "
                         "only).", metavar="N", rich_help_panel=MODEL, parser=seed_option)], DEFAULT.seed,
    decided=False)


def model_block(*names: str, helps: dict[str, Any] | None = None) -> Callable[[Callable[..., None]],
                                                                             Callable[..., None]]:
    """The command's parameter ``model`` becomes the options ``names`` (default: all of :data:`MODEL_BLOCK`), handed
    to it as one ModelOptions; ``helps`` declares an option that means something else there (the quiz's --seed)."""
    chosen = names or tuple(MODEL_BLOCK)
    declared = {**MODEL_BLOCK, **(helps or {})}

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        hints = typing.get_type_hints(command, localns={"ModelOptions": ModelOptions}, include_extras=True)
        params = [p.replace(annotation=hints.get(p.name, p.annotation))
                  for p in inspect.signature(command).parameters.values()]
        at = next(i for i, p in enumerate(params) if p.name == "model")
        block = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                                   annotation=declared[name]) for name in chosen]
        params[at:at + 1] = block

        @functools.wraps(command)
        def with_model(**values: Any) -> None:
            model = ModelOptions(**{name: values.pop(name) for name in chosen})
            command(model=model, **values)

        with_model.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        with_model.__annotations__ = {p.name: p.annotation for p in params}
        return with_model

    return decorate


# --- output --------------------------------------------------------------------------------------
WorkedOpt = Annotated[bool, typer.Option(
    "--worked", metavar=FLAG, rich_help_panel=OUTPUT,
    help="Print a hand-sized example (3 tokens, d = 4, h = 2, whole-number weights) with every matrix, "
         "to redo each product by hand; --seed and --causal apply, the text is not needed.")]
ShowValuesOpt = Annotated[bool, typer.Option(
    "--show-values", metavar=FLAG,
    help="Print the actual matrices (rounded) for short inputs.", rich_help_panel=OUTPUT)]
# File outputs are read as text, not Path: Path('keep.txt/') drops the '/', which names a folder and must
# reach mhacli.io.outputs.plan_outputs to be refused.
SaveNpzOpt = Annotated[Optional[str], typer.Option(
    "--save-npz", help="Save every array of the run to this .npz file.", show_default=False, readable=False,
    metavar="PATH", rich_help_panel=OUTPUT,
    parser=file_name_option)]
JsonOpt = Annotated[bool, typer.Option(
    "--json", metavar=FLAG, rich_help_panel=OUTPUT,
    help="Print one JSON document (config, steps, arrays) on stdout and nothing else there, and write no "
    "figures unless --out or --format asks for them (the files written are then listed on stderr).")]
JsonArraysOpt = Annotated[Optional[bool], typer.Option(  # None: not given (then every array)
    "--json-arrays/--no-json-arrays", metavar=FLAG, rich_help_panel=OUTPUT, show_default=False,
    help="With --json: every array (the default), or none, for a small document (--save-npz keeps the arrays).")]
NumbersJsonOpt = Annotated[bool, typer.Option(
    "--json", metavar=FLAG,
    help="Print the measured numbers as one JSON document and nothing else.", rich_help_panel=OUTPUT)]
ListJsonOpt = Annotated[bool, typer.Option(  # samples and quiz measure nothing: they list texts and questions
    "--json", metavar=FLAG,
    help="Print the same content as one JSON document and nothing else.", rich_help_panel=OUTPUT)]
HtmlOpt = Annotated[Optional[str], typer.Option(
    "--html", show_default=False, readable=False, metavar="PATH", rich_help_panel=OUTPUT,
    help="Also write one self-contained interactive page (opens offline in any browser; "
    "up to 200 tokens, or --max-tokens when given).",
    parser=file_name_option)]
MaxTokensOpt = Annotated[Optional[int], typer.Option(  # None: not given (40 here, the page's own 200 in --html)
    "--max-tokens", min=1, metavar="N", rich_help_panel=OUTPUT, show_default=False,
    help=f"Show at most this many tokens in tables and figures (long texts are windowed). Default {MAX_TOKENS}.",
    parser=positive_option)]
HideRulesOpt = Annotated[bool, typer.Option(
    "--hide-rules", metavar=FLAG, rich_help_panel=OUTPUT,
    help="Hide the names of rules and of the relations heads follow, for the 'name what each head does' "
    "activity: only positions and numbers are shown.")]
QuietOpt = Annotated[bool, typer.Option(
    "--quiet", metavar=FLAG, rich_help_panel=OUTPUT,
    help="Print nothing but errors (and the --json document): no walkthrough, tables, notes or file list; "
    "files are still written.")]
VerifyQuietOpt = Annotated[bool, typer.Option(  # verify writes no file: its --quiet must not promise any
    "--quiet", metavar=FLAG, rich_help_panel=OUTPUT,
    help="Print nothing but errors (and the --json document); the exit code still says whether the file "
    "checks out (0) or not (1).")]
MarkdownOpt = Annotated[bool, typer.Option(
    "--markdown", metavar=FLAG,
    help="Print the tables as Markdown, to paste into slides or notes.", rich_help_panel=OUTPUT)]

# --- figures -------------------------------------------------------------------------------------
OutOpt = Annotated[Path, typer.Option(
    "--out", "-o", readable=False, metavar="PATH", rich_help_panel=FIGURES,
    help="Folder for the figures (created if missing); only the tool's own file names are written there.",
    parser=folder_option)]
LessonOutOpt = Annotated[Optional[Path], typer.Option(
    "--out", "-o", show_default=False, readable=False, metavar="PATH", rich_help_panel=FIGURES,
    help="Also save the figures (a heat map per head, all heads, the magnifiers) into this folder "
    "after the lesson; nothing is written without it.",
    parser=folder_option)]
PlotsOpt = Annotated[bool, typer.Option(
    "--plots/--no-plots", metavar=FLAG, help="Save the figures (heatmap per head, all heads, magnifiers) into --out.",
    rich_help_panel=FIGURES)]
# explain, show and compare: None unless typed, so that a --json run writes figures only when one of them asks.
FiguresOutOpt = Annotated[Optional[Path], typer.Option(
    "--out", "-o", readable=False, metavar="PATH", rich_help_panel=FIGURES, show_default=False,
    help="Folder for the figures (created if missing); only the tool's own file names are written there. Default "
         "mha-output; with --json, figures are written only when --out or --format is given.",
    parser=folder_option)]
FiguresFormatOpt = Annotated[Optional[str], typer.Option(
    "--format", help="Figure format: png, svg or pdf. Default png.", metavar="TEXT", rich_help_panel=FIGURES,
    show_default=False)]
DpiOpt = Annotated[int, typer.Option("--dpi", help="Resolution of png figures, in dots per inch (30 to 600).",
                                     metavar="N", rich_help_panel=FIGURES, parser=whole_option)]
QueryOpt = Annotated[Optional[str], typer.Option(
    "--query", "-q", show_default=False, metavar="TEXT", rich_help_panel=FIGURES,
    help="Shade the magnifier picture by what this token looks at: a 0-based position or the token's text "
    "(default: the few queries where the heads' top tokens differ most).")]
LayerOpt = Annotated[Optional[str], typer.Option(
    "--layer", show_default=False, metavar="TEXT", rich_help_panel=FIGURES,
    help="Which layer of an attention file to draw: its number, counted from 0 as outputs.attentions[0] is the "
         "first, or its name (default: layer 0).")]
RawTokensOpt = Annotated[bool, typer.Option(
    "--raw-tokens", metavar=FLAG, rich_help_panel=FIGURES,
    help="Show an attention file's tokens as its tokenizer wrote them (Ġcat, ▁the, ##ing, Ċ); by default the "
    "markers are read as text (cat, the, -ing, ↵).")]
BatchIndexOpt = Annotated[Optional[int], typer.Option(
    "--batch-index", show_default=False, metavar="N", rich_help_panel=FIGURES,
    help="Which sequence of an attention file holding a batch (batch, heads, N, N) to draw (0 = first).",
    parser=whole_option)]

# --- classroom -----------------------------------------------------------------------------------
LessonQueryOpt = Annotated[Optional[str], typer.Option(
    "--query", "-q", show_default=False, metavar="TEXT", rich_help_panel=FIGURES,
    help="The token the lesson zooms in on: a 0-based position or the token's text "
    "(default: the second copy of the first repeated word, else the last word).")]
PauseOpt = Annotated[bool, typer.Option(
    "--pause/--no-pause", metavar=FLAG, help="Wait for Enter between steps (only when standard input is a terminal).")]
StepOpt = Annotated[int, typer.Option("--step", help="Start the lesson at this step (1 = the beginning).",
                                      metavar="N", parser=whole_option)]
QuestionsOpt = Annotated[int, typer.Option("--questions", help="How many questions to ask (1 to 20).", metavar="N",
                                          parser=whole_option)]
AnswersOpt = Annotated[bool, typer.Option("--answers", metavar=FLAG, help="Print the answers under the questions.")]

# --- bench ---------------------------------------------------------------------------------------
BenchMaxTokensOpt = Annotated[int, typer.Option(
    "--max-tokens", metavar="N", rich_help_panel=BENCH,
    help="Largest N to time: 16, 32, … up to this (4096 is the size of the performance goals).", parser=whole_option)]
RepeatsOpt = Annotated[int, typer.Option(
    "--repeats", "-r", metavar="N", rich_help_panel=BENCH,
    help="Timed runs of each contender per N, after one warm-up; the median is shown.", parser=whole_option)]
BlockedOpt = Annotated[bool, typer.Option(
    "--blocked", metavar=FLAG, rich_help_panel=BENCH,
    help="Time the outputs alone, the weights made a block of rows at a time: memory grows with N instead "
    "of N², so --max-tokens can go far higher.")]
PlotOpt = Annotated[bool, typer.Option(
    "--plot", metavar=FLAG, rich_help_panel=FIGURES,
    help="Also save bench.png into --out: time against N on log-log axes, the N² part marked.")]
BenchTrainOpt = Annotated[bool, typer.Option(
    "--train", metavar=FLAG, rich_help_panel=BENCH,
    help="Time instead one training step of the default 'mha train' model in numpy, beside the same model "
    "in PyTorch autograd when PyTorch is installed: --repeats blocks of 50 steps each, interleaved.")]
TilesOpt = Annotated[bool, typer.Option(
    "--tiles", metavar=FLAG, rich_help_panel=BENCH,
    help="Measure instead the peak memory of one head's attention against N (256 … --max-tokens, 8192 unless "
    "given), computed whole (N×N) and in tiles of 256 keys (N×B), as fast kernels do.")]
StartupOpt = Annotated[bool, typer.Option(
    "--startup", metavar=FLAG, rich_help_panel=BENCH,
    help="Time instead how long 'mha explain' takes to show its first line and to draw its figures, in fresh "
    "processes beside one that only imports numpy, matplotlib.figure, rich and typer; prints both start-up ratios.")]

# --- training (mha train) ------------------------------------------------------------------------
# Shown in --help without importing numpy; tests/test_train_cli.py checks them against the core's TrainConfig.
TASK_NAMES = ("neighbours", "relations", "grammar")
TRAIN_DEFAULTS: dict = dict(task="neighbours", heads=4, d_model=16, steps=1500, batch=64, lr=0.02, seed=0)
TRAIN_MOST: dict = dict(steps=100_000, batch=4_096)  # the core's TRAIN_LIMITS, for the help
GRAMMAR_DEFAULTS: dict = dict(d_model=32, steps=3000, lr=0.01)  # the grammar task's own (grammar/tasks.py)


def _task_default(name: str) -> str:
    return f"default {TRAIN_DEFAULTS[name]:g}, {GRAMMAR_DEFAULTS[name]:g} for --task grammar"


TaskOpt = Annotated[str, typer.Option(
    "--task", metavar="NAME", rich_help_panel=TRAINING, help=f"What to learn: {', '.join(TASK_NAMES)}.",
    autocompletion=complete_task)]
BenchTaskOpt = Annotated[str, typer.Option(
    "--task", metavar="NAME", rich_help_panel=BENCH,
    help=f"With --train: time the model of 'mha train --task NAME' ({', '.join(TASK_NAMES)}).",
    autocompletion=complete_task)]
TrainHeadsOpt = Annotated[int, typer.Option(
    "--heads", "-H", metavar="H", rich_help_panel=TRAINING, help="Number of heads h (ignored with --compare).",
    parser=whole_option)]
TrainDModelOpt = Annotated[Optional[int], typer.Option(
    "--d-model", "-d", metavar="D", rich_help_panel=TRAINING, show_default=False,
    help=f"Model width d (divisible by every head count; {_task_default('d_model')}).", parser=whole_option)]
StepsOpt = Annotated[Optional[int], typer.Option(
    "--steps", metavar="S", rich_help_panel=TRAINING, show_default=False,
    help=f"Training steps (one batch each), at most {TRAIN_MOST['steps']:,} ({_task_default('steps')}).",
    parser=whole_option)]
BatchOpt = Annotated[int, typer.Option(
    "--batch", metavar="B", rich_help_panel=TRAINING,
    help=f"Sequences per training step, at most {TRAIN_MOST['batch']:,}.", parser=whole_option)]
LrOpt = Annotated[Optional[float], typer.Option(
    "--lr", metavar="LR", rich_help_panel=TRAINING, show_default=False,
    help=f"Adam's learning rate: above 0, at most 1 ({_task_default('lr')}).")]
TrainSeedOpt = Annotated[int, typer.Option(
    "--seed", "-s", metavar="S", rich_help_panel=TRAINING,
    help="Seed for the initial weights and every sequence.", parser=seed_option)]
CompareOpt = Annotated[Optional[str], typer.Option(
    "--compare", metavar="H,H,…", rich_help_panel=TRAINING, show_default=False,
    help="Train each of these head counts with the same d, steps and seed, e.g. 1,2,4.")]
TrainSaveOpt = Annotated[Optional[str], typer.Option(  # str: a trailing '/' must reach plan_outputs
    "--save", metavar="PATH", rich_help_panel=OUTPUT, show_default=False, readable=False,
    help="Write the trained model (of the last run) to this .npz file, for 'mha explain --weights'.",
    parser=file_name_option)]
TrainOutOpt = Annotated[Path, typer.Option(
    "--out", "-o", metavar="PATH", rich_help_panel=OUTPUT, readable=False,
    help="Folder for training.png and training-heads.png, card.png for the grammar task, sweep.png after --seeds "
         "(created if missing).",
    parser=folder_option)]
TrainPlotsOpt = Annotated[bool, typer.Option(
    "--plots/--no-plots", metavar=FLAG, rich_help_panel=OUTPUT, help="Save the two training figures into --out.")]
TrainJsonOpt = Annotated[bool, typer.Option(
    "--json", metavar=FLAG, rich_help_panel=OUTPUT,
    help="Print one JSON document (the task and each run's numbers) on stdout and nothing else there.")]
