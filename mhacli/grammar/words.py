"""Students' own words: a new word mapped to a class of the grammar, so their sentence parses and is read.

``park=place`` lets the parser take *park* where a place may stand; a trained model, with no embedding for it,
reads it as a stand-in: the first word of the class the sentence does not already hold (*street*, else *river*).
Chosen by measurement over a centroid or a fixed stand-in, which lose named cells or answers (docs/training.md).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Mapping, Sequence

from mhacli.grammar import grammar
from mhacli.attention.errors import UsageError
from mhacli.attention.messages import literal

CLASSES: dict[str, tuple[str, ...]] = {"male": grammar.MALE, "female": grammar.FEMALE, "animal": grammar.ANIMALS,
                                       "place": grammar.PLACES, "thing": grammar.THINGS,
                                       "adjective": grammar.ADJECTIVES}
# A class in a sentence's words: "park is read as a place".
CLASS_WORDS = {"male": "a male noun", "female": "a female noun", "animal": "an animal", "place": "a place",
               "thing": "a thing", "adjective": "an adjective"}
NOUN_CLASSES = ("male", "female", "animal", "place", "thing")
STAND_INS = {name: words[0] for name, words in CLASSES.items()}  # the measured alternative: one named word
MAX_WORDS = 16  # mapped words in one run: a sentence of the grammar has at most 17 words
MAX_WORD_CHARS = 40
MAX_SPEC_CHARS = 1000  # the whole --words text, refused before it is split
READINGS = ("centroid", "stand-in", "free stand-in")


def _classes() -> str:
    return ", ".join(CLASSES)


@dataclass(frozen=True)
class WordMap:
    """New words and the grammar class each stands for, in the order given (words lower-cased)."""

    pairs: tuple[tuple[str, str], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.pairs)

    def class_of(self, word: str) -> str | None:
        """The class ``word`` (any case) is mapped to, or None."""
        return dict(self.pairs).get(word.lower())

    def in_text(self, tokens: Sequence[str]) -> "WordMap":
        """The mapped words the tokens use, in the order given."""
        used = {t.lower() for t in tokens}
        return WordMap(tuple(p for p in self.pairs if p[0] in used))

    def to_dict(self) -> dict[str, str]:
        return dict(self.pairs)


def _items(words: object) -> list[tuple[str, str]]:
    """``words`` as (word, class) pairs as given: "park=place lion=animal", a list of such, or a mapping."""
    if isinstance(words, Mapping):
        bad = [k for k, v in words.items() if not isinstance(k, str) or not isinstance(v, str)]
        if bad:
            pair = repr({bad[0]: words[bad[0]]})  # the pair itself: its key alone read as if it were the fault
            raise UsageError("{words:name} maps words to classes as text, e.g. {{'park': 'place'}}; "
                             f"got {literal(pair if len(pair) <= 40 else pair[:39] + '…')}.", words="")
        return [(k, v) for k, v in words.items()]
    specs = [words] if isinstance(words, str) else words
    if not isinstance(specs, (list, tuple)) or not all(isinstance(s, str) for s in specs):
        raise UsageError("{words:name} takes WORD=CLASS pairs such as \"park=place lion=animal\".", words="")
    total = sum(len(s) for s in specs)
    if total > MAX_SPEC_CHARS:
        raise UsageError(f"{{words:name}} holds {total:,} characters; at most {MAX_SPEC_CHARS:,} (a few "
                         "WORD=CLASS pairs).", words="")
    out = []
    for spec in specs:
        for item in spec.replace(",", " ").split():
            word, eq, cls = item.partition("=")
            if not eq:
                from mhacli.attention.messages import shown

                raise UsageError(f"{{words:name}} takes WORD=CLASS, got {literal(shown(item))}; e.g. park=place "
                                 f"(classes: {_classes()}).", words="")
            out.append((word, cls))
    return out


def word_map(words: object, vocabulary: Sequence[str] = grammar.WORDS) -> WordMap:
    """The checked map of ``words`` (None or empty: none): each a new word of letters, to one of :data:`CLASSES`.

    Refused in one line: no ``=``, an unknown class, not one word, a word the grammar has, one word in two classes,
    too many. The same pair twice is one pair.
    """
    from mhacli.attention.messages import shown
    from mhacli.attention.tokenize import tokenize

    if isinstance(words, WordMap):
        return words
    if words is None or words == "" or words == () or words == []:
        return WordMap()
    known = {w.lower() for w in vocabulary}
    pairs: dict[str, str] = {}
    for raw_word, raw_class in _items(words):
        word, cls = raw_word.lower(), raw_class.lower()
        if not word:
            raise UsageError(f"{{words:name}} pair {literal(shown(raw_word + '=' + raw_class))} names no word; "
                             "write WORD=CLASS, e.g. park=place.", words="")
        if cls not in CLASSES:
            import difflib

            close = difflib.get_close_matches(cls, list(CLASSES), n=1, cutoff=0.7)
            guess = f"did you mean {close[0]}? " if close else ""
            raise UsageError(f"unknown class {literal(shown(raw_class))} for {literal(shown(raw_word))} in "
                             f"{{words:name}}; {guess}choose one of: {_classes()}.", words="")
        read = tokenize(word, "word") if len(word) <= MAX_WORD_CHARS else []
        pieces = len(read)
        if read != [word] or not any(c.isalpha() for c in word):
            split = f" (the word tokenizer reads it as {pieces} tokens)" if pieces > 1 else ""
            raise UsageError(f"{literal(shown(raw_word))} in {{words:name}} is not one word{split}: a mapped word "
                             f"is letters the word tokenizer keeps as one token, at most {MAX_WORD_CHARS} "
                             "characters.", words="")
        if word in known:
            home = next((c for c, ws in CLASSES.items() if word in ws), None)
            already = f" ({CLASS_WORDS[home]})" if home else ""
            raise UsageError(f"{literal(shown(word))} is already a word of the grammar{already}; {{words:name}} "
                             "maps only new words.", words="")
        if pairs.get(word, cls) != cls:
            raise UsageError(f"{literal(shown(word))} is mapped twice in {{words:name}}, to {pairs[word]} and to "
                             f"{cls}; give it one class.", words="")
        pairs[word] = cls
        if len(pairs) > MAX_WORDS:
            raise UsageError(f"{{words:name}} maps more than {MAX_WORDS} words; a sentence of the grammar has "
                             f"at most {grammar.LONGEST}.", words="")
    return WordMap(tuple(pairs.items()))


# ----------------------------------------------------------------------------- the parse


@dataclass(frozen=True)
class MappedParse(grammar.Parse):
    """A parse of a sentence with mapped words: the grammar's parse, and the words it took by their class."""

    words: tuple[tuple[str, str], ...] = ()  # (word, class) of the sentence's mapped words

    def describe(self) -> str:
        """The grammar's description, then how each mapped word was taken: ``… (park as a place)``."""
        said = super().describe()
        if not self.words:
            return said
        return said + " (" + ", ".join(f"{w} as {CLASS_WORDS[c]}" for w, c in self.words) + ")"


def stand_ins(tokens: Sequence[str], words: WordMap) -> dict[str, str]:
    """Each mapped word the tokens use, and the word of its class it is read as: the first of the class the
    sentence does not hold and no other mapped word took (the class's first word when every one is taken)."""
    used = words.in_text(tokens)
    taken = {t.lower() for t in tokens}
    out: dict[str, str] = {}
    for word, cls in used.pairs:
        free = [w for w in CLASSES[cls] if w not in taken] or [CLASSES[cls][0]]
        out[word] = free[0]
        taken.add(free[0])
    return out


def parse(tokens: Sequence[str], words: WordMap = WordMap()) -> grammar.Parse | None:
    """The grammar's parse of ``tokens`` with each mapped word read as its stand-in (:func:`stand_ins`), or None.

    "the lion met the tiger" (both animals) parses as two different animals, as it should."""
    proxy = stand_ins(tokens, words)
    if not proxy:
        return grammar.parse(tokens)
    lowered = [t.lower() for t in tokens]
    found = grammar.parse([proxy.get(t, t) for t in lowered])
    if found is None:
        return None
    values = {f.name: getattr(found, f.name) for f in fields(found)}
    return MappedParse(**{**values, "tokens": tuple(lowered)}, words=words.in_text(tokens).pairs)


# ----------------------------------------------------------------------------- the model's reading


def reading_note(tokens: Sequence[str], words: WordMap) -> str | None:
    """How a grammar model reads the mapped words of ``tokens``: ``park is read as “street”, the first of the
    grammar's place words the sentence does not use (the model has no embedding of its own for park)``; None
    when none is used."""
    proxy = stand_ins(tokens, words)
    if not proxy:
        return None
    said = [f"{w} is read as “{proxy[w]}”, the first of the grammar's {words.class_of(w)} words the sentence "
            "does not use" for w in proxy]
    own = ", ".join(proxy)
    return "; ".join(said) + f" (the model has no embedding of its own for {own})"


def mapped_words(mapped: Sequence[tuple[str, str, str]]) -> str | None:
    """A run's mapped words in one line for every surface: ``not the model's words, read by their class: park as
    “street” (a place), lion as “animal” (an animal)``; None without any."""
    if not mapped:
        return None
    return "not the model's words, read by their class: " + ", ".join(
        f"{w} as “{r}” ({CLASS_WORDS.get(c, c)})" for w, c, r in mapped)
