"""--json on every command that prints numbers: one document on stdout, read back and checked."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from mhacli.cli.app import app
from mhacli.attention.steps import ParameterCount, steps_for, total_madds
from mhacli.io.samples import list_samples


@pytest.fixture()
def runner():
    return CliRunner()


def document(result):
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def test_shapes_json_is_the_step_table(runner):
    d = document(runner.invoke(app, ["shapes", "--tokens", "12", "--d-model", "32", "--heads", "8", "--json"]))
    steps = steps_for(12, 32, 8)
    assert [s["key"] for s in d["steps"]] == [s.key for s in steps]
    assert d["total_madds"] == total_madds(steps) and d["d_k"] == 4
    assert d["parameters"] == ParameterCount(32, 8).to_dict()


def test_samples_json_lists_every_sample_with_its_tokens(runner):
    d = document(runner.invoke(app, ["samples", "--json"]))
    assert d["format_version"] == 1 and [s["name"] for s in d["samples"]] == [s.name for s in list_samples()]
    one = document(runner.invoke(app, ["samples", "repeated", "--json", "--tokenizer", "char"]))
    (sample,) = [s for s in list_samples() if s.name == "repeated"]
    assert one["samples"] == [{"name": "repeated", "description": sample.description, "text": sample.text,
                    "tokenizer": "char", "tokens": sample.tokens("char")}]


def test_quiz_json_hides_answers_unless_asked(runner):
    plain = document(runner.invoke(app, ["quiz", "--seed", "3", "--json"]))
    with_answers = document(runner.invoke(app, ["quiz", "--seed", "3", "--json", "--answers"]))
    assert len(plain["questions"]) == 5 and not any("answer" in q for q in plain["questions"])
    assert [q["question"] for q in plain["questions"]] == [q["question"] for q in with_answers["questions"]]
    assert all(q["answer"] for q in with_answers["questions"])


def test_show_json_equals_explain_json(runner, tmp_path):
    npz = tmp_path / "cat.npz"
    first = runner.invoke(app, ["explain", "the cat sat on the mat", "--no-plots", "--json", "--save-npz", str(npz)])
    shown = document(runner.invoke(app, ["show", str(npz), "--json", "--no-plots"]))
    made = json.loads(first.stdout)
    assert shown["arrays"] == made["arrays"] and shown["tokens"] == made["tokens"]


def test_verify_json_reports_each_check_and_fails_on_tampering(runner, tmp_path):
    npz = tmp_path / "cat.npz"
    runner.invoke(app, ["explain", "the cat sat on the mat", "--no-plots", "--save-npz", str(npz)])
    ok = document(runner.invoke(app, ["verify", str(npz), "--json"]))
    assert ok["ok"] and {c["array"] for c in ok["checks"]} >= {"Q", "weights", "output"}
    z = dict(np.load(npz))
    z["output"] = z["output"] + 1e-3
    np.savez(tmp_path / "bad.npz", **z)
    r = runner.invoke(app, ["verify", str(tmp_path / "bad.npz"), "--json"])
    bad = json.loads(r.stdout)
    assert r.exit_code == 1 and not bad["ok"]
    assert [c["array"] for c in bad["checks"] if not c["ok"]] == ["output"] * sum(
        1 for c in bad["checks"] if c["array"] == "output")
