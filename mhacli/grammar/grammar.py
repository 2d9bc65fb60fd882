"""A small grammar of real English words: sentences, their relations, and a parser that finds them again.

Shapes: ``det [adj] NOUN (VERBED | didn't VERB) det [adj] NOUN [because PRONOUN was too PREDICATE]``, or a verb of
giving with ``… THING to det [adj] NOUN``. Relations: subject and object (at the verb), recipient (at a verb of
giving), referent (at a predicate adjective or he/she whose meaning alone decides the noun). Subject and object are
often of one class, so heads need word order too. Randomness only from the ``np.random.Generator`` passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from mhacli.attention import evidence

Array = np.ndarray

DETERMINERS = ("the", "a", "an")
MALE = ("king", "boy", "man", "prince")
FEMALE = ("queen", "girl", "woman", "princess")
ANIMALS = ("animal", "dog", "cat", "horse", "bird", "fox")
PLACES = ("street", "river", "road", "bridge", "field", "square")
THINGS = ("ball", "book", "apple", "bone", "hat", "cake")  # what is given
ADJECTIVES = ("big", "small", "old", "little")  # before a noun
# Transitive verbs: past tense, the base form after "didn't", and what they take as an object.
VERBS = (("crossed", "cross", "place"), ("saw", "see", "any"), ("watched", "watch", "any"),
         ("met", "meet", "animate"), ("followed", "follow", "animate"), ("chased", "chase", "animate"))
# Verbs of giving (past, base): someone animate gives someone animate a thing.
GIVING = (("gave", "give"), ("showed", "show"), ("brought", "bring"), ("sent", "send"), ("handed", "hand"),
          ("threw", "throw"))
TO = "to"
NEGATION = "didn't"
PRONOUNS = ("he", "she", "it")
LINKS = ("because", "was", "too")
FEELS = ("tired", "hungry", "scared", "angry")  # predicates that describe someone animate
PLACE_STATES = ("wide", "busy", "long", "dark")  # predicates that describe a place

ANIMATE = MALE + FEMALE + ANIMALS
NOUNS = ANIMATE + PLACES + THINGS
WORDS: tuple[str, ...] = (DETERMINERS + NOUNS + ADJECTIVES + tuple(v[0] for v in VERBS)
                          + tuple(v[1] for v in VERBS) + tuple(v[0] for v in GIVING) + tuple(v[1] for v in GIVING)
                          + (NEGATION, TO) + PRONOUNS + LINKS + FEELS + PLACE_STATES)
RELATIONS = ("subject", "object", "recipient", "referent")  # read out by the model, one readout each
# What a head can follow, measured against the parse: the referent's two kinds of query apart, since a head
# that finds the noun an adjective describes need not be the one that finds the noun a pronoun means.
HEAD_RELATIONS = ("subject", "object", "recipient", "describes", "means")
RELATION_NAMES = {"subject": "verb → its subject", "object": "verb → its object",
                  "recipient": "verb → its recipient",
                  "describes": "adjective → the noun it describes", "means": "he/she → the noun it means"}
NO_RELATION = evidence.NO_RELATION  # a head below the naming share on every relation
SHORT_NAMES = {"subject": "verb → subject", "object": "verb → object", "recipient": "verb → recipient",
               "describes": "adjective → noun",
               "means": "he/she → noun"}  # for small titles
LONGEST = 17  # words in the longest sentence

_INDEX = {w: i for i, w in enumerate(WORDS)}
_GENDER = {**{w: "he" for w in MALE}, **{w: "she" for w in FEMALE}}
_VOWELS = tuple("aeiou")

# Probabilities of the optional parts (the clause carries the referent).
P_ADJECTIVE, P_NEGATION, P_CLAUSE, P_THE = 0.35, 0.3, 0.85, 0.6
P_PLACE_OBJECT = 0.5  # for a verb that takes anything (saw, watched): how often its object is a place
P_GIVING = 0.5  # how often the verb is one of giving (three nouns), else transitive (two)
# How often what is given is someone animate ("the king sent the boy to the queen"): three nouns of one class,
# so neither their class nor a head that mixes two of them can tell the roles apart.
P_GIVE_ANIMATE = 0.5


def noun_class(word: str) -> str:
    """'animate', 'place' or 'thing'."""
    return "place" if word in PLACES else "thing" if word in THINGS else "animate"


@dataclass(frozen=True)
class Parse:
    """Where one sentence's relations point: query position -> key position, one mapping per relation."""

    tokens: tuple[str, ...]  # the words, lower-cased
    verb: int
    subject: int
    object: int
    referents: tuple[tuple[int, int], ...]  # (adjective or he/she, the noun it is about)
    recipient: int | None = None  # the noun given to, after "to" (a verb of giving)

    def keys(self, relation: str) -> dict[int, int]:
        """For ``relation``: each query position that has it, and the key position it points to."""
        if relation == "subject":
            return {self.verb: self.subject}
        if relation == "object":
            return {self.verb: self.object}
        if relation == "recipient":
            return {} if self.recipient is None else {self.verb: self.recipient}
        if relation == "referent":
            return dict(self.referents)
        if relation in ("describes", "means"):
            pronoun = relation == "means"
            return {q: k for q, k in self.referents if (self.tokens[q] in PRONOUNS) == pronoun}
        raise KeyError(relation)

    def describe(self) -> str:
        """``subject: animal · object: street · tired describes: animal``."""
        t = self.tokens
        parts = [f"subject: {t[self.subject]}", f"object: {t[self.object]}"]
        if self.recipient is not None:
            parts.append(f"recipient: {t[self.recipient]}")
        for query, key in self.referents:
            verb = "means" if t[query] in PRONOUNS else "describes"
            parts.append(f"{t[query]} {verb}: {t[key]}")
        return " · ".join(parts)


def _referents(tokens: Sequence[str], nouns: tuple[int, ...], predicate: int | None,
               pronoun: int | None) -> tuple[tuple[int, int], ...]:
    """The referent of the predicate (by meaning) and of he/she (by gender), where that alone decides."""
    out = []
    if predicate is not None:
        wanted = "place" if tokens[predicate] in PLACE_STATES else "animate"
        fits = [n for n in nouns if noun_class(tokens[n]) == wanted]
        if len(fits) == 1:
            out.append((predicate, fits[0]))
    if pronoun is not None and tokens[pronoun] in ("he", "she"):
        fits = [n for n in nouns if _GENDER.get(tokens[n]) == tokens[pronoun]]
        if len(fits) == 1:
            out.append((pronoun, fits[0]))
    return tuple(sorted(out))


def parse(tokens: Sequence[str]) -> Parse | None:
    """The sentence's relations, or None when it is not a sentence of this grammar (capitals folded)."""
    t = tuple(w.lower() for w in tokens)
    i = 0

    def noun_phrase() -> int | None:
        nonlocal i
        if i >= len(t) or t[i] not in DETERMINERS:
            return None
        i += 1
        if i < len(t) and t[i] in ADJECTIVES:
            i += 1
        if i >= len(t) or t[i] not in NOUNS:
            return None
        i += 1
        return i - 1

    subject = noun_phrase()
    if subject is None or i >= len(t) or noun_class(t[subject]) != "animate":
        return None
    form = 1 if t[i] == NEGATION else 0
    i += form
    forms = {v[form]: v[2] for v in VERBS} | {v[form]: "give" for v in GIVING}
    if i >= len(t) or t[i] not in forms:
        return None
    verb, takes = i, forms[t[i]]
    i += 1
    obj = noun_phrase()
    allowed = {"any": ("animate", "place"), "give": ("animate", "thing")}.get(takes, (takes,))
    if obj is None or t[obj] == t[subject] or noun_class(t[obj]) not in allowed:
        return None
    recipient = None
    if takes == "give":
        if i >= len(t) or t[i] != TO:
            return None
        i += 1
        recipient = noun_phrase()
        if (recipient is None or t[recipient] in (t[subject], t[obj])
                or noun_class(t[recipient]) != "animate"):
            return None
    predicate = pronoun = None
    if i < len(t):
        rest = t[i:]
        if (len(rest) != 5 or rest[0] != "because" or rest[1] not in PRONOUNS or rest[2:4] != ("was", "too")
                or rest[4] not in FEELS + PLACE_STATES):
            return None
        pronoun, predicate = i + 1, i + 4
    nouns = (subject, obj) if recipient is None else (subject, obj, recipient)
    return Parse(t, verb, subject, obj, _referents(t, nouns, predicate, pronoun), recipient)


@dataclass(frozen=True)
class Sentences:
    """A batch of sentences as word ids (padded after the end), with the relations it was built with."""

    ids: Array  # (B, N) word ids; ``pad`` after each sentence's end
    lengths: Array  # (B,) words in each sentence
    keys: Array  # (T, B, N) the key position each relation points to from each query; -1 where none


def _ids(words: Sequence[str]) -> Array:
    return np.array([_INDEX[w] for w in words])


# Per word id, made once (generate runs once per training step): its gender (0 none, 1 he, 2 she), the pronoun
# that stands for it, whether it is a place, and whether it takes "an".
_GENDER_OF = np.zeros(len(WORDS), dtype=np.int64)
_GENDER_OF[_ids(MALE)] = 1
_GENDER_OF[_ids(FEMALE)] = 2
_PRONOUN_OF = _ids(("it", "he", "she"))[_GENDER_OF]
_IS_PLACE = np.isin(np.arange(len(WORDS)), _ids(PLACES))
_TAKES_AN = np.array([w.startswith(_VOWELS) for w in WORDS])


def _pick(rng: np.random.Generator, choices: Sequence[str], size: int) -> Array:
    return _ids(choices)[rng.integers(0, len(choices), size)]  # (B,)


def generate(rng: np.random.Generator, size: int, length: int, pad: int) -> Sentences:
    """``size`` sentences of at most ``length`` words, drawn as arrays (one draw per slot for the batch)."""
    b = size
    subject = _pick(rng, ANIMATE, b)  # (B,)
    giving = rng.random(b) < P_GIVING  # (B,): a verb of giving, with a thing and a recipient
    verb_kind = rng.integers(0, len(VERBS), b)  # (B,); the same draw picks the verb of giving
    takes = np.array([v[2] for v in VERBS])[verb_kind]  # (B,)
    wants_place = ~giving & ((takes == "place") | ((takes == "any") & (rng.random(b) < P_PLACE_OBJECT)))  # (B,)
    # The second noun: the object of a transitive verb, the recipient of a verb of giving.
    second = np.where(wants_place, _pick(rng, PLACES, b), _pick(rng, ANIMATE, b))  # (B,)
    # The same noun twice ("the king met the king") is no sentence: move to the next animate noun.
    animate_ids = _ids(ANIMATE)
    same = second == subject
    second[same] = animate_ids[(np.searchsorted(animate_ids, second[same]) + 1) % len(animate_ids)]
    # What is given: a thing, or someone animate other than the subject and the recipient.
    given = np.where(rng.random(b) < P_GIVE_ANIMATE, _pick(rng, ANIMATE, b), _pick(rng, THINGS, b))  # (B,)
    for _ in range(2):  # move off the subject and the recipient (two steps at most)
        clash = (given == subject) | (given == second)
        given[clash] = animate_ids[(np.searchsorted(animate_ids, given[clash]) + 1) % len(animate_ids)]
    obj = np.where(giving, given, second)  # (B,)
    negated = rng.random(b) < P_NEGATION  # (B,)
    form = np.where(negated, 1, 0)  # (B,): past tense, or the base form after "didn't"
    table = np.stack([_ids([v[f] for v in VERBS]) for f in (0, 1)] + [_ids([v[f] for v in GIVING]) for f in (0, 1)])
    verb = np.where(giving, table[2 + form, verb_kind], table[form, verb_kind])  # (B,)
    adjective = [rng.random(b) < P_ADJECTIVE for _ in range(3)]
    adjective_word = [_pick(rng, ADJECTIVES, b) for _ in range(3)]
    the = [rng.random(b) < P_THE for _ in range(3)]
    clause = rng.random(b) < P_CLAUSE  # (B,)
    about_second = rng.random(b) < 0.5  # (B,): the clause is about the second noun, else the subject
    referent_word = np.where(about_second, second, subject)  # (B,)
    predicate = np.where(_IS_PLACE[referent_word], _pick(rng, PLACE_STATES, b), _pick(rng, FEELS, b))  # (B,)
    pronoun = _PRONOUN_OF[referent_word]  # (B,)

    def determiner(k: int, noun: Array) -> Array:
        first = np.where(adjective[k], adjective_word[k], noun)
        return np.where(the[k], _INDEX["the"], np.where(_TAKES_AN[first], _INDEX["an"], _INDEX["a"]))

    ones = np.ones(b, dtype=bool)
    # The 17 slots of the longest sentence, each (B,) with whether it is present.
    slots = [(determiner(0, subject), ones), (adjective_word[0], adjective[0]), (subject, ones),
             (np.full(b, _INDEX[NEGATION]), negated), (verb, ones), (determiner(1, obj), ones),
             (adjective_word[1], adjective[1]), (obj, ones), (np.full(b, _INDEX[TO]), giving),
             (determiner(2, second), giving), (adjective_word[2], adjective[2] & giving), (second, giving)]
    slots += [(np.full(b, _INDEX[w]), clause) for w in ("because",)] + [(pronoun, clause)]
    slots += [(np.full(b, _INDEX[w]), clause) for w in ("was", "too")] + [(predicate, clause)]
    words = np.stack([s[0] for s in slots], axis=1)  # (B, 17)
    present = np.stack([s[1] for s in slots], axis=1)  # (B, 17)
    position = np.cumsum(present, axis=1) - 1  # (B, 17): where each slot lands
    lengths = present.sum(axis=1)  # (B,)
    if lengths.max() > length:
        raise ValueError(f"sentences of this grammar need {LONGEST} positions, got {length}")
    ids = np.full((b, length), pad, dtype=np.int64)  # (B, N)
    rows = np.repeat(np.arange(b), LONGEST).reshape(b, LONGEST)
    ids[rows[present], position[present]] = words[present]

    keys = np.full((len(RELATIONS), b, length), -1, dtype=np.int64)  # (T, B, N)
    at = np.arange(b)
    s_pos, v_pos, o_pos, r_pos = position[:, 2], position[:, 4], position[:, 7], position[:, 11]
    keys[RELATIONS.index("subject"), at, v_pos] = s_pos
    keys[RELATIONS.index("object"), at, v_pos] = o_pos
    keys[RELATIONS.index("recipient"), at[giving], v_pos[giving]] = r_pos[giving]
    # Referent at the predicate: decided by meaning when exactly one of the two nouns is of its class.
    referent = RELATIONS.index("referent")
    by_meaning = clause & _IS_PLACE[second]  # the subject is always animate: classes differ iff the second is a place
    referent_pos = np.where(about_second, np.where(giving, r_pos, o_pos), s_pos)
    keys[referent, at[by_meaning], position[by_meaning, 16]] = referent_pos[by_meaning]
    # Referent at he/she: decided by gender when the other noun does not share it.
    other = np.where(about_second, subject, second)
    gender = _GENDER_OF[referent_word]
    # After a verb of giving, the one given may share the gender too ("sent the girl to the queen … she").
    by_gender = clause & (gender > 0) & (_GENDER_OF[other] != gender) & (~giving | (_GENDER_OF[obj] != gender))
    keys[referent, at[by_gender], position[by_gender, 13]] = referent_pos[by_gender]
    return Sentences(ids=ids, lengths=lengths, keys=keys)


def short_name(rule: str) -> str | None:
    """The few words of a learned head's label (``adjective → the noun it describes (62% …)`` -> ``adjective →
    noun · 62%``), or None for a label that names no relation of the grammar."""
    for name, long in RELATION_NAMES.items():
        if rule.startswith(long + " ("):
            return f"{SHORT_NAMES[name]} · {rule[len(long) + 2:].split('%')[0]}%"
    return None


def head_keys(ids: Array, keys: Array) -> Array:
    """The true keys of :data:`HEAD_RELATIONS` from those of :data:`RELATIONS`: (4, B, N) -> (5, B, N)."""
    pronoun = np.isin(ids, [_INDEX["he"], _INDEX["she"]])  # (B, N): he/she queries
    referent = keys[RELATIONS.index("referent")]  # (B, N)
    return np.stack([*keys[:RELATIONS.index("referent")], np.where(pronoun, -1, referent),
                     np.where(pronoun, referent, -1)])  # (5, B, N)


# The referent split along the lines trained heads split it: he/she → the noun it means, a feeling adjective →
# the animate noun it describes, a place adjective → the place; with the verb's relations, one row each.
PART_RELATIONS = ("subject", "object", "recipient", "means", "feeling", "place")


def part_keys(ids: Array, keys: Array) -> Array:
    """The true keys of :data:`PART_RELATIONS` from those of :data:`RELATIONS`: (4, B, N) -> (6, B, N)."""
    referent = keys[RELATIONS.index("referent")]  # (B, N)
    by_word = [np.isin(ids, _ids(words)) for words in (("he", "she"), FEELS, PLACE_STATES)]  # 3 × (B, N)
    return np.stack([*keys[:RELATIONS.index("referent")],
                     *(np.where(kind, referent, -1) for kind in by_word)])  # (6, B, N)


def word_ids() -> dict[str, int]:
    """Each word's id (its index in :data:`WORDS`)."""
    return dict(_INDEX)


@dataclass(frozen=True)
class Look:
    """One query of the parse, and where each head looks from it."""

    relation: str  # one of HEAD_RELATIONS
    query: int  # the verb, the predicate adjective or he/she
    key: int  # the true key: the noun the relation points to
    top: tuple[int, ...]  # per head: its most-weighted key from the query
    weight: tuple[float, ...]  # per head: its weight on the true key
    # The heads that answer the query: the true key their top key, with at least evidence.ANSWER_SHARE of the
    # row on it. Decided once, when the look is made: every surface reads the same verdict.
    answered: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "answered", tuple(
            i for i, (k, w) in enumerate(zip(self.top, self.weight)) if k == self.key and w >= evidence.ANSWER_SHARE))


@dataclass(frozen=True)
class Reading:
    """A parsed sentence and, for each of its relations' queries, where every head looks."""

    parse: Parse
    looks: tuple[Look, ...]

    @property
    def queries(self) -> tuple[int, ...]:
        """The parse's query positions: the adjective's and the pronoun's first (where one head must find one
        noun by its meaning or its gender), then the verb's."""
        referents = [look.query for look in self.looks if look.relation in ("describes", "means")]
        return tuple(dict.fromkeys(referents + [look.query for look in self.looks]))

    def to_dict(self) -> dict[str, object]:
        t = self.parse.tokens
        return {"parse": self.parse.describe(),
                "looks": [{"relation": look.relation, "query": look.query, "query_token": t[look.query],
                           "key": look.key, "key_token": t[look.key], "top_keys": list(look.top),
                           "weight_on_key": list(look.weight)} for look in self.looks]}


def read(parse: Parse, weights: Array) -> Reading:
    """Where each head of ``weights`` (h, N, N) looks from every query of ``parse``."""
    looks = []
    for relation in HEAD_RELATIONS:
        for query, key in sorted(parse.keys(relation).items()):
            row = weights[:, query, :]  # (h, N)
            looks.append(Look(relation, query, key, tuple(int(k) for k in row.argmax(axis=-1)),
                              tuple(float(w) for w in row[:, key])))
    return Reading(parse, tuple(looks))
