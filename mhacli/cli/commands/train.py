"""``mha train``: train the attention layer on a task, live, and compare head counts.

The command only connects: it checks the options (the core's TrainConfig does),
runs :func:`mhacli.core.train.train` once per head count with a progress bar,
prints the table and a conclusion computed from its numbers, and writes the
figures and the model through io/render.  numpy and matplotlib are imported
inside, so ``mha --help`` stays quick.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from rich import box
from rich.table import Table

from mhacli.cli.options import (OUT_DIR, TRAIN_DEFAULTS, BatchOpt, CompareOpt, LrOpt, StepsOpt, TaskOpt,
                                TrainDModelOpt, TrainHeadsOpt, TrainJsonOpt, TrainOutOpt, TrainPlotsOpt, TrainSaveOpt,
                                TrainSeedOpt)
from mhacli.cli.output import console, err_console, json_document, notes, write_stdout
from mhacli.core.errors import UsageError
from mhacli.io import cleanup
from mhacli.render.fit import Fitted, fitted_table

if TYPE_CHECKING:
    from mhacli.core.train import TrainConfig, TrainResult



def parse_compare(text: str) -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]``; anything else is a usage error."""
    from mhacli.core.numbers import head_counts

    return head_counts(text)


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


def results_table(results: "list[TrainResult]") -> Table:
    """Heads, d/h, parameters, final loss, held-out accuracy (per relation too), seconds; the steps, which every
    run shares, in the title."""
    first = results[0].config
    table = Table(title=f"mha train --task {first.task}: {first.steps:,} steps", title_justify="left",
                  box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0, 0, 1))
    targets = results[0].model.targets
    per = len(targets) > 1  # one held-out column per relation the task reads out
    # A relation's words one to a line ("previous" over "token"), so the columns fit 80 characters.
    relations = [t.replace(" ", "\n") for t in targets] if per else []  # records put them back on one line
    for name in ("heads", "d/h", "parameters", "loss", "held-out", *relations, "seconds"):
        table.add_column(name, justify="right")
    for r in results:
        table.add_row(str(r.heads), str(r.config.d_k), f"{r.parameters:,}",
                      f"{r.loss:.4f}", f"{r.accuracy:.1%}", *([f"{a:.1%}" for a in r.relation_accuracy] if per else []),
                      f"{r.seconds:.1f}")
    return table


def fitted_results(results: "list[TrainResult]") -> Fitted:
    """The table where it fits without cutting a number (the default task's does at 80 columns), else one
    record per run, headed "4 heads"."""
    return fitted_table(results_table(results), lambda heads: _heads_word(int(heads)))


def learned_lines(results: "list[TrainResult]") -> list[str]:
    """Per run, what each head learned: the relation its top key follows, and for what share of queries."""
    lines = ["What each head learned (the relation its most-weighted key follows, share of held-out queries):"]
    for r in results:
        heads = ", ".join(f"head {i + 1} {label}" for i, label in enumerate(r.model.labels))
        lines.append(f"  {r.heads} head{'s' if r.heads > 1 else ''}: {heads}")
    return lines


def results_json(results: "list[TrainResult]") -> str:
    """One JSON document: the task, and per run its configuration and measurements."""
    runs: list[dict[str, Any]] = []
    for r in results:
        c = r.config
        runs.append({"heads": c.heads, "d_model": c.d_model, "d_k": c.d_k, "parameters": r.parameters,
                     "loss": r.loss, "accuracy": r.accuracy,
                     "relation_accuracy": dict(zip(r.model.targets, r.relation_accuracy)),
                     "steps": c.steps, "seconds": r.seconds,
                     "batch": c.batch, "length": c.length, "lr": c.lr, "seed": c.seed, "positions": c.positions,
                     "relations": [{"relation": n, "share": s} for n, s in r.model.relations]})
    return json_document("train", {"task": results[0].config.task, "runs": runs}, indent=2)


def train_configs(compare: str | None, task: str, **fields: Any) -> "list[TrainConfig]":
    """One TrainConfig per head count (``--compare``, else ``--heads``), every option checked before any training
    (None: the task's own default), and each layer's weights checked against this machine's memory."""
    from mhacli.core.train import TrainConfig
    from mhacli.io.memory import memory_limit_bytes

    from mhacli.core.checks import task_name

    task = task_name(task)  # " Grammar" is grammar: the one rule for names (issue 31)
    head_counts = parse_compare(compare) if compare is not None else [fields["heads"]]
    configs = []
    limit = memory_limit_bytes()
    for h in head_counts:
        try:
            configs.append(TrainConfig.for_task(task, **{**fields, "heads": h}))
            configs[-1].check_fits(limit)
        except UsageError as exc:
            if compare is None or "heads" not in exc.params:
                raise
            from mhacli.core.config import divisors

            d_model = fields["d_model"]
            width = d_model if d_model is not None else TrainConfig.for_task(task).d_model  # the task's default d
            raise UsageError("{compare}: {d_model} is not divisible by " + f"{h} heads; use head counts that "
                             f"divide it ({', '.join(map(str, divisors(width)))}).",
                             compare=compare, d_model=width) from None
    return configs


def _train_with_bar(config: "TrainConfig", quiet: bool) -> "TrainResult":
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from mhacli.core.train import train as train_core

    label = f"{config.heads} head{'s' if config.heads > 1 else ''}"
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("loss {task.fields[loss]:.4f}  accuracy {task.fields[accuracy]:.1%}"),
                  TimeElapsedColumn(), console=err_console, transient=True, disable=quiet) as progress:
        bar = progress.add_task(label, total=config.steps, loss=float("nan"), accuracy=0.0)
        every = max(1, config.steps // 200)  # a redraw per step would cost more than the step

        def on_step(step: int, loss: float, accuracy: float) -> None:
            if step % every == 0 or step == config.steps:
                progress.update(bar, completed=step, loss=loss, accuracy=accuracy)

        return train_core(config, on_step=on_step)


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
) -> None:
    """Train one attention layer on a task and show whether one head is enough.

    Example: mha train --task neighbours --compare 1,2,4
    """
    from mhacli.cli.common import plan_outputs
    from mhacli.io.files import prepare_out_dir

    configs = train_configs(compare, task, heads=heads, d_model=d_model, steps=steps, batch=batch, lr=lr, seed=seed)
    # Every output resolved before the first step: --save and the two figures never land on each other,
    # through a link in --out, or on a folder named with a trailing '/'.
    plan, _, _ = plan_outputs(plots=plots, out=out, fmt="png", dpi=100, heads=1, names=FIGURE_NAMES, save=save)
    made = plan.out is not None and not plan.out.exists()
    if plan.out is not None:
        prepare_out_dir(plan.out)
    if made:  # a folder made for this run goes again if the training fails (diverges, Ctrl-C): nothing written
        cleanup.register(plan.out, folder=True)  # type: ignore[arg-type]
    results = [_train_with_bar(config, quiet=json_out) for config in configs]
    if made:
        cleanup.unregister(plan.out)  # type: ignore[arg-type]
    written: list[str] = []
    if plan.save is not None:
        from mhacli.io.trained import save_trained

        written.append(str(save_trained(results[-1], plan.save)))
    if plan.out is not None:
        written += _save_figures(results, plan.out)
    from mhacli.core.messages import printable

    if json_out:
        write_stdout(results_json(results) + "\n")
        for path in written:
            err_console.print(f"wrote {printable(path)}", highlight=False, markup=False)
        return
    console.print(fitted_results(results))
    console.print()  # the table has no bottom rule: a blank line before the sentences
    for line in learned_lines(results):
        console.print(line, highlight=False, markup=False)
    console.print(conclusion(results), highlight=False)
    for path in written:
        console.print(f"wrote {printable(path)}", highlight=False, markup=False)


FIGURE_NAMES = ("training.png", "training-heads.png")  # what --out receives


def _save_figures(results: "list[TrainResult]", out: Path) -> list[str]:
    """training.png (every run) and training-heads.png, written atomically: one run's heads during training, or
    after --compare every run's heads at the end, the lone head included, on the same held-out sequence."""
    from mhacli.io.files import atomic_write
    from mhacli.render.figures.training import training_figure, training_heads_figure, training_runs_figure
    from mhacli.render.warned import note, recording

    paths = []
    warned: dict[str, None] = {}
    with recording(warned):  # a library's warning while drawing is one note below, never stray lines
        heads_fig = training_heads_figure(results[0]) if len(results) == 1 else training_runs_figure(results)
        for name, fig in zip(FIGURE_NAMES, (training_figure(results), heads_fig)):
            paths.append(str(atomic_write(out / name, partial(_save_png, fig))))
    notes([line for line in (note(warned),) if line])
    return paths


def _save_png(fig: Any, handle: IO[bytes]) -> None:
    fig.savefig(handle, format="png")
