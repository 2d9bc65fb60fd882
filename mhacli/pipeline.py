"""One run, assembled in one place: text (or tokens), options and weights in, one immutable :class:`Run` out.

Between the command line (or a notebook, a test) and the core: it resolves ``--weights`` once, builds the
:class:`~mhacli.attention.config.Config` once, refuses what would not fit before any array exists, then computes the
trace and every measure the renderers read, so renderers and writers compute nothing. Two steps, because a
command decides its outputs between them: :func:`prepare` (cheap checks) and :meth:`Prepared.run` (the arrays).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Union

from mhacli.attention.config import WEIGHT_KINDS, Config
from mhacli.attention.errors import UsageError
from mhacli.request import Request

if TYPE_CHECKING:
    from mhacli.measures.analysis import Analysis
    from mhacli.grammar.card import Card
    from mhacli.measures.compare import Comparison, TrainedApart
    from mhacli.grammar.knockout import Knockout
    from mhacli.measures.lesson import LessonNumbers
    from mhacli.grammar.score import Score
    from mhacli.attention.trace import Trace
    from mhacli.grammar.model import TrainedModel
    from mhacli.measures.view import AttentionView
    from mhacli.models.state_dict import AttentionWeights
    from mhacli.measures.window import View

    Shown = Union[Trace, AttentionView]

#: --weights names the core builds itself; any other string is the shipped model or a file (io resolves it).
_BUILT_IN = ("random", "designed")


@dataclass(frozen=True)
class Window:
    """Which tokens one picture shows (``view``) and the run's measures for exactly those tokens."""

    view: View
    analysis: Analysis
    single_keys: Any = None  # (N,) the one-head contrast's top key per query, when the picture shows it
    showcase: tuple[int, ...] = ()  # the window's queries, where the heads differ most first (Analysis's ranking)


@dataclass(frozen=True)
class Page:
    """The page's window (its first ``max_tokens`` tokens) and the measures for it, one per layer shown."""

    max_tokens: int
    layers: tuple[Analysis, ...]
    start_query: int = 0  # the query the page opens on: where the heads' top keys differ most


@dataclass(frozen=True)
class CardShown:
    """What a report card's surfaces print (its table, figure, names and sentences), every word and number
    computed once here from the :class:`~mhacli.grammar.card.Card`: the renderers only read it."""

    rows: tuple[str, ...]  # (R,) each relation row in a few words (narrate.card_row_name)
    queries: tuple[int, ...]  # (R,) held-out queries of each row
    rate: Any  # (R, h) held-out hit rates, read-only
    low: Any  # (R, h) lower ends of the 95 % intervals, read-only
    high: Any  # (R, h) upper ends, read-only
    named: Any  # (R, h) bool, read-only: where the card names a head for a row (evidence.card_word)
    heading: str  # the table's heading line
    figure_title: str  # card.png's title
    caption: str  # what the card was measured on (Card.caption)
    rule: str  # how a cell is measured and a head named (narrate.card_rule_sentence)
    outline: str  # what card.png's outlines mean (narrate.card_outline_note)
    labels: tuple[str, ...]  # (h,) each head's name and its evidence (Card.labels)
    sentence: tuple[str, ...] = ()  # on this run's sentence: where the card's names and it part (explain)
    chosen: str | None = None  # how the shipped model's seed was chosen (io.shipped.chosen_note)
    knockout: tuple[str, ...] = ()  # where the card and a knockout of its model disagree (mha train --knockout)
    accuracy: str | None = None  # the model's held-out accuracy (core.score.Score.caption), on the card's sentences
    names: tuple[str, ...] = ()  # (h,) each head's name (Card.name): the one wording every surface prints
    data: Any = None  # the card as JSON (Card.to_dict, with the held-out accuracy): explain --json carries it
    bases: tuple[tuple[str, ...], ...] = ()  # (R, h) each cell's baselines as printed (narrate.card_bases)

    @property
    def heads(self) -> int:
        return len(self.labels)


def card_shown(card: Card, *, heading: str | None = None, figure_title: str | None = None,
               parse: object | None = None, weights: Any = None, causal: bool = False,
               chosen: str | None = None, knock: Knockout | None = None, score: Score | None = None) -> CardShown:
    """Everything the card's surfaces print, once: ``parse`` and ``weights`` (h, N, N) of a sentence add the lines
    on it (:func:`mhacli.measures.narrate.card_sentence_lines`), ``knock`` where a knockout and the card part
    (:func:`mhacli.measures.narrate.knockout_sentences`), ``score`` the model's held-out accuracy under the card;
    ``heading`` and ``figure_title`` replace the defaults."""
    import numpy as np

    from mhacli.measures import narrate
    from mhacli.grammar.card import read_only

    low, high = card.interval  # (R, h) each
    named = np.array([[card.named(r, i) for i in range(card.heads)] for r in range(len(card.rows))])  # (R, h)
    sentence = () if parse is None else tuple(narrate.card_sentence_lines(card, parse, weights, causal))  # type: ignore[arg-type]
    return CardShown(
        rows=tuple(narrate.card_row_name(row) for row in card.rows), queries=tuple(int(n) for n in card.queries),
        rate=read_only(card.rate), low=read_only(low), high=read_only(high), named=read_only(named),
        heading=heading or f"Report card: held-out hit rate per relation and head ({card.sentences:,} sentences)",
        figure_title=figure_title or "Report card: held-out hit rate (95% interval)", caption=card.caption(),
        rule=narrate.card_rule_sentence(card), outline=narrate.card_outline_note(card), labels=card.labels,
        bases=narrate.card_bases(card),
        sentence=sentence, chosen=chosen,
        knockout=() if knock is None else tuple(narrate.knockout_sentences(card, knock)),
        accuracy=None if score is None else score.caption(), names=tuple(card.name(i) for i in range(card.heads)),
        data={**card.to_dict(), **({} if score is None else {"held_out_accuracy": score.to_dict()})})


@dataclass(frozen=True)
class Run:
    """One run's result, read-only: the config, the trace, and every measure of it, computed once.

    ``trace``: a Trace or an attention view (``config`` None), whose attributes also read through the result;
    ``single``, ``comparison``: the one-head contrast; ``layers``: a view's every layer; ``lesson``; ``parse`` and
    ``mapped``: what a grammar model read in the sentence (its parse; each --words word and the word it reads as).
    """

    config: Config | None
    trace: Any  # Trace | AttentionView (Any: the attribute pass-through below reads it by name)
    analysis: Analysis
    notes: tuple[str, ...] = ()
    single: Trace | None = None
    comparison: Comparison | None = None
    layers: tuple[Analysis, ...] | None = None
    lesson: LessonNumbers | None = None
    parse: Any = None  # the grammar's Parse of the sentence (mhacli.grammar.grammar), when a grammar model read one
    mapped: tuple[tuple[str, str, str], ...] = ()  # --words: (word, grammar class, the word it is read as)
    split_diff: float | None = None  # the split check (Trace.split_equals_direct), once; None for a view
    figures: Window | None = None  # the figures' window (--max-tokens, --query), when they are drawn
    magnified: Window | None = None  # the magnifiers' window (at most core.window.MAGNIFIER_MAX_TOKENS tokens)
    page: Page | None = None  # the page's window and its measures (:func:`paged`)
    card: CardShown | None = None  # a grammar model's report card as ``mha explain`` shows it, on this sentence

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # copy, pickle and dataclass machinery ask for dunders: never the trace's
            raise AttributeError(name)
        return getattr(object.__getattribute__(self, "trace"), name)

    def __repr__(self) -> str:
        return f"<mhacli Run: {self.analysis.num_heads} heads over {len(self.analysis.tokens)} tokens>\n" + repr(
            self.trace)

    def _repr_html_(self) -> str | None:
        """Jupyter shows a run as its page, its own measures drawn (see mhacli.notebook)."""
        from mhacli.attention.display import page_of

        return page_of(self)


@dataclass(frozen=True)
class Prepared:
    """A run decided but not computed: weights resolved and checked, Config built, tokens counted."""

    config: Config
    tokens: tuple[str, ...]
    own: AttentionWeights | None = None  # your nn.MultiheadAttention's weights
    model: TrainedModel | None = None  # a trained model (its own embedding, positions and weights)
    notes: tuple[str, ...] = ()  # what a reader must know about these tokens under these weights
    shipped: str | None = None  # the --weights name of a model shipped in the package ("trained", "grammar")
    caution: str | None = None  # a trained model run outside what it saw: said on every surface (Analysis.caution)

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    def run(self, *, single: bool = False, compare: bool = False) -> Run:
        """The trace and its measures.  ``single``: also the one-head contrast; ``compare``: and the comparison."""
        from mhacli.measures.analysis import analyse
        from mhacli.attention.trace import run_tokens

        trace = run_tokens(self.tokens, self.config, self.own, self.model)
        parse, mapped = self.model.sentence(trace.tokens) if self.model is not None else (None, ())
        card = self._card(trace, parse)
        one, apart = self._single(trace) if single or compare else (None, None)
        comparison = None
        if compare:
            from mhacli.measures.compare import compare as measure

            comparison = measure(trace, one, apart, parse=parse, mapped=mapped)  # type: ignore[arg-type]
            if comparison.analysis is not None and self.caution is not None:
                comparison = replace(comparison, analysis=self._cautioned(comparison.analysis))
        analysis = comparison.analysis if comparison is not None and comparison.analysis is not None else \
            self._cautioned(analyse(trace, parse=parse, mapped=mapped))
        return Run(config=self.config, trace=trace, analysis=analysis, notes=self.notes, single=one,
                   comparison=comparison, split_diff=trace.split_equals_direct(), card=card, parse=parse,
                   mapped=mapped)

    def _card(self, trace: Trace, parse: Any) -> CardShown | None:
        """A model's report card as shown under a run: labelled as measured in training, then this sentence."""
        card = getattr(self.model, "card", None)
        if card is None:
            return None
        from mhacli.grammar.score import score
        from mhacli.models.shipped import chosen_note

        return card_shown(card, heading=f"The model's report card, {card.caption()}, not on this sentence",
                          parse=parse, weights=trace.weights, causal=bool(self.config.causal),
                          chosen=chosen_note(self.shipped, self.config.seed), score=score(self.model))  # type: ignore[arg-type]

    def _cautioned(self, analysis: Analysis) -> Analysis:
        return analysis if self.caution is None else replace(analysis, caution=self.caution)

    def _single(self, trace: Trace) -> tuple[Trace, TrainedApart | None]:
        """One head of size d: trained alone on the same task for the shipped model, else the same matrices."""
        if self.shipped is not None:  # a shipped model has a one-head twin trained alone on its task
            from mhacli.models.trained import shipped_apart, trained_trace

            alone, apart = shipped_apart(self.shipped)
            alone = _with_words(alone, getattr(self.model, "words", None))  # the lone head reads them alike
            return trained_trace(alone, trace.tokens), apart
        from mhacli.measures.compare import single_head

        return single_head(trace), None


def _resolved(options: dict[str, Any]) -> tuple[dict[str, Any], AttentionWeights | None, TrainedModel | None]:
    """``options`` with the weights resolved once: a name or path read through io, an object taken as given.
    ``layer`` (a number from 0, or a name) picks a layer of a state dict holding several; your own weights need
    ``heads`` unless their file records it. Numbers and flags are checked as the Python API gives them.
    """
    from mhacli.attention.checks import flag, whole_number
    from mhacli.models.state_dict import AttentionWeights as Weights

    options = dict(options)
    layer = options.pop("layer", None)
    for name in ("heads", "d_model", "seed"):
        if options.get(name) is not None:
            options[name] = whole_number(name, options[name])
    for name in ("causal", "positions"):
        if name in options:
            options[name] = flag(name, options[name])
    given = options.get("weights", "random")
    if isinstance(given, str) and given == "":  # Path('') is '.': "weights file '.' is a folder" named nothing given
        raise UsageError("{weights:name} is empty (''); give one of " + ", ".join(WEIGHT_KINDS) + " or a weights "
                         "file's name.", weights="")
    if isinstance(given, os.PathLike) or (isinstance(given, str) and given not in _BUILT_IN):
        from mhacli.models.weights import resolve_weights

        given = resolve_weights(str(os.fspath(given)), heads=options.get("heads"), layer=layer)
    elif isinstance(given, str):
        if layer is not None:
            raise UsageError("{layer:name} picks one layer of a weights file holding several ({weights:name} "
                             "FILE); drop it, or give the file.", layer=layer, weights=given)
    elif hasattr(given, "run_inputs") and hasattr(given, "labels"):  # a trained model (grammar.model.TrainedModel)
        if layer is not None:
            from mhacli.models.weights import no_layer

            no_layer(layer, "a trained model")
    else:
        from mhacli.models.weights import own_weights

        given = own_weights(given, heads=options.get("heads"), layer=layer)
    if isinstance(given, str):
        return options, None, None
    if hasattr(given, "run_inputs") and hasattr(given, "labels"):  # as given, or read from its file
        from mhacli.attention.checks import trained_options

        source = getattr(given, "weight_source", "trained")  # "untrained": the model's layer before training
        return trained_options(options, getattr(given, "config"), source), None, given
    mine: Weights = given
    options["heads"] = mine.heads  # given, or recorded by the file: a state dict alone records none
    if mine.causal and "causal" not in options:
        options["causal"] = True  # GPT-2's layers only ever saw earlier tokens
    if mine.kv_heads is not None and mine.kv_heads != mine.heads:
        options["kv_heads"] = mine.kv_heads  # a Llama-style layer's shared keys and values, read from its shapes
    return {**options, "weights": "pytorch", "d_model": options.get("d_model", mine.d_model)}, mine, None


def _with_words(model: Any, words: object) -> Any:
    """``model`` reading ``words`` (``{"park": "place"}``, ``"park=place"``) by their grammar class; refused
    without a grammar model (the words are checked first, so a bad pair is said as such)."""
    from mhacli.grammar.words import word_map

    mapped = word_map(words)
    if not mapped:
        return model
    if model is None:
        raise UsageError("{words:name} maps new words to classes of the grammar, so it needs a grammar model: "
                         "add {weights} (or a model trained with {task}).", words="", weights="grammar",
                         task="grammar")
    return model.with_words(mapped)


def _tokens(text: str, config: Config, json: bool, limit: int) -> tuple[str, ...]:
    """The text's tokens, refused when empty or when the run would not fit in memory, before any array."""
    from mhacli.attention.tokenize import tokenize

    # Every chunk is a token at least: a book is refused at once, before it is tokenized.
    config.check_fits(len(text.split()), limit=limit, json=json, at_least=True)
    tokens = tuple(tokenize(text, config.tokenizer))
    if not tokens:
        raise UsageError(
            f"the text has no tokens under the {config.tokenizer!r} tokenizer: it holds only spaces, "
            "control or invisible characters; give some words."
        )
    return tokens


def prepare(text: str | None = None, *, tokens: Any = None, json: bool = False, **options: Any) -> Prepared:
    """Resolve the weights, build the Config and count the tokens of one run; compute nothing yet.

    ``options`` are Config fields; those not given come from the weights (a file's d, a trained model's heads) or
    Config's defaults. ``json``: the run will also print every array as JSON, which the memory check counts.
    """
    from mhacli.io.memory import memory_limit_bytes

    from mhacli.attention.checks import named_options, strings, text_argument
    from mhacli.models.shipped import SHIPPED_NAMES

    unknown = sorted(set(options) - {f.name for f in fields(Config)} - {"words", "layer"})
    if unknown:  # as Python says it for any function, naming run()'s options instead of Config.__init__
        raise TypeError(f"run() got an unexpected keyword argument {unknown[0]!r}; its options are text, tokens, "
                        f"words, layer and Config's fields: {', '.join(f.name for f in fields(Config))}")
    options = named_options(options)  # " Grammar" is grammar: one rule for every name (issue 31)
    words = options.pop("words", None)  # new words mapped to grammar classes (core.words): read by the model
    text = text_argument(text)  # run(123): a usage error
    tokens = strings("tokens", tokens, "one per position", ids=False)  # ids refused: they would label every row
    given = options.get("weights")
    shipped = given if isinstance(given, str) and given in SHIPPED_NAMES else None
    if options.get("kv_heads") is not None and given not in (None, "random"):
        # A trained model or a file fixes its key/value heads; the designed heads each need their own keys.
        raise UsageError("{kv_heads:name} shares keys and values among the tool's random weights only; {weights} "
                         "fixes its own (drop {kv_heads:name}).", kv_heads=options["kv_heads"],
                         weights=given if isinstance(given, str) else "your weights")
    options, mine, model = _resolved(dict(options))
    model = _with_words(model, words)
    config = Config(**options)
    limit = memory_limit_bytes()  # the host, read once for the run
    config.check_fits(1, limit=limit)  # the weights alone, before the text is even tokenized
    if tokens is None:
        toks = _tokens(text or "", config, json, limit)
    else:
        toks = tuple(str(t) for t in tokens)
        if not toks:
            raise UsageError("the text has no tokens to attend over; give at least one word.")
    config.check_fits(len(toks), limit=limit, json=json)
    if config.weights == "designed":
        from mhacli.attention.designed import check_designable

        check_designable(len(toks), config)
    notes: tuple[str, ...] = ()
    caution = None
    if mine is not None and (mine.name or mine.decoder or (mine.causal and not config.causal)):  # which ran, how
        from mhacli.models.state_dict import causal_note

        notes = (f"ran the self-attention {mine.name or 'of your model'}{causal_note(mine, bool(config.causal))}.",)
    if model is not None and hasattr(model, "stand_ins"):
        from mhacli.models.trained import trained_caution, trained_notes

        notes = tuple(trained_notes(model, toks))  # type: ignore[arg-type]
        from mhacli.grammar.words import reading_note

        mapped = getattr(model, "words")
        said = reading_note(toks, mapped)
        unused = [w for w, _ in mapped.pairs if mapped.in_text(toks).class_of(w) is None]
        notes += (said + ".",) if said else ()
        notes += (f"{', '.join(unused)}: mapped, but not in the text.",) if unused else ()
        caution = "; ".join(filter(None, (getattr(model, "caution", None), trained_caution(model, toks)))) or None  # type: ignore[arg-type]
    return Prepared(config=config, tokens=toks, own=mine, model=model, notes=notes, shipped=shipped,
                    caution=caution)


def run(text: str | Request | None = None, *, tokens: Any = None, **options: Any) -> Run:
    """Run multi-head attention over ``text`` (or ``tokens``) and measure it: one immutable :class:`Run`.

    ``text`` may be a :class:`~mhacli.request.Request`; else keyword options build one: ``weights`` is a kind, a
    file's path or weights themselves; ``words`` maps new words to grammar classes; the rest are Config fields.
    """
    if not isinstance(text, Request):  # the API's keywords, checked as given (causal=None is refused, not "not given")
        if text is None and tokens is None:
            raise UsageError('run() needs a text or tokens: run("the cat sat on the mat", heads=4) or '
                             'run(tokens=["the", "cat"]).')
        if text is not None and tokens is not None:  # the tokens won, and the text was dropped without a word
            raise UsageError("run() takes a text or tokens, not both: the tokens are the text already split.")
        return prepare(text, tokens=tokens, **options).run()
    if options or tokens is not None:
        raise TypeError("run(request) takes the request alone: its model options, text and tokens are in it")
    if text.text is not None and text.tokens is not None:  # as the keywords: the tokens won, the text was dropped
        raise UsageError("a Request takes a text or tokens, not both: the tokens are the text already split.")
    outputs = text.outputs
    return prepare(text.text, tokens=text.tokens, json=outputs.json and outputs.json_arrays,
                   **text.model.given()).run()


def result_of(shown: Shown, *, single: bool = False, layers: bool = False, parse: Any = None,
              mapped: tuple[tuple[str, str, str], ...] = ()) -> Run:
    """The result of a run made elsewhere: a saved trace (``mha show``, with what its grammar model read:
    ``parse``, ``mapped``), the worked example, or an attention view (its shown layer; ``layers``: every
    layer's analysis too, for the page's layer picker)."""
    from mhacli.measures.analysis import analyse

    config = getattr(shown, "config", None)
    one = None
    if single and config is not None:
        from mhacli.measures.compare import single_head

        one = single_head(shown)  # type: ignore[arg-type]
    def measured(seen: Shown) -> Analysis:  # a view's note (causal=False on causal weights) said with its measures
        note = getattr(seen, "note", None)
        measures = analyse(seen, parse=parse, mapped=mapped)
        return measures if note is None else replace(measures, caution=note)

    every = None
    if layers and config is None and shown.n_layers > 1:  # type: ignore[union-attr]
        every = tuple(measured(shown.at_layer(k)) for k in range(shown.n_layers))  # type: ignore[union-attr]
    return Run(config=config, trace=shown, analysis=measured(shown), single=one, layers=every, parse=parse,
               mapped=mapped, split_diff=None if config is None else shown.split_equals_direct())  # type: ignore[union-attr]


def with_lesson(result: Run, query: int | None = None) -> Run:
    """``result`` with the lesson's numbers for ``query`` (default: the lesson's own choice of query)."""
    from mhacli.measures.lesson import lesson_numbers

    return replace(result, lesson=lesson_numbers(result.trace, query))


def shown(result: Run, max_tokens: int = 40, query: int | None = None, *, magnified: int | None = None) -> Run:
    """``result`` with the figures' window chosen: the first ``max_tokens`` tokens, or a window on ``query``
    when it lies beyond them, and the magnifiers' (at most ``magnified`` tokens of it), each measured."""
    from mhacli.measures.window import MAGNIFIER_MAX_TOKENS, token_view

    magnified = MAGNIFIER_MAX_TOKENS if magnified is None else magnified
    view = token_view(len(result.analysis.tokens), max_tokens, query)
    glass = view if view.n <= magnified else token_view(view.n_total, magnified, view.query)
    keys = None
    if result.single is not None and result.config is not None:  # a view has no matrices to run as one head
        from mhacli.measures.analysis import analyse

        readback = result.analysis.readback  # it holds the one head's top keys when measured with it
        keys = readback.single_keys if readback is not None else analyse(result.single).top_keys[0]  # (N,)
    return replace(result, figures=_window(result, view), magnified=replace(_window(result, glass), single_keys=keys))


def paged(result: Run, max_tokens: int | None = None) -> Run:
    """``result`` with the page's measures for its first ``max_tokens`` tokens (each layer's, for a view;
    default :data:`mhacli.measures.window.PAGE_MAX_TOKENS`)."""
    from mhacli.measures.analysis import windowed
    from mhacli.measures.window import PAGE_MAX_TOKENS

    max_tokens = PAGE_MAX_TOKENS if max_tokens is None else max_tokens
    if max_tokens < 1:
        raise ValueError("max_tokens must be at least 1")
    m = min(len(result.analysis.tokens), max_tokens)
    shown_layers = result.layers if result.layers is not None else (result.analysis,)
    views = ([result.trace.at_layer(k) for k in range(len(shown_layers))] if result.layers is not None
             else [result.trace])
    measured = tuple(windowed(a, v.weights, 0, m) for a, v in zip(shown_layers, views))
    # The magnifier slide's choice, not token 0, where heads often agree (a causal run's first row has one key).
    at = result.trace.layer if result.layers is not None and len(measured) > 1 else 0  # the layer shown
    start = (measured[at].showcase_queries(1, 0, m) or (0,))[0]
    return replace(result, page=Page(max_tokens, measured, start))


def _window(result: Run, view: View) -> Window:
    from mhacli.measures.analysis import windowed

    measured = windowed(result.analysis, result.trace.weights, view.start, view.stop)
    return Window(view, measured, showcase=measured.showcase_queries(view.n, view.start, view.stop))  # all, ranked
