"""``mha bench --train``: the step ``mha train`` runs in numpy, beside the same model in PyTorch when installed
(nn.MultiheadAttention and by hand, float32 and float64): one thread each, rotating order, each ratio within a round.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import numpy as np

from mhacli.bench.machine import machine_info, machine_line
from mhacli.attention.schedule import single_threaded_blas
from mhacli.grammar.tasks import get_task
from mhacli.grammar.stacked import stack_batch, step
from mhacli.grammar.model import TrainConfig
from mhacli.grammar.train import STEP_DTYPE, Adam, init_params, trainable

# The PyTorch sides: (name, hand-written or nn.MultiheadAttention, dtype name).
TORCH_SIDES = (("nn.MultiheadAttention float64", False, "float64"), ("nn.MultiheadAttention float32", False, "float32"),
               ("hand-written float64", True, "float64"), ("hand-written float32", True, "float32"))


def _numpy_block(config: TrainConfig, params: dict, adam: Adam, batches: list) -> float:
    names = trainable(config)
    pad = get_task(config.task).pad
    start = time.perf_counter()
    for ids, targets, scored in batches:
        _, grads, _ = _stacked(config, params, ids, targets, scored, pad)
        adam.step(params, grads, names)
    return (time.perf_counter() - start) / len(batches)


def _stacked(config: TrainConfig, params: dict, ids: Any, targets: Any, scored: Any,
             pad: int | None) -> tuple[Any, dict, Any]:
    """mha train's step on a stack of one model: ``params`` (1, …) each."""
    batch = stack_batch(ids[None], targets[None], scored[None], config.scored_loss)
    return step(params, batch, config.heads, config.causal, pad, config.word_values, config.head_sparsity,
                config.head_concentration, config.head_overlap)


def numpy_loss(config: TrainConfig, params: dict, ids: Any, targets: Any, scored: Any,
               pad: int | None) -> tuple[float, dict, Any]:
    """The loss and gradients one step of ``mha train`` computes (core.stacked's step), in ``params``' dtype."""
    loss, grads, accuracy = _stacked(config, {k: v[None] for k, v in params.items()}, ids, targets, scored, pad)
    return float(loss[0]), {k: g[0] for k, g in grads.items()}, float(accuracy[0])


def _torch_model(config: TrainConfig, params: dict, hand: bool = False,
                 dtype_name: str = "float64") -> tuple[Any, Any, Any]:
    """The model mha train trains, in PyTorch: through nn.MultiheadAttention, or written out by hand."""
    import torch

    dtype = getattr(torch, dtype_name)

    class Layer(torch.nn.Module):
        """The same layer: learned table, fixed positions, nn.MultiheadAttention without biases, readouts."""

        def __init__(self) -> None:
            super().__init__()
            self.embedding = torch.nn.Parameter(torch.tensor(params["embedding"], dtype=dtype))
            self.register_buffer("positions", torch.tensor(params["positions"], dtype=dtype))
            self.attention = torch.nn.MultiheadAttention(config.d_model, config.heads, bias=False,
                                                         batch_first=True, dtype=dtype)
            with torch.no_grad():
                self.attention.in_proj_weight.copy_(torch.tensor(np.concatenate(
                    [params["W_q"], params["W_k"], params["W_v"]])))
                self.attention.out_proj.weight.copy_(torch.tensor(params["W_o"]))
            self.readout = torch.nn.Parameter(torch.tensor(params["readout"], dtype=dtype))

        def forward(self, ids: Any) -> Any:
            x = self.embedding[ids] + self.positions[: ids.shape[1]]  # type: ignore[index]
            values = self.embedding[ids] if config.word_values else x  # V = E W_vᵀ, as the numpy side
            # The grammar's padding, masked as the numpy side masks it (no query looks past its sentence).
            padding = None if pad is None else ids == pad
            if hand:
                return self.by_hand(x, values, padding)
            # Per-head weights only when the overlap penalty reads them (they cost PyTorch its fused path).
            return self.attention(x, x, values, need_weights=bool(config.head_overlap),
                                  average_attn_weights=False, key_padding_mask=padding)  # (B, N, d), (B, h, N, N)

        def by_hand(self, x: Any, values: Any, padding: Any) -> Any:
            """The layer's steps written out: project, split, score, mask, softmax, weigh, merge, project."""
            b, n, d = x.shape
            h = config.heads
            w_q, w_k, w_v = self.attention.in_proj_weight.chunk(3)
            q, k, v = ((t @ w.T).reshape(b, n, h, d // h).transpose(1, 2)
                       for t, w in ((x, w_q), (x, w_k), (values, w_v)))  # (B, h, N, d/h)
            scores = q @ k.transpose(-1, -2) / (d // h) ** 0.5  # (B, h, N, N)
            if padding is not None:
                scores = scores.masked_fill(padding[:, None, None, :], float("-inf"))
            weights = scores.softmax(dim=-1)  # (B, h, N, N)
            merged = (weights @ v).transpose(1, 2).reshape(b, n, d)  # (B, N, d)
            return merged @ self.attention.out_proj.weight.T, weights

        def loss(self, ids: Any, labels: Any, scored: Any) -> Any:
            """The numpy side's loss: over every answer, or the asked ones; plus the penalties it was given."""
            out, weights = self(ids)
            t, v, d = self.readout.shape
            if config.scored_loss:  # (M_t, d) @ (d, V) per target, as core.passes.scored_readout
                logits = torch.cat([out[scored[r]] @ self.readout[r].T for r in range(t)])
                labels = torch.cat([labels[r][scored[r]] for r in range(t)])
            else:
                logits = (out @ self.readout.reshape(t * v, d).T).reshape(-1, v)  # (B·N·T, V)
                labels = labels.permute(1, 2, 0).reshape(-1)  # (T, B, N) -> (B·N·T,)
            loss = torch.nn.functional.cross_entropy(logits, labels)
            if config.head_sparsity:
                w_o = self.attention.out_proj.weight
                k = d // config.heads
                loss = loss + config.head_sparsity * sum(torch.linalg.norm(self.readout[r] @ w_o[:, i * k:(i + 1) * k])
                                                         for r in range(t) for i in range(config.heads))
            if config.head_concentration and config.heads > 1:  # λ Σ_t ‖n_t‖₁/‖n_t‖₂, n_ti = ‖R_t W_o^i‖_F
                blocks = (self.readout @ self.attention.out_proj.weight).reshape(t, v, config.heads, -1)
                norms = blocks.pow(2).sum(dim=(1, 3)).sqrt()  # (T, h)
                loss = loss + config.head_concentration * (norms.sum(1) / norms.pow(2).sum(1).sqrt()).sum()
            elif config.head_concentration:  # one head: λ·T, nothing to learn from
                loss = loss + config.head_concentration * t
            if config.head_overlap:  # λ × mean over query rows of Σ_{i≠j} ⟨A_i[q], A_j[q]⟩ (padding is no query)
                total = weights.sum(dim=1)  # (B, N, N)
                per_row = (total * total).sum(-1) - (weights * weights).sum(dim=(1, 3))  # (B, N)
                real = torch.ones_like(per_row) if pad is None else (ids != pad).to(per_row.dtype)  # (B, N)
                loss = loss + config.head_overlap * (per_row * real).sum() / real.sum()
            return loss

    pad = get_task(config.task).pad
    model = Layer()
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    return torch, model, optimizer


def _torch_block(torch: Any, model: Any, optimizer: Any, batches: list) -> float:
    start = time.perf_counter()
    for ids, labels, scored in batches:
        optimizer.zero_grad()
        loss = model.loss(ids, labels, scored)
        loss.backward()
        optimizer.step()
    return (time.perf_counter() - start) / len(batches)


def bench_train(repeats: int = 5, steps: int = 50, config: TrainConfig | None = None,
                tick: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Median seconds per training step, numpy's and (when installed) each PyTorch side's, and the ratios
    within each round."""
    config = config or TrainConfig()
    task = get_task(config.task)
    rng = np.random.default_rng(config.seed)
    params = init_params(config, task, rng)
    stacked = {k: v[None].astype(STEP_DTYPE) for k, v in params.items()}  # mha train's stack of one model
    batches = []
    for _ in range(steps):
        ids, targets, keys = task.sample(rng, config.batch, config.length)  # (B, N), (T, B, N), (T, B, N)
        batches.append((ids, targets, task.scored(keys)))
    # mha train holds numpy's BLAS to one thread (core.train: a second thread only waits on these small
    # matrices); the bench times it as it runs, and gives PyTorch the same single thread.
    threads = 1
    sides: dict[str, tuple[Any, Any, Any]] = {}
    torch_version = None
    try:
        import torch

        torch.set_num_threads(threads)
        torch_version = torch.__version__
        for name, hand, dtype in TORCH_SIDES:
            sides[name] = _torch_model(config, {k: v.copy() for k, v in params.items()}, hand, dtype)
        torch_batches = [(torch.as_tensor(ids), torch.as_tensor(t), torch.as_tensor(asked))
                         for ids, t, asked in batches]
    except ImportError:
        pass
    adam = Adam(config.lr)
    order = ["numpy", *sides]
    times: dict[str, list[float]] = {name: [] for name in order}
    # One untimed round first: caches, allocators and torch's lazy set-up.
    for round_ in range(repeats + 1):
        shift = round_ % len(order)
        for name in order[shift:] + order[:shift]:  # rotated, so no side always follows the same one
            if name == "numpy":
                with single_threaded_blas():
                    t = _numpy_block(config, stacked, adam, batches)
            else:
                t = _torch_block(*sides[name], torch_batches)
            if round_:
                times[name].append(t)
        tick("timed block" if round_ else "warm-up")
    numpy_times = times.pop("numpy")
    numpy_step = statistics.median(numpy_times)
    theirs: dict[str, dict[str, Any]] = {name: {"median": statistics.median(t), "seconds": t,
                     "ratios": [a / b for a, b in zip(numpy_times, t)]} for name, t in times.items()}
    fastest = min(theirs, key=lambda name: theirs[name]["median"]) if theirs else None
    ratios = theirs[fastest]["ratios"] if fastest else []
    return {
        "config": {k: v for k, v in vars(config).items()}, "threads": threads, "steps_per_block": steps,
        "repeats": repeats, "numpy_dtype": np.dtype(STEP_DTYPE).name, "numpy_seconds_per_step": numpy_step,
        "torch_seconds_per_step": theirs[fastest]["median"] if fastest else None, "fastest_torch": fastest,
        "ratio": statistics.median(ratios) if ratios else None,
        "ratio_range": [min(ratios), max(ratios)] if ratios else None,
        "torch": theirs, "torch_version": torch_version, "numpy_times": numpy_times,
        "torch_times": times[fastest] if fastest else [],
        "machine": machine_info(with_torch=torch_version is not None),
    }


def train_table(report: dict[str, Any]) -> Any:
    """The two medians and their ratio, with what was timed underneath."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from mhacli.bench.runner import human_seconds
    from mhacli.render import theme

    c = report["config"]
    penalties = ", ".join(f"{name.removeprefix('head_')} {c[name]:g}" for name in
                          ("head_sparsity", "head_concentration", "head_overlap") if c.get(name))
    table = Table(box=None, header_style=theme.STYLE_TITLE, pad_edge=False)
    table.add_column("one training step")
    table.add_column("median", justify="right")
    table.add_column("numpy ÷ it, per round", justify="right")
    table.add_row(f"numpy, mha train's step ({report['numpy_dtype']})", human_seconds(report["numpy_seconds_per_step"]),
                  "")
    for name, side in report["torch"].items():
        r = side["ratios"]
        table.add_row(f"PyTorch {name}", human_seconds(side["median"]),
                      f"{statistics.median(r):.2f} ({min(r):.2f}–{max(r):.2f})")
    ratio = report["ratio"]
    verdict = ("PyTorch is not installed here: numpy alone was timed." if ratio is None else
               f"numpy ÷ the fastest PyTorch step ({report['fastest_torch']}) = {ratio:.2f}, range "
               f"{report['ratio_range'][0]:.2f}–{report['ratio_range'][1]:.2f} over the rounds "
               f"({'numpy faster' if ratio < 1 else 'PyTorch faster'}).")
    notes = [f"Model of 'mha train': task {c['task']}, d_model {c['d_model']}, {c['heads']} heads, batch "
             f"{c['batch']} × {c['length']} tokens, "
             f"{report['threads']} thread{'s' if report['threads'] != 1 else ''} each side.",
             *([f"Both sides add the penalties it trains with: {penalties}."] if penalties else []),
             f"{report['repeats']} round{'s' if report['repeats'] != 1 else ''} of one block of "
             f"{report['steps_per_block']} steps per side, after a warm-up round; the order rotates and each ratio "
             "is taken within a round.",
             machine_line(report["machine"])]
    return Group(Text("mha bench --train", style=theme.STYLE_TITLE), table, Text(verdict),
                 *(Text(n, style=theme.STYLE_DIM) for n in notes))
