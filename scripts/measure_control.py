"""The one-vs-many control: the shipped grammar pair's training with positions put back into the values.

Trains ``TrainConfig.for_task("grammar", heads=h, seed=S, word_values=False)`` for h = 1 and 4, S the shipped
model's seed (the shipped pair's command with the values read from X = E + P instead of E), measures both as the shipped pair is measured
(``mhacli.grammar.score.score`` and ``crowd``: the card's 2,000 held-out sentences), and writes
``mhacli/data/grammar-control.json`` with the shipped pair's own accuracies beside it, so the tool shows the
control only beside the pair it was measured with.  About 25 CPU seconds.

    python scripts/measure_control.py
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from mhacli.grammar.score import CONTROL_FILE, crowd, score
from mhacli.grammar.model import TrainConfig
from mhacli.grammar.train import train
from mhacli.models.shipped import shipped_model_path
from mhacli.models.trained import load_trained


def main() -> None:
    shipped_pair = [load_trained(shipped_model_path(alone=a, name="grammar"))[0] for a in (True, False)]
    seed = shipped_pair[1].config.seed
    alone = train(TrainConfig.for_task("grammar", heads=1, seed=seed, word_values=False)).model
    heads = train(TrainConfig.for_task("grammar", heads=4, seed=seed, word_values=False)).model
    shipped = [score(model).accuracy for model in shipped_pair]
    record = {"values": "X = E + P (positions in the values)", "single": score(alone).accuracy,
              "heads": score(heads).accuracy, "head_count": 4,
              "by_nouns_of_a_class": crowd(alone).to_dict(), "seed": seed,
              "command": f"python scripts/measure_control.py (TrainConfig.for_task('grammar', heads=h, seed={seed}, "
                         "word_values=False), h = 1 and 4)",
              "measured": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
              "beside": shipped}
    path = Path(__file__).resolve().parent.parent / "mhacli" / "data" / CONTROL_FILE
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(record))


if __name__ == "__main__":
    main()
