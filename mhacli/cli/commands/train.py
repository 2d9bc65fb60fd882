"""``mha train``: train the attention layer on a task, live, and compare head counts.

Options are checked by the core's TrainConfig; every seed of a head count trains as one stack with a progress
bar; numpy and matplotlib are imported inside, so ``mha --help`` stays quick.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from mhacli.cli.options import (FLAG, OUT_DIR, TRAIN_DEFAULTS, TRAINING, BatchOpt, CompareOpt, LrOpt, StepsOpt,
                                TaskOpt, TrainDModelOpt, TrainHeadsOpt, TrainJsonOpt, TrainOutOpt, TrainPlotsOpt,
                                TrainSaveOpt, TrainSeedOpt)
from mhacli.cli.output import console, err_console, json_document, notes, write_stdout
from mhacli.attention.errors import UsageError
from mhacli.attention.messages import printable
from mhacli.io import cleanup

# The report card's options (mha train only; declared here, where train's own behaviour lives).
KnockoutOpt = Annotated[bool, typer.Option(
    "--knockout", metavar=FLAG, rich_help_panel=TRAINING,
    help="With --task grammar: switch each head off in turn (its output zeroed before W_o) and print what every "
    "relation loses, beside the report card, with every disagreement said.")]
SeedsOpt = Annotated[Optional[str], typer.Option(
    "--seeds", metavar="S-S|S,S", rich_help_panel=TRAINING, show_default=False,
    help="Train every head count once per seed (e.g. 0-4, or 0,2,7) and print each seed's accuracy and gap, "
    "the spread over seeds, and sweep.png (the gap per seed).")]
MAX_SEEDS = 20  # a sweep of 20 seeds × 3 head counts of the grammar is minutes already
TrainKvHeadsOpt = Annotated[Optional[str], typer.Option(
    "--kv-heads", metavar="G,G,…", rich_help_panel=TRAINING, show_default=False,
    help="With --task grammar: train the same layer with g shared key/value heads for each g (each dividing "
    "--heads; g = --heads is multi-head attention, 1 multi-query) and print each g's held-out accuracy and its "
    "spread over --seeds. Writes no figures.")]

if TYPE_CHECKING:
    from mhacli.grammar.knockout import Knockout
    from mhacli.grammar.sweep import KvSweep, Sweep
    from mhacli.grammar.model import TrainConfig
    from mhacli.grammar.train import TrainResult



def parse_seeds(text: str) -> list[int]:
    """``"0-4"`` -> ``[0, 1, 2, 3, 4]``, ``"0,2,7"`` -> ``[0, 2, 7]``, ``"3"`` -> ``[3]``; else a usage error."""
    import re

    from mhacli.attention.messages import shown
    from mhacli.attention.numbers import whole_number

    span = re.fullmatch(r"\s*([0-9]+)\s*-\s*([0-9]+)\s*", text)
    parts = [span.group(1), span.group(2)] if span else text.split(",")
    found = [whole_number(p) for p in parts if p.strip()]
    numbers = [n for n in found if n is not None and n >= 0]
    if not numbers or len(numbers) != len(found) or (span and numbers[1] < numbers[0]):
        raise UsageError("{seeds:name} takes seeds as a range or a list (digits 0-9), e.g. 0-4 or 0,2,7; got "
                         f"{shown(text)}.", seeds=text)
    count = numbers[1] - numbers[0] + 1 if span else len(set(numbers))  # counted before any list is made
    if count > MAX_SEEDS:
        raise UsageError(f"{{seeds:name}} takes at most {MAX_SEEDS} seeds, got {count:,}.", seeds=text)
    return list(range(numbers[0], numbers[1] + 1)) if span else list(dict.fromkeys(numbers))


def _heads_word(n: int) -> str:
    return f"{n} head{'s' if n != 1 else ''}"


def conclusion(results: "list[TrainResult]") -> str:
    """One sentence about the runs, every number taken from them."""
    first = results[0]
    budget = f"{first.parameters:,} parameters and {first.config.steps:,} steps"
    if len(results) == 1:
        r = first
        return f"{_heads_word(r.heads)} reached {r.accuracy:.1%} held-out accuracy with {budget}."
    best = max(results, key=lambda r: (r.accuracy, -r.heads))
    worst = min(results, key=lambda r: (r.accuracy, r.heads))
    gap = 100 * (best.accuracy - worst.accuracy)
    if gap < 1.0:
        return f"With the same {budget}, every head count reached {worst.accuracy:.1%} to {best.accuracy:.1%}."
    how = "from splitting the same d into more heads" if best.heads > worst.heads else "with fewer, wider heads"
    text = (f"With the same {budget}, {_heads_word(worst.heads)} reached {worst.accuracy:.1%} held-out "
            f"accuracy and {_heads_word(best.heads)} {best.accuracy:.1%}: {gap:.0f} points more {how}.")
    targets = first.model.targets
    if len(targets) > 1:  # where the weaker run lost most, relation by relation
        t = max(range(len(targets)), key=lambda i: best.relation_accuracy[i] - worst.relation_accuracy[i])
        lost = 100 * (best.relation_accuracy[t] - worst.relation_accuracy[t])
        if lost >= 1.0:
            text += (f" It lost most on {targets[t]}: {worst.relation_accuracy[t]:.1%} against "
                     f"{best.relation_accuracy[t]:.1%}.")
    return text


def results_json(results: "list[TrainResult]", knockouts: "list[Knockout] | None" = None,
                 swept: "Sweep | None" = None, kv: "KvSweep | None" = None) -> str:
    """One JSON document: the task, and per run its configuration and measurements (a grammar model's report
    card, its knockout when asked); after --seeds, the sweep."""
    from mhacli.measures import narrate
    from mhacli.pipeline import card_shown

    runs: list[dict[str, Any]] = []
    for n, r in enumerate(results):
        c = r.config
        runs.append({"heads": c.heads, "d_model": c.d_model, "d_k": c.d_k, "parameters": r.parameters,
                     "loss": r.loss, "accuracy": r.accuracy,
                     "relation_accuracy": dict(zip(r.model.targets, r.relation_accuracy)),
                     "steps": c.steps, "seconds": r.seconds,
                     "batch": c.batch, "length": c.length, "lr": c.lr, "seed": c.seed, "positions": c.positions,
                     "relations": [{"relation": n, "share": s} for n, s in r.model.relations]})
        if c.kv_heads is not None:
            runs[-1]["kv_heads"] = c.kv_heads
        card = r.model.card
        if card is not None:
            runs[-1]["card"] = card.to_dict()
        if knockouts is not None and card is not None:
            runs[-1]["knockout"] = {**knockouts[n].to_dict(),  # the same sentences the terminal prints
                                    "disagreements": list(card_shown(card, knock=knockouts[n]).knockout)}
    document: dict[str, Any] = {"task": results[0].config.task, "runs": runs}
    if swept is not None:
        document["sweep"] = {**swept.to_dict(), "sentence": narrate.sweep_sentence(swept)}
    if kv is not None:
        document["kv_sweep"] = {**kv.to_dict(), "sentence": kv_sentence(kv)}
    return json_document("train", document, indent=2)


def train_configs(compare: str | None, task: str, **fields: Any) -> "list[TrainConfig]":
    """One TrainConfig per head count (``--compare``, else ``--heads``), every option checked before any training
    (None: the task's own default), and each layer's weights checked against this machine's memory."""
    from mhacli.attention.numbers import head_counts as parse_counts
    from mhacli.grammar.model import TrainConfig
    from mhacli.grammar.tasks import task_name
    from mhacli.io.memory import memory_limit_bytes

    task = task_name(task)  # " Grammar" is grammar: the one rule for names (issue 31)
    head_counts = parse_counts(compare) if compare is not None else [fields["heads"]]
    configs = []
    limit = memory_limit_bytes()
    for h in head_counts:
        try:
            configs.append(TrainConfig.for_task(task, **{**fields, "heads": h}))
            configs[-1].check_fits(limit)
        except UsageError as exc:
            if compare is None or "heads" not in exc.params:
                raise
            from mhacli.attention.config import divisors

            d_model = fields["d_model"]
            width = d_model if d_model is not None else TrainConfig.for_task(task).d_model  # the task's default d
            raise UsageError("{compare}: {d_model} is not divisible by " + f"{h} heads; use head counts that "
                             f"divide it ({', '.join(map(str, divisors(width)))}).",
                             compare=compare, d_model=width) from None
    return configs


def _train_with_bar(configs: "list[TrainConfig]", quiet: bool) -> "list[TrainResult]":
    """Train configs that differ in their seed alone as one stack (core.train.train_stack), with one progress bar."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from mhacli.grammar.score import measured
    from mhacli.grammar.train import train_stack

    first = configs[0]
    label = f"{first.heads} head{'s' if first.heads > 1 else ''}"
    if first.kv_heads is not None:
        label += f", {first.kv_heads} key/value"
    if len(configs) > 1:
        label += f" × {len(configs)} seeds (mean)"
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("loss {task.fields[loss]:.4f}  accuracy {task.fields[accuracy]:.1%}"),
                  TimeElapsedColumn(), console=err_console, transient=True,
                  disable=quiet or not err_console.is_terminal) as progress:  # no bar where none is seen
        bar = progress.add_task(label, total=first.steps, loss=float("nan"), accuracy=0.0)
        every = max(1, first.steps // 200)  # a redraw per step would cost more than the step

        def on_step(step: int, loss: Any, accuracy: Any) -> None:
            if step % every == 0 or step == first.steps:
                progress.update(bar, completed=step, loss=float(loss.mean()), accuracy=float(accuracy.mean()))

        # named by their cards, scored by grammar.score
        return [measured(r) for r in train_stack(configs, on_step=on_step)]


def train(
    task: TaskOpt = TRAIN_DEFAULTS["task"],
    heads: TrainHeadsOpt = TRAIN_DEFAULTS["heads"],
    d_model: TrainDModelOpt = None,
    steps: StepsOpt = None,
    batch: BatchOpt = TRAIN_DEFAULTS["batch"],
    lr: LrOpt = None,
    seed: TrainSeedOpt = TRAIN_DEFAULTS["seed"],
    save: TrainSaveOpt = None,
    out: TrainOutOpt = OUT_DIR,
    plots: TrainPlotsOpt = True,
    json_out: TrainJsonOpt = False,
    compare: CompareOpt = None,
    knockout: KnockoutOpt = False,
    seeds: SeedsOpt = None,
    kv_heads: TrainKvHeadsOpt = None,
) -> None:
    """Train one attention layer on a task and show whether one head is enough.

    A grammar model's report card (each head's held-out hit rate per relation) follows the table.

    Example: mha train --task grammar --seeds 0-4 --compare 1,4
    """
    seed_list = parse_seeds(seeds) if seeds is not None else [seed]
    if kv_heads is not None:
        _train_kv(kv_heads, seed_list, task, dict(heads=heads, d_model=d_model, steps=steps, batch=batch, lr=lr),
                  compare=compare, save=save, knockout=knockout, json_out=json_out)
        return
    grid = [train_configs(compare, task, heads=heads, d_model=d_model, steps=steps, batch=batch, lr=lr, seed=s)
            for s in seed_list]
    _train_and_publish(grid, _checked(grid, knockout, seeds, compare, save), knockout, seeds is not None,
                       save, out, plots, json_out)


def _train_and_publish(grid: "list[list[TrainConfig]]", grammar: bool, knockout: bool, sweeping: bool,
                       save: str | None, out: Path, plots: bool, json_out: bool) -> None:
    """Every output planned (--save and the figures never land on each other, through a link in --out, or on a
    folder named with a trailing '/'), every run trained (and knocked out, and swept), then printed and written."""
    from mhacli.cli.flow import plan_outputs
    from mhacli.grammar.knockout import knockout as knock_out
    from mhacli.grammar.sweep import sweep
    from mhacli.render.card import sweep_report

    names = SWEEP_FIGURE_NAMES if sweeping else FIGURE_NAMES + ((CARD_FIGURE,) if grammar else ())
    plan = plan_outputs(plots=plots, out=out, fmt="png", heads=1, names=names, save=save)
    by_seed = _trained(grid, plan.out, quiet=json_out)
    results = [r for runs in by_seed for r in runs]
    knocked = [knock_out(r.model) for r in results] if knockout else None
    swept = sweep(by_seed) if sweeping else None
    written: list[str] = []
    if plan.save is not None:
        from mhacli.models.trained import save_trained

        written.append(str(save_trained(results[-1], plan.save)))
    if swept is not None and not json_out:  # the JSON document is printed once every file is written
        for part in sweep_report(swept):
            console.print(part, highlight=False)
    elif not json_out:
        _print_runs(results, knocked)
    if plan.out is not None:
        written += _save_sweep(swept, plan.out) if swept is not None else _save_figures(results, plan.out)
        cleanup.unregister(plan.out)  # the folder holds the figures now: it stays
    if json_out:
        write_stdout(results_json(results, knocked, swept) + "\n")
    for path in written:
        (err_console if json_out else console).print(f"wrote {printable(path)}", highlight=False, markup=False)


def _checked(grid: "list[list[TrainConfig]]", knockout: bool, seeds: str | None, compare: str | None,
             save: str | None) -> bool:
    """The options that only make sense together, checked before any work; True for the grammar task."""
    from mhacli.grammar.tasks import get_task

    grammar = get_task(grid[0][0].task).sentences
    if knockout and not grammar:
        raise UsageError("{knockout:name} scores heads against the grammar's parse: add --task grammar.",
                         knockout=True)
    if seeds is not None and len(grid[0]) < 2:
        raise UsageError("{seeds:name} sets head counts side by side on every seed: add {compare:name} with two or "
                         "more, e.g. --compare 1,4.", seeds=seeds, compare=compare)
    if seeds is not None and save is not None:
        raise UsageError("{save:name} keeps one model and {seeds:name} trains one per seed: leave one of them out.",
                         save=save, seeds=seeds)
    return bool(grammar)


def _trained(grid: "list[list[TrainConfig]]", out: Path | None, quiet: bool) -> "list[list[TrainResult]]":
    """Every run of every seed, with a progress bar; a folder made for them stays registered, so it goes again
    if the run fails or is ended before its figures are written (the caller unregisters it then)."""
    from mhacli.io.files import prepare_out_dir

    made = out is not None and not out.exists()
    if out is not None:
        prepare_out_dir(out)
    if made:  # diverged, Ctrl-C: nothing written, and no empty folder left behind
        cleanup.register(out, folder=True)  # type: ignore[arg-type]
    from mhacli.grammar.train import stacks

    flat = [config for configs in grid for config in configs]
    trained: dict[int, "TrainResult"] = {}
    for group in stacks(flat):  # every seed of one head count trains as one stack
        trained.update(zip(group, _train_with_bar([flat[i] for i in group], quiet=quiet)))
    width = len(grid[0])
    return [[trained[s * width + h] for h in range(width)] for s in range(len(grid))]


def _print_runs(results: "list[TrainResult]", knocked: "list[Knockout] | None") -> None:
    """The results table, what each head learned, each grammar run's card (beside its knockout), the conclusion."""
    from mhacli.grammar.score import score
    from mhacli.pipeline import card_shown
    from mhacli.render.card import card_report, knockout_report
    from mhacli.render.train import fitted_results, learned_lines

    console.print(fitted_results(results))
    console.print()  # the table has no bottom rule: a blank line before the sentences
    for line in learned_lines(results):
        console.print(line, highlight=False)
    for n, r in enumerate(results):
        card = r.model.card
        if card is None:
            continue
        console.print()
        title = f"{_heads_word(r.heads)}: report card, held-out hit rate per relation ({card.sentences:,} sentences)"
        if knocked is not None:
            parts = knockout_report(card_shown(card, heading=title, knock=knocked[n]), knocked[n])
        else:
            parts = card_report(card_shown(card, heading=title, score=score(r.model)))
        for part in parts:
            console.print(part, highlight=False)
    console.print(conclusion(results), highlight=False)


FIGURE_NAMES = ("training.png", "training-heads.png")  # what --out receives
CARD_FIGURE = "card.png"  # beside them for the grammar task: the last run's report card
SWEEP_FIGURE_NAMES = ("sweep.png",)  # what --out receives after --seeds: the gap per seed


def _save_figures(results: "list[TrainResult]", out: Path) -> list[str]:
    """training.png (every run) and training-heads.png (one run's heads during training, or after --compare every
    run's heads at the end, on the same held-out sequence), and a grammar model's card.png."""
    from mhacli.render.figures.training import training_figure, training_heads_figure, training_runs_figure

    figures = {"training.png": lambda: training_figure(results),
               "training-heads.png": lambda: (training_heads_figure(results[0]) if len(results) == 1
                                              else training_runs_figure(results))}
    card = results[-1].model.card
    if card is not None:
        from mhacli.grammar.score import score
        from mhacli.pipeline import card_shown
        from mhacli.render.figures.card import card_figure

        title = f"{_heads_word(results[-1].heads)}: report card, held-out hit rate (95% interval)"
        figures[CARD_FIGURE] = lambda: card_figure(card_shown(card, figure_title=title,
                                                              score=score(results[-1].model)))
    return _write_pngs(figures, out)


def _save_sweep(swept: "Sweep", out: Path) -> list[str]:
    """sweep.png: the gap per seed."""
    from mhacli.render.figures.card import sweep_figure

    return _write_pngs({SWEEP_FIGURE_NAMES[0]: lambda: sweep_figure(swept)}, out)


def _write_pngs(figures: dict[str, Any], out: Path) -> list[str]:
    """Each figure drawn (``name -> draw()``) and written atomically into ``out``; a library's warning while
    drawing is one note, never stray lines."""
    from mhacli.io.files import atomic_write
    from mhacli.render.figures.save import write_png
    from mhacli.render.figures.training import SAVED_DPI
    from mhacli.render.warned import note, recording

    warned: dict[str, None] = {}
    with recording(warned):
        drawn = {name: draw() for name, draw in figures.items()}
        # The PNG writer explain's figures use: the same pixels as savefig at the figures' own dpi.
        paths = [str(atomic_write(out / name, partial(write_png, fig, dpi=SAVED_DPI))) for name, fig in drawn.items()]
    notes([line for line in (note(warned),) if line])
    return paths


def _train_kv(text: str, seeds: list[int], task: str, fields: dict[str, Any], *, compare: str | None,
              save: str | None, knockout: bool, json_out: bool) -> None:
    """``--kv-heads G,G,…``: the same layer with g shared key/value heads for each g, on every seed; each g's
    held-out accuracy (the card's 2,000 sentences) and its spread over the seeds."""
    from mhacli.attention.numbers import head_counts
    from mhacli.grammar.sweep import kv_sweep
    from mhacli.grammar.tasks import get_task, task_name

    groups = head_counts(text, "--kv-heads")
    name = task_name(task)
    if not get_task(name).sentences:
        raise UsageError("{kv_heads:name} measures what sharing keys and values costs the grammar: add --task "
                         "grammar.", kv_heads=text)
    for other, given, why in (("compare", compare, "compares head counts"), ("save", save, "keeps one model"),
                              ("knockout", knockout or None, "switches off heads of one model")):
        if given is not None:
            raise UsageError("{kv_heads:name} compares key/value head counts and {" + other + ":name} " + why
                             + ": leave one of them out.", kv_heads=text, **{other: given})
    base = [train_configs(None, name, **fields, seed=s)[0] for s in seeds]
    # g = h is the article's layer, exactly as without the option
    grid = [[replace(c, kv_heads=None if g == c.heads else g) for g in groups] for c in base]
    by_seed = _trained(grid, None, quiet=json_out)
    swept = kv_sweep(by_seed)
    if json_out:
        write_stdout(results_json([r for runs in by_seed for r in runs], kv=swept) + "\n")
    else:
        _print_kv(swept)


def kv_sentence(kv: "KvSweep") -> str:
    """What sharing cost, every number from the sweep: the fewest key/value heads against the most."""
    s = kv.spread
    most, fewest = kv.kv_heads.index(max(kv.kv_heads)), kv.kv_heads.index(min(kv.kv_heads))
    if most == fewest:
        g = kv.kv_heads[most]
        return (f"g = {g}: {s['mean'][most]:.1%} held-out accuracy over {len(kv.seeds)} seed"
                f"{'s' if len(kv.seeds) > 1 else ''} ({s['min'][most]:.1%} to {s['max'][most]:.1%}).")
    gap = 100 * (kv.accuracy[:, most] - kv.accuracy[:, fewest])  # (S,) points
    saved = kv.attention_parameters(kv.kv_heads[most]) - kv.attention_parameters(kv.kv_heads[fewest])
    text = (f"With {kv.kv_heads[fewest]} key/value head{'s' if kv.kv_heads[fewest] > 1 else ''} instead of "
            f"{kv.kv_heads[most]} ({saved:,} fewer attention parameters), the {kv.heads} query heads reached "
            f"{s['mean'][fewest]:.1%} against {s['mean'][most]:.1%} (mean of {len(kv.seeds)} seed"
            f"{'s' if len(kv.seeds) > 1 else ''}): {gap.mean():+.1f} points")
    if len(kv.seeds) > 1:
        text += f" for the most key/value heads, from {gap.min():+.1f} to {gap.max():+.1f} over the seeds"
    return text + "."


def _print_kv(kv: "KvSweep") -> None:
    from rich.table import Table
    from rich.text import Text

    from mhacli.render import theme

    groups = ", ".join(map(str, kv.kv_heads))
    console.print(Text(f"mha train --task {kv.task} --heads {kv.heads}, key/value heads {groups}, "
                       f"{len(kv.seeds)} seed{'s' if len(kv.seeds) > 1 else ''}: held-out accuracy (the card's "
                       "sentences), mean over relations", style=theme.STYLE_TITLE))
    table = Table(box=None, pad_edge=False)
    table.add_column("g", justify="right")
    table.add_column("layer")
    table.add_column("W_q,k,v,o", justify="right")
    for seed in kv.seeds:
        table.add_column(f"seed {seed}", justify="right")
    table.add_column("mean", justify="right")
    if len(kv.seeds) > 1:
        table.add_column("sd", justify="right")
        table.add_column("min–max", justify="right")
    s = kv.spread
    for j, g in enumerate(kv.kv_heads):
        kind = "MHA" if g == kv.heads else "MQA" if g == 1 else "GQA"
        row = [str(g), kind, f"{kv.attention_parameters(g):,}", *(f"{a:.1%}" for a in kv.accuracy[:, j]),
               f"{s['mean'][j]:.1%}"]
        if len(kv.seeds) > 1:
            row += [f"{100 * s['sd'][j]:.1f}", f"{s['min'][j]:.1%}–{s['max'][j]:.1%}"]
        table.add_row(*row)
    console.print(table)
    by = kv.relation_accuracy.mean(axis=0)  # (G, T): each relation's mean over the seeds
    for j, g in enumerate(kv.kv_heads):
        console.print(f"g = {g}: " + ", ".join(f"{t} {a:.1%}" for t, a in zip(kv.targets, by[j])), highlight=False)
    console.print(kv_sentence(kv), highlight=False)
