"""``mha bench --startup``: the two start-up ratios (first line over the ``--no-plots`` run; the run with its
figures over the bare imports), each taken within a round of fresh processes in rotating order after a warm-up
round; docs/performance.md explains the baselines and the verdicts.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

SENTENCE = "the cat sat on the mat"  # 6 tokens: the benchmark
IMPORTS = "import numpy, matplotlib.figure, rich.console, typer"
IMPORTS_PYPLOT = "import numpy, matplotlib.pyplot, rich.console, typer"
FIRST_LINE_TARGET = 1.0
FIGURES_TARGET = 2.5  # issue 44's target for a run that forks nothing (issue 29's 2.2 counted forked drawers)

Tick = Callable[[str], None]


def mha_command() -> list[str]:
    """The installed ``mha`` script beside this Python, or ``python -m mhacli``."""
    script = Path(sys.executable).with_name("mha")
    return [str(script)] if script.exists() else [sys.executable, "-m", "mhacli"]


def startup_commands(out_dir: Path) -> dict[str, list[str]]:
    """Name → argv of every command one round runs."""
    mha = mha_command()
    return {
        "imports": [sys.executable, "-c", IMPORTS],
        "imports_pyplot": [sys.executable, "-c", IMPORTS_PYPLOT],
        "help": [*mha, "--help"],
        "no_plots": [*mha, "explain", SENTENCE, "--no-plots"],
        "figures": [*mha, "explain", SENTENCE, "--out", str(out_dir)],
    }


LABELS = {  # short, so the table fits 40 columns; the notes under it give the full commands
    "imports": "imports (matplotlib.figure)",
    "imports_pyplot": "imports (matplotlib.pyplot)",
    "help": "mha --help",
    "no_plots": "explain --no-plots",
    "figures": "explain, all figures",
    "first_line": "  … its first line",
}


def child_env() -> dict[str, str]:
    """The environment of a timed child, as a user's shell has it: bytecode cache written (the warm-up round fills
    it, as pip does at install), a piped stdout buffered, matplotlib on Agg."""
    env = {**os.environ, "MPLBACKEND": "Agg", "COLUMNS": "100"}
    for name in ("PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED"):
        env.pop(name, None)
    return env


def run_timed(argv: list[str]) -> tuple[float, float, float]:
    """Seconds until the first line on stdout, until the process has ended, and the CPU seconds it used (steadier
    than wall time when others share the cores); a RunError when the command fails."""
    import resource

    env = child_env()
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env=env)
    assert proc.stdout is not None
    try:
        proc.stdout.readline()
        first = time.perf_counter() - start
        _, err = proc.communicate()  # the rest of both streams, then the exit
    except BaseException:
        # The bench interrupted: end the timed command too (SIGTERM first: mha removes its own temporary files),
        # or it would draw on into the temporary folder the bench is removing.
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    code = proc.returncode
    total = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - used.ru_utime) + (after.ru_stime - used.ru_stime)
    if code != 0:
        from mhacli.attention.errors import RunError

        raise RunError(f"{' '.join(argv[-4:])} failed while timing start-up ({code}): "
                       f"{err.decode(errors='replace').strip()[-300:]}")
    return first, total, cpu


@dataclass(frozen=True)
class Startup:
    """Every timed round of every command, and what follows from their medians."""

    repeats: int
    seconds: dict[str, list[float]]  # name -> one time per round (first_line: of the figures run)
    machine: dict[str, object]
    cpu: dict[str, list[float]] = field(default_factory=dict)  # name -> CPU seconds per round

    def median_cpu(self, name: str) -> float:
        return statistics.median(self.cpu[name])

    def rounds(self, top: str, bottom: str, cpu: bool = False) -> list[float]:
        """``top`` ÷ ``bottom`` within each round, in wall or CPU seconds."""
        times = self.cpu if cpu else self.seconds
        return [a / b for a, b in zip(times[top], times[bottom])]

    @property
    def figures_cpu_rounds(self) -> list[float]:
        """(b) in CPU seconds, per round (empty if not measured)."""
        if not self.cpu.get("figures") or not self.cpu.get("imports"):
            return []
        return self.rounds("figures", "imports", cpu=True)

    @property
    def figures_cpu_ratio(self) -> float | None:
        """(b) in CPU seconds: the median of the rounds' ratios (None if not measured)."""
        rounds = self.figures_cpu_rounds
        return statistics.median(rounds) if rounds else None

    def median(self, name: str) -> float:
        return statistics.median(self.seconds[name])

    @property
    def first_line_ratio(self) -> float:
        """(a) first walkthrough line of the figures run ÷ the whole --no-plots run: median over the rounds."""
        return statistics.median(self.rounds("first_line", "no_plots"))

    @property
    def figures_ratio(self) -> float:
        """(b) the whole run with figures ÷ importing numpy, matplotlib.figure, rich and typer: median over
        the rounds."""
        return statistics.median(self.rounds("figures", "imports"))

    @property
    def first_line_verdict(self) -> str:
        return round_verdict(self.rounds("first_line", "no_plots"), FIRST_LINE_TARGET)

    @property
    def figures_verdict(self) -> str:
        return round_verdict(self.rounds("figures", "imports") + self.figures_cpu_rounds, FIGURES_TARGET)

    @property
    def figures_ratio_pyplot(self) -> float:
        """(b) over the pyplot baseline instead."""
        return self.median("figures") / self.median("imports_pyplot")

    def to_dict(self) -> dict[str, object]:
        return {
            "machine": self.machine, "repeats": self.repeats, "sentence": SENTENCE,
            "commands": {name: {"label": LABELS[name].strip(" …"), "median": self.median(name),
                                "seconds": values, "cpu_median": self.median_cpu(name) if self.cpu.get(name)
                                else None, "cpu_seconds": self.cpu.get(name)}
                         for name, values in self.seconds.items()},
            "ratios": {
                "first_line_over_no_plots": {"value": self.first_line_ratio, "target": FIRST_LINE_TARGET,
                                             "rounds": self.rounds("first_line", "no_plots"),
                                             "verdict": self.first_line_verdict,
                                             "met": self.first_line_verdict == MET},
                "figures_over_imports": {"value": self.figures_ratio, "target": FIGURES_TARGET,
                                         "rounds": self.rounds("figures", "imports"),
                                         "cpu_rounds": self.figures_cpu_rounds, "verdict": self.figures_verdict,
                                         "met": self.figures_verdict == MET, "baseline": IMPORTS},
                "figures_over_imports_pyplot": {"value": self.figures_ratio_pyplot, "baseline": IMPORTS_PYPLOT},
                "figures_over_imports_cpu": {"value": self.figures_cpu_ratio, "baseline": IMPORTS},
            },
        }


def rounds_ticks(repeats: int) -> int:
    """Progress ticks of :func:`measure_startup`: every command of every round, the warm-up included."""
    return (repeats + 1) * len(startup_commands(Path(".")))


def measure_startup(repeats: int, tick: Tick = lambda _: None) -> Startup:
    """Median wall times of every command over ``repeats`` interleaved rounds, after a warm-up round."""
    from mhacli.bench.machine import load_average, machine_info
    from mhacli.io.cleanup import temporary_folder

    load_before = load_average()
    with temporary_folder("mha-bench-startup-") as folder:
        commands = startup_commands(folder)
        names = list(commands)
        seconds: dict[str, list[float]] = {name: [] for name in [*names, "first_line"]}
        cpu: dict[str, list[float]] = {name: [] for name in names}
        for round_ in range(repeats + 1):  # round 0 fills the disk cache and the font cache
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:  # rotate, so no command always follows the same one
                first, total, used = run_timed(commands[name])
                if round_:
                    seconds[name].append(total)
                    cpu[name].append(used)
                    if name == "figures":
                        seconds["first_line"].append(first)
                tick(LABELS[name].strip(" …"))
    machine = machine_info(with_torch=False)
    machine["load_average_before"] = load_before
    return Startup(repeats=repeats, seconds=seconds, machine=machine, cpu=cpu)


MET = "met"


def round_verdict(ratios: list[float], target: float) -> str:
    """"met" when every round's ratio is within ``target``, "NOT met" when none is, else how many rounds were:
    a median alone can read "met" on a machine where most rounds missed."""
    within = sum(r <= target for r in ratios)
    if ratios and within == len(ratios):
        return MET
    if within == 0:
        return "NOT met"
    return f"{within} of {len(ratios)} rounds met: unsettled"


def shown_ratio(value: float, target: float) -> str:
    """``value`` to two decimals, or as many more as it takes not to read as the ``target`` it misses (2.204, not
    2.50, beside "NOT met" for ≤ 2.5)."""
    for digits in range(2, 9):
        text = f"{value:.{digits}f}"
        if value <= target or float(text) > target:
            return text
    return repr(value)


def startup_table(result: Startup) -> object:
    """The medians as a Rich table, the two ratios and their targets underneath."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from mhacli.bench.machine import blas_line, machine_line
    from mhacli.bench.runner import human_seconds
    from mhacli.render import theme

    table = Table(box=None, header_style=theme.STYLE_TITLE, pad_edge=False)
    table.add_column("command")
    table.add_column("median", justify="right")
    table.add_column("÷ imports", justify="right")
    table.add_column("CPU", justify="right")
    base = result.median("imports")
    for name in ("imports", "imports_pyplot", "help", "no_plots", "figures", "first_line"):
        if not result.seconds.get(name):
            continue
        cpu = human_seconds(result.median_cpu(name)) if result.cpu.get(name) else ""
        table.add_row(LABELS[name], human_seconds(result.median(name)), f"{result.median(name) / base:.2f}", cpu)
    a, b = result.first_line_ratio, result.figures_ratio
    a_rounds, b_rounds = result.rounds("first_line", "no_plots"), result.rounds("figures", "imports")
    lines = [
        f"(a) first line ÷ whole --no-plots run, within each round: median {shown_ratio(a, FIRST_LINE_TARGET)} "
        f"(range {min(a_rounds):.2f}–{max(a_rounds):.2f}); target ≤ {FIRST_LINE_TARGET}: "
        f"{result.first_line_verdict}",
        f"(b) explain with all figures ÷ imports, within each round: median {shown_ratio(b, FIGURES_TARGET)} "
        f"(range {min(b_rounds):.2f}–{max(b_rounds):.2f}); ÷ the pyplot imports: "
        f"{result.figures_ratio_pyplot:.2f}",
    ]
    cpu_rounds = result.figures_cpu_rounds
    if cpu_rounds:
        lines.append(f"(b) in CPU seconds, which other jobs on the machine hardly change: median "
                     f"{shown_ratio(statistics.median(cpu_rounds), FIGURES_TARGET)} "
                     f"(range {min(cpu_rounds):.2f}–{max(cpu_rounds):.2f})")
    lines.append(f"(b) target ≤ {FIGURES_TARGET}, every round in wall and CPU seconds: {result.figures_verdict}")
    before: list[float] = result.machine.get("load_average_before") or []  # type: ignore[assignment]
    rounds = f"{result.repeats} interleaved round{'s' if result.repeats != 1 else ''}"
    notes = [f'explain: mha explain "{SENTENCE}" (its first line: the first walkthrough line on stdout, '
             f"read through a pipe); imports: python -c \"{IMPORTS}\" (pyplot: the same with "
             "matplotlib.pyplot).",
             f"Medians of {rounds} of fresh processes after a warm-up round.",
             f"numpy's BLAS: {blas_line(result.machine)}.",
             machine_line(result.machine) + f" (before: {' '.join(f'{v:.1f}' for v in before)})"]
    return Group(Text("mha bench --startup", style=theme.STYLE_TITLE), table,
                 *(Text(line) for line in lines), *(Text(n, style=theme.STYLE_DIM) for n in notes))


if __name__ == "__main__":  # python -m mhacli.bench.startup [REPEATS]: the JSON document alone
    print(json.dumps(measure_startup(int(sys.argv[1]) if len(sys.argv) > 1 else 5).to_dict(), indent=2))
