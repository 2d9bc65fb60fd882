"""How a grammar model should read a student's new word (``--words park=place``), measured: prints the table of
docs/training.md ("Students' own words").

    python scripts/measure_words.py            # the shipped grammar model, the card's 2,000 sentences
    python scripts/measure_words.py model.npz  # a model of your own (mha train --task grammar --save model.npz)

On the report card's held-out sentences (same count, same seed) one noun per sentence (its subject, object or
recipient, drawn with rng seed card seed + 1) is read three ways: as the mean of the model's embeddings of its
class's words (centroid), as one fixed word of the class (stand-in: king, queen, animal, street, ball), and as
the first word of the class the sentence does not hold (free stand-in, what --words does).  Each row: the card's
hit rate of every head and the readout's accuracy, per card row (mhacli.grammar.word_readings.mapped_scores).
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    from mhacli.grammar.word_readings import mapped_scores
    from mhacli.models.shipped import shipped_model_path
    from mhacli.models.trained import load_trained

    path = Path(argv[0]) if argv else shipped_model_path(name="grammar")
    model, _ = load_trained(path)
    card = model.card
    sentences, seed = (card.sentences, card.seed) if card is not None else (2000, 2017)
    scores = mapped_scores(model, sentences=sentences, seed=seed)
    rows = scores.rows
    print(f"{sentences:,} held-out sentences (rng seed {seed}), one noun per sentence replaced; "
          f"queries about it per row: " + ", ".join(f"{r} {n}" for r, n in zip(rows, scores.replaced)))
    print()
    print("| reading | measure | " + " | ".join(rows) + " |")
    print("|---|---|" + "---:|" * len(rows))
    for k, name in enumerate(scores.readings):
        print(f"| {name} | accuracy | " + " | ".join(f"{100 * a:.1f}" for a in scores.accuracy[k]) + " |")
        for h in range(scores.rate.shape[2]):
            print(f"| {name} | head {h + 1} hit rate | "
                  + " | ".join(f"{100 * x:.1f}" for x in scores.rate[k][:, h]) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
