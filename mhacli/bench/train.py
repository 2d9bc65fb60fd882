"""``mha bench --train``: a training step of the default model in numpy, beside the same model in PyTorch.

Both sides get the same sizes, the same float64 numbers, the same batches and
the same number of threads; their timed blocks alternate (numpy, torch, numpy,
…) so a machine that slows down mid-run slows both.  The ratio is numpy's
median step over torch's (below 1: numpy is faster).
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import numpy as np

from mhacli.bench.machine import machine_info, machine_line
from mhacli.attention.schedule import single_threaded_blas
from mhacli.grammar.tasks import get_task
from mhacli.grammar.passes import loss_and_grads
from mhacli.grammar.train import Adam, TrainConfig, init_params, trainable


def _numpy_block(config: TrainConfig, params: dict, adam: Adam, batches: list) -> float:
    names = trainable(config)
    pad = get_task(config.task).pad
    start = time.perf_counter()
    for ids, targets, scored in batches:
        _, grads, _ = numpy_loss(config, params, ids, targets, scored, pad)
        adam.step(params, grads, names)
    return (time.perf_counter() - start) / len(batches)


def numpy_loss(config: TrainConfig, params: dict, ids: Any, targets: Any, scored: Any,
               pad: int | None) -> tuple[float, dict, Any]:
    """The loss and gradients one step of ``mha train`` computes (core.train's call), penalties included."""
    return loss_and_grads(params, ids, targets, config.heads, config.causal, pad, config.word_values,
                          scored if config.scored_loss else None, config.head_sparsity, None,
                          config.head_concentration, config.head_overlap)


def _torch_model(config: TrainConfig, params: dict) -> tuple[Any, Any, Any]:
    import torch

    class Layer(torch.nn.Module):
        """The same layer: learned table, fixed positions, nn.MultiheadAttention without biases, readouts."""

        def __init__(self) -> None:
            super().__init__()
            self.embedding = torch.nn.Parameter(torch.tensor(params["embedding"]))
            self.register_buffer("positions", torch.tensor(params["positions"]))
            self.attention = torch.nn.MultiheadAttention(config.d_model, config.heads, bias=False,
                                                         batch_first=True, dtype=torch.float64)
            with torch.no_grad():
                self.attention.in_proj_weight.copy_(torch.tensor(np.concatenate(
                    [params["W_q"], params["W_k"], params["W_v"]])))
                self.attention.out_proj.weight.copy_(torch.tensor(params["W_o"]))
            self.readout = torch.nn.Parameter(torch.tensor(params["readout"]))

        def forward(self, ids: Any) -> Any:
            x = self.embedding[ids] + self.positions[: ids.shape[1]]  # type: ignore[index]
            values = self.embedding[ids] if config.word_values else x  # V = E W_vᵀ, as the numpy side
            # The grammar's padding, masked as the numpy side masks it (no query looks past its sentence).
            padding = None if pad is None else ids == pad
            # Per-head weights only when the overlap penalty reads them (they cost PyTorch its fused path).
            return self.attention(x, x, values, need_weights=bool(config.head_overlap),
                                  average_attn_weights=False, key_padding_mask=padding)  # (B, N, d), (B, h, N, N)

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
            if config.head_overlap:  # λ × mean over query rows of Σ_{i≠j} ⟨A_i[q], A_j[q]⟩
                total = weights.sum(dim=1)  # (B, N, N)
                rows = weights.shape[0] * weights.shape[2]
                loss = loss + config.head_overlap * ((total * total).sum() - (weights * weights).sum()) / rows
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
    """Median seconds per training step, numpy and (when installed) PyTorch, and their ratio."""
    config = config or TrainConfig()
    task = get_task(config.task)
    rng = np.random.default_rng(config.seed)
    params = init_params(config, task, rng)
    batches = []
    for _ in range(steps):
        ids, targets, keys = task.sample(rng, config.batch, config.length)  # (B, N), (T, B, N), (T, B, N)
        batches.append((ids, targets, task.scored(keys)))
    # mha train holds numpy's BLAS to one thread (core.train: a second thread only waits on these small
    # matrices); the bench times it as it runs, and gives PyTorch the same single thread.
    threads = 1
    torch_side = None
    try:
        import torch

        torch.set_num_threads(threads)
        torch_side = _torch_model(config, {k: v.copy() for k, v in params.items()})
        torch_batches = [(torch.as_tensor(ids), torch.as_tensor(t), torch.as_tensor(asked))
                         for ids, t, asked in batches]
    except ImportError:
        pass
    adam = Adam(config.lr)
    numpy_times: list[float] = []
    torch_times: list[float] = []
    # One untimed block each first: caches, allocators and torch's lazy set-up.
    for timed in [False] + [True] * repeats:
        with single_threaded_blas():
            t = _numpy_block(config, params, adam, batches)
        if timed:
            numpy_times.append(t)
        if torch_side is not None:
            t = _torch_block(*torch_side, torch_batches)
            if timed:
                torch_times.append(t)
        tick("timed block" if timed else "warm-up")
    numpy_step = statistics.median(numpy_times)
    torch_step = statistics.median(torch_times) if torch_times else None
    return {
        "config": {k: v for k, v in vars(config).items()}, "threads": threads, "steps_per_block": steps,
        "repeats": repeats, "numpy_seconds_per_step": numpy_step, "torch_seconds_per_step": torch_step,
        "ratio": numpy_step / torch_step if torch_step else None,
        "torch_version": torch_side[0].__version__ if torch_side is not None else None,
        "numpy_times": numpy_times, "torch_times": torch_times,
        "machine": machine_info(with_torch=torch_side is not None),
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
    table.add_row("numpy (mhacli's backward pass, Adam)", human_seconds(report["numpy_seconds_per_step"]))
    torch_step = report["torch_seconds_per_step"]
    if torch_step is not None:
        table.add_row(f"PyTorch {report['torch_version']} autograd, Adam", human_seconds(torch_step))
    ratio = report["ratio"]
    verdict = ("PyTorch is not installed here: numpy alone was timed." if ratio is None else
               f"numpy ÷ PyTorch = {ratio:.2f} ({'numpy faster' if ratio < 1 else 'PyTorch faster'}).")
    notes = [f"Model of 'mha train': task {c['task']}, d_model {c['d_model']}, {c['heads']} heads, batch "
             f"{c['batch']} × {c['length']} tokens, float64, "
             f"{report['threads']} thread{'s' if report['threads'] != 1 else ''} each side.",
             *([f"Both sides add the penalties it trains with: {penalties}."] if penalties else []),
             f"Median of {report['repeats']} block{'s' if report['repeats'] != 1 else ''} of "
             f"{report['steps_per_block']} steps after a warm-up block; "
             "numpy and PyTorch blocks alternate.",
             machine_line(report["machine"])]
    return Group(Text("mha bench --train", style=theme.STYLE_TITLE), table, Text(verdict),
                 *(Text(n, style=theme.STYLE_DIM) for n in notes))
