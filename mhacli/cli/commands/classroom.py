"""The commands for class: samples, shapes, demo, quiz."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mhacli.cli import flow
from mhacli.cli.flow import (config_args, finish_run, open_figures, plan_outputs, prepare_run, publish,
                             query_position, read_files, shown_folder, source_args)
from mhacli.cli.options import (DEFAULT, MAX_TOKENS, AnswersOpt, CausalOpt, DModelOpt, DpiOpt, HeadsOpt,
                                HideRulesOpt, LessonOutOpt, LessonQueryOpt, ListJsonOpt, MarkdownOpt, NumbersJsonOpt,
                                PauseOpt, QuestionsOpt, SampleNameArg, SampleOpt, StepOpt, TextArg, TokenizerOpt,
                                TokensOpt, FileOpt, CacheDtypeOpt, KvHeadsOpt, LayersOpt, ModelConfigOpt, model_block,
                                QUIZ_SEED, unless_given)
from mhacli.cli.output import console, json_document, print_all, report_written, write_stdout
from mhacli.attention.errors import UsageError
from mhacli.request import DPI, ModelOptions  # the type of the model-option block, read by model_block at import

if TYPE_CHECKING:
    from mhacli.attention.kv import Sharing
    from mhacli.measures.lesson import TrainedPair
    from mhacli.request import Request

ONE_VS_MANY = "one-vs-many"  # the demo's last figure, written into --out beside the run's own
DEFAULT_SAMPLE = "cat"  # the lesson's and the quiz's text when none is given


def _json(kind: str, document: dict[str, Any]) -> None:
    write_stdout(json_document(kind, document) + "\n")


def _wait_for_enter(prompt: str) -> str:
    """Show ``prompt`` and read one line (EOFError when standard input is closed); unlike input(), the wait wakes
    every 0.1 s, so a signal landing before the read is handled at once, not at the next key."""
    import os
    import select

    if os.name == "nt":  # pragma: no cover - select() takes only sockets there
        return console.input(prompt)
    console.print(prompt, end="")
    while not select.select([sys.stdin], [], [], 0.1)[0]:
        pass
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line


def samples(name: SampleNameArg = None, tokenizer: TokenizerOpt = DEFAULT.tokenizer,
            json_out: ListJsonOpt = False) -> None:
    """List the ready-made texts, each chosen to teach one thing (or show one of them).

    Example: [bold]mha samples[/bold]   then   [bold]mha explain --sample repeated --weights designed[/bold]
    """
    from mhacli.attention.config import TOKENIZERS
    from mhacli.render.samples import sample_table_or_view

    if tokenizer not in TOKENIZERS:
        raise UsageError(f"unknown tokenizer {tokenizer!r}; choose one of: {', '.join(TOKENIZERS)}.")
    if json_out:
        from mhacli.io.samples import list_samples, load_sample

        chosen = [load_sample(name)] if name is not None else list_samples()
        _json("samples", {"samples": [{"name": s.name, "description": s.description, "text": s.text,
                                       "tokenizer": tokenizer, "tokens": s.tokens(tokenizer)} for s in chosen]})
        return
    print_all(sample_table_or_view(name, tokenizer))


def shapes(
    tokens: TokensOpt = 9,
    d_model: unless_given(DModelOpt, DEFAULT.d_model) = None,  # type: ignore[valid-type]
    heads: unless_given(HeadsOpt, DEFAULT.heads) = None,  # type: ignore[valid-type]
    causal: CausalOpt = DEFAULT.causal,
    kv_heads: KvHeadsOpt = None,
    layers: LayersOpt = None,
    dtype: CacheDtypeOpt = None,
    config: ModelConfigOpt = None,
    markdown: MarkdownOpt = False,
    json_out: NumbersJsonOpt = False,
) -> None:
    """Print every step's shape, multiply-adds and the parameter count for N, d and h: no text needed.

    For preparing slides: symbolic shapes (N×d/h) next to the numbers. With --kv-heads, --layers, --dtype or
    --config, also multi-head, grouped-query and multi-query attention side by side: their parameters, cost
    and the cache of keys and values for N tokens.

    Example: [bold]mha shapes --tokens 9 --d-model 16 --heads 4[/bold], or
    [bold]mha shapes --config config.json --tokens 4096[/bold] for a model's cache
    """
    from mhacli.attention.config import check_shapes

    if markdown and json_out:  # each chooses what stdout holds: JSON silently won
        raise UsageError("--markdown and --json each choose what is printed; give one of them.")
    given = "--d-model" if d_model is not None else "--heads" if heads is not None else None  # --config's own
    d_model = DEFAULT.d_model if d_model is None else d_model
    heads = DEFAULT.heads if heads is None else heads
    layer = _sharing(tokens, d_model, heads, kv_heads, layers, dtype, config, given)
    if layer is not None and layer.heads * layer.head_dim != layer.d_model:
        # A config whose head width is not d/h: the article's step table assumes d/h, the sizes do not.
        check_shapes(tokens, layer.heads * layer.head_dim, layer.heads)  # the width attention works in
        return _shapes(tokens, layer.d_model, layer.heads, causal, markdown, json_out, layer, table=False)
    d_model, heads = (layer.d_model, layer.heads) if layer is not None else (d_model, heads)
    check_shapes(tokens, d_model, heads)  # no arrays are made, so no memory limit: sizes of real models work
    _shapes(tokens, d_model, heads, causal, markdown, json_out, layer)


def _sharing(tokens: int, d_model: int, heads: int, kv_heads: int | None, layers: int | None,
             dtype: str | None, config: Path | None, given: str | None = None) -> Sharing | None:
    """The layer whose shared keys and values to show (None: none of the options that ask for it was given)."""
    from dataclasses import replace

    from mhacli.attention.kv import BYTES, CACHE_DTYPE, Sharing

    if dtype is not None and dtype not in BYTES:
        raise UsageError(f"--dtype must be one of {', '.join(BYTES)}; got {dtype!r}.")
    if config is not None:
        if given:
            raise UsageError(f"--config sets d and h from the model's config.json; drop {given}.")
        from mhacli.io.model_config import read_model_config

        layer = read_model_config(config, dtype)
        return replace(layer, kv_heads=layer.kv_heads if kv_heads is None else kv_heads,
                       layers=layer.layers if layers is None else layers)
    if kv_heads is None and layers is None and dtype is None:
        return None
    from mhacli.attention.config import check_shapes

    check_shapes(tokens, d_model, heads)  # before d/h is taken
    return Sharing(d_model, heads, heads if kv_heads is None else kv_heads, d_model // heads,
                   1 if layers is None else layers, dtype or CACHE_DTYPE)


def _shapes(tokens: int, d_model: int, heads: int, causal: bool, markdown: bool, json_out: bool,
            layer: Sharing | None = None, table: bool = True) -> None:
    """Every step's shape and cost for N, d and h, with ``layer``'s sharing and cache, as a table, Markdown or JSON;
    ``table=False`` for a config whose head width is not d/h: the sharing alone."""
    from mhacli.attention.kv import kv_document, sized_side_by_side
    from mhacli.attention.steps import ParameterCount, efficiency_sentence, split_cost, steps_for, total_madds

    if table:
        steps, params = steps_for(tokens, d_model, heads, causal), ParameterCount(d_model, heads)
    if json_out:
        document: dict[str, Any] = {"tokens": tokens, "d_model": d_model, "heads": heads}
        if table:
            document.update({"d_k": d_model // heads, "causal": causal, "steps": [s.to_dict() for s in steps],
                             "total_madds": total_madds(steps), "parameters": params.to_dict()})
        if layer is not None:
            document["kv"] = kv_document(layer, tokens)
        _json("shapes", document)
    elif markdown:
        from mhacli.render.kv import sharing_markdown
        from mhacli.render.shapes import shapes_markdown

        text = shapes_markdown(tokens, steps, params, causal, total_madds(steps)) if table else ""
        write_stdout(text + (sharing_markdown(sized_side_by_side(layer, tokens)) if layer is not None else ""))
    else:
        from rich.text import Text

        from mhacli.render.kv import sharing_view
        from mhacli.render.shapes import shapes_view

        shown: list[Any] = []
        if table:
            efficiency = efficiency_sentence(split_cost(tokens, d_model, heads, causal))
            shown += shapes_view(tokens, steps, params, causal, efficiency)
        if layer is not None:
            shown += [Text()] * table + [sharing_view(sized_side_by_side(layer, tokens))]
        print_all(*shown)


@model_block("weights", "layer", "words", "heads", "d_model", "seed", "tokenizer", "positions", "causal", "kv_heads")
def demo(
    text: TextArg = None,
    file: FileOpt = None,
    sample: SampleOpt = None,
    model: ModelOptions = None,  # type: ignore[assignment]  # the model-option block (options.MODEL_BLOCK)
    query: LessonQueryOpt = None,
    pause: PauseOpt = True,
    step: StepOpt = 1,
    out: LessonOutOpt = None,
    dpi: DpiOpt = DPI,
    hide_rules: HideRulesOpt = False,
) -> None:
    """A guided lesson: every step of multi-head attention, narrated, then shown on a real run.

    Waits for Enter between steps when run in a terminal (q quits); runs straight
    through with --no-pause or when standard input is not a terminal. Without a
    text it uses the sample 'cat'.

    Example: [bold]mha demo --sample repeated --weights designed[/bold]
    """
    _demo(flow.request(model=model, text=text, file=file, sample=sample, out=out, plots=out is not None, dpi=dpi,
                        query=query, hide_rules=hide_rules, default_sample=DEFAULT_SAMPLE), pause, step)


def _demo(request: Request, pause: bool, step: int) -> None:
    """The lesson on the request's run, step by step, then its figures and one-vs-many."""
    from mhacli.io.outputs import figure_names
    from mhacli.models.shipped import SHIPPED_NAMES, UNTRAINED_GRAMMAR
    from mhacli.pipeline import with_lesson
    from mhacli.render.lesson import lesson, next_steps, present

    o, src, weights = request.outputs, request.source, request.model.weights
    prepared = prepare_run(request.text or "", request.model.given())
    config = prepared.config
    # The run's figures and the lesson's last one: every path checked before any work (an input, a link).
    fmt, dpi = o.fmt, o.dpi
    names = [*figure_names(config.heads, fmt), f"{ONE_VS_MANY}.{fmt}"]
    plan = plan_outputs(plots=o.out is not None, out=o.out, fmt=fmt, heads=config.heads,
                        inputs=read_files(src.file, weights), names=names)
    open_figures(plan, config, prepared.n_tokens, MAX_TOKENS, fmt, dpi)
    drawing = plan.out is not None
    result = finish_run(prepared, single=drawing)
    trace = result.trace
    position = query_position(trace, o.query)
    result = with_lesson(result, position)
    assert result.lesson is not None and result.split_diff is not None  # a run of the tool: it has both
    pairs = shipped_pairs()
    steps = lesson(trace, result.analysis, result.lesson, intro=_intro(src.sample, o.hide_rules),
                   width=console.width, figures_at=shown_folder(plan.out), hide_rules=o.hide_rules, pairs=pairs,
                   split_diff=result.split_diff)
    if not 1 <= step <= len(steps):
        raise UsageError(f"--step must be from 1 to {len(steps)}, got {step}.")
    present(console, steps, pause=pause and sys.stdin.isatty(), start=step, wait=_wait_for_enter,
            closing=next_steps(trace, source_args(src.text, src.file, src.sample),
                               config_args(config, skip=("weights",)),
                               weights_name=weights if weights in (*SHIPPED_NAMES, UNTRAINED_GRAMMAR) else None))
    written = publish(result, o, plan, position, report=False)
    if plan.out is not None:
        from mhacli.io.files import atomic_write_bytes
        from mhacli.render.figures.save import drawn_one_vs_many

        figure = drawn_one_vs_many(pairs, fmt, dpi, o.hide_rules)
        written.append(str(atomic_write_bytes(Path(plan.out) / f"{ONE_VS_MANY}.{fmt}", figure)))
    report_written(written)


def _intro(sample: str | None, hide_rules: bool) -> str:
    """The lesson's first words about its text: the sample's name, and what it shows unless --hide-rules."""
    if sample is None:
        return ""
    from mhacli.io.samples import load_sample

    # A description may name the rule a sample shows off: --hide-rules keeps it for later.
    return f"The text is the sample '{sample}'" + ("." if hide_rules else f": {load_sample(sample).description}")


def shipped_pairs() -> tuple[TrainedPair, ...]:
    """The shipped one-head-against-many pairs, each on its text, read from mhacli/data (no training in the
    lesson's time): letters first (the wide gap), then grammar."""
    from mhacli.measures.lesson import GRAMMAR_SENTENCE, LETTERS_SEQUENCE, trained_pair
    from mhacli.attention.tokenize import tokenize
    from mhacli.models.shipped import shipped_model_path
    from mhacli.models.trained import load_trained

    pairs = []
    for name, text in (("trained", LETTERS_SEQUENCE), ("grammar", GRAMMAR_SENTENCE)):
        alone, alone_metrics = load_trained(shipped_model_path(alone=True, name=name))
        heads, heads_metrics = load_trained(shipped_model_path(name=name))
        pairs.append(trained_pair(alone, alone_metrics, heads, heads_metrics, tuple(tokenize(text, "word"))))
    return tuple(pairs)


@model_block("seed", "weights", "layer", "words", "heads", "d_model", "causal", "kv_heads", helps={"seed": QUIZ_SEED})
def quiz(
    text: TextArg = None,
    file: FileOpt = None,
    sample: SampleOpt = None,
    model: ModelOptions = None,  # type: ignore[assignment]  # the model-option block (options.MODEL_BLOCK)
    questions: QuestionsOpt = 5,
    answers: AnswersOpt = False,
    json_out: ListJsonOpt = False,
) -> None:
    """Homework: questions about one real run (shapes, parameters, where a head looks).

    The seed picks the questions (and the weights, unless a trained model brings
    its own), so the same seed gives the same quiz; --answers prints the answers,
    read from the run itself. Without a text it uses the sample 'cat'.

    With --kv-heads g (fewer than --heads) it opens with two questions on shared
    keys and values: how many K^j the layer builds and which query heads read each
    (g of them), and how many numbers per token its KV cache keeps against g = h.

    Example: [bold]mha quiz --sample repeated --seed 7[/bold], then the same with [bold]--answers[/bold];
    shared keys and values: [bold]mha quiz --heads 4 --kv-heads 2[/bold]
    """
    from mhacli.measures.quiz import MAX_QUESTIONS

    if isinstance(questions, bool) or not 1 <= questions <= MAX_QUESTIONS:
        raise UsageError(f"--questions must be from 1 to {MAX_QUESTIONS}, got {questions}.")
    _quiz(flow.request(model=model, text=text, file=file, sample=sample, json_out=json_out,
                       default_sample=DEFAULT_SAMPLE), questions, answers)


def _quiz(request: Request, questions: int, answers: bool) -> None:
    """The quiz on the request's run: its title, questions, the command that checks them (as JSON with --json)."""
    import shlex

    from mhacli.attention.messages import printable
    from mhacli.measures.quiz import make_quiz, quiz_title
    from mhacli.attention.tokenize import label
    from mhacli.render.quiz import quiz_view

    src, weights = request.source, request.model.weights
    options = request.model.given()
    seed = options.pop("seed", DEFAULT.seed)
    prepared = prepare_run(request.text or "", options)
    if prepared.model is None and request.model.seed is not None:  # the seed picks the weights too, unless trained
        prepared = prepare_run(request.text or "", {**options, "seed": seed})
    result = finish_run(prepared)
    trace = result.trace
    asked = make_quiz(trace, seed, questions, analysis=result.analysis)
    source = source_args(src.text, src.file, src.sample)
    # From the run's config, not the options: a weights file sets d, h and the kind ('pytorch', 'trained'),
    # and its path (which may hold escape sequences) is never echoed raw.
    title = quiz_title(trace, len(asked), source if src.text is None else f"“{label(src.text, 60)}”", seed)
    # --weights as typed ('grammar', a file): the run's kind ('trained', 'pytorch') would run another model.
    typed = [] if weights in (None, DEFAULT.weights) else [f"--weights {printable(shlex.quote(weights))}"]
    words = request.model.words
    typed += [f"--words {printable(shlex.quote(' '.join(words)))}"] if words else []  # the check reads them too
    args = config_args(prepared.config, skip=("weights",))
    if weights is not None and Path(weights).is_file() and "--heads" not in args:  # a file may not record h
        args = f"--heads {prepared.config.heads} {args}".strip()
    check = " ".join(part for part in ["mha explain", source, args, *typed] if part)
    if request.outputs.json:
        _json("quiz", {"title": title, "check": check, "seed": seed,
                       "questions": [{"topic": q.topic, "question": q.prompt, "check": q.check,
                                      **({"answer": q.answer} if answers else {})} for q in asked]})
        return
    print_all(*quiz_view(asked, answers, title, check))


__all__ = ["DEFAULT_SAMPLE", "demo", "quiz", "samples", "shapes", "shipped_pairs"]
