"""One table of goal metrics (xbench/metrics/goals.py), read by every user: the config check, the rank's scoring
and reached test, loop.py's below-chance rule, the MLPerf log, the frame's curve and the report's tables and plots.

Before, the names lived in six lists that disagreed: analysis/frame.py's curve keys lacked `mlm_accuracy` (a record
whose series was an MLM curve had no curve in the report), and the accuracy plot kept the highest value of every
curve in colour, so a perplexity plot coloured the worst runs. Records are FAKE (xbench.report.fake)."""

from __future__ import annotations

import contextlib
import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from xbench.analysis.frame import to_frame
from xbench.analysis.rows import Rows
from xbench.bench import epochs, loop, mlperf_log, training
from xbench.config import GoalConfig
from xbench.metrics import goals
from xbench.metrics.goals import GOALS, Goal
from xbench.modes import target
from xbench.report import plots, wandb_report
from xbench.report.fake import fake_record
from xbench.report.rows import Context
from xbench.report.tables import TABLES

REPO = Path(__file__).resolve().parents[1]
TOP3 = Goal("top3", "top-3 accuracy", True, ("classify",), target_low=0.0, target_high=1.0,
            target_hint="a fraction in (0, 1] (0.95, not 95)", mlperf="resnet", top_k=3)


def _rules(monkeypatch, metric: str, task: str | None, targets: list[float]) -> list[str]:
    """modes/target.goal_rules (what compat asks of a train_to_target config) for a model of `task`."""
    monkeypatch.setattr(target.models, "get", lambda name: SimpleNamespace(task=task))
    cfg = SimpleNamespace(goal=GoalConfig(metric=metric, targets=targets), model=SimpleNamespace(name="m"))
    return target.goal_rules(cfg)


def _two_targets(g: Goal) -> tuple[float, float]:
    """Two targets inside the metric's range, in the order its curve reaches them."""
    a, b = g.target_low + 0.4, g.target_low + 0.6
    return (a, b) if g.higher_is_better else (b, a)


def _check_users_agree(monkeypatch, g: Goal) -> None:
    first, last = _two_targets(g)
    assert _rules(monkeypatch, g.name, g.tasks[0], [first, last]) == []
    assert any("must increase" in r or "must decrease" in r for r in _rules(monkeypatch, g.name, g.tasks[0], [last, first]))
    assert any(f"needs a {'/'.join(g.tasks)} model" in r for r in _rules(monkeypatch, g.name, "other_task", [last]))
    assert any(g.target_hint in r for r in _rules(monkeypatch, g.name, g.tasks[0], [g.target_low]))
    if math.isfinite(g.target_high):
        assert any(g.target_hint in r for r in _rules(monkeypatch, g.name, g.tasks[0], [g.target_high + 1]))
    assert training.better(g.name, last, first) and training.better(g.name, last, last)  # value, target
    assert not training.better(g.name, first, last)
    assert loop.chance_level(g.name, 10) == g.chance(10)
    assert epochs.metric_value(g.name, 3.0, 4.0, 8.0) == g.value(3.0, 4.0, 8.0)
    assert mlperf_log.mlperf_benchmark(g.name) == g.mlperf
    rec = fake_record("c", mode="train_to_target", series={g.name: [first, last], "epoch": [1, 2]})
    [row] = to_frame([rec]).to_dict("records")  # a record without goal_metric: the curve found by its name
    assert [p["metric"] for p in row["curve"]] == [first, last]


@pytest.mark.parametrize("name", list(GOALS))
def test_every_user_agrees_with_the_table(monkeypatch, name):
    _check_users_agree(monkeypatch, GOALS[name])


def test_the_table_says_what_the_users_said_before():
    """The values the six lists held, now lines of one table (direction, chance, MLPerf benchmark, value)."""
    assert {n for n, g in GOALS.items() if not g.higher_is_better} == {"perplexity", "log_perplexity"}
    assert GOALS["top1"].chance(10) == 0.1 and GOALS["top5"].chance(10) == 0.5 and GOALS["top5"].chance(3) == 1.0
    assert GOALS["mlm_accuracy"].chance(4) == 0.25 and GOALS["perplexity"].chance(10) is None
    assert {n: g.mlperf for n, g in GOALS.items()} == {"top1": "resnet", "accuracy": "resnet", "top5": "resnet",
                                                        "mlm_accuracy": "bert", "perplexity": "gpt3",
                                                        "log_perplexity": "gpt3"}
    assert GOALS["perplexity"].value(0, 10, 33.0) == pytest.approx(math.exp(3.3))
    assert GOALS["log_perplexity"].value(0, 10, 33.0) == pytest.approx(3.3)
    assert {n for n, g in GOALS.items() if g.per_token} == {"mlm_accuracy", "perplexity", "log_perplexity"}


def test_no_module_keeps_its_own_list_of_goal_metrics():
    """Outside metrics/goals.py no source line names two goal metrics (a list or a dict of them) or branches on
    one's name, and every goal.metric in conf/ and the studies' manifest is in the table. The one branch left is
    MLPerf's GPT-3 format (a perplexity is logged as its logarithm)."""
    quoted = re.compile(r"""["']([a-z0-9_]+)["']""")
    allowed = {("mlperf_log.py", 'if metric == "perplexity":')}
    found = []
    for path in sorted((REPO / "xbench").rglob("*.py")):
        if path.name in ("goals.py", "fake.py"):  # fake.py: FAKE records name their metric
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            names = {m for m in quoted.findall(line) if m in GOALS}
            branch = re.search(r"""(==|!=|\bin)\s*\(?["'](""" + "|".join(GOALS) + r""")["']""", line)
            if (len(names) > 1 or branch) and not any(path.name == f and s in line for f, s in allowed):
                found.append(f"{path.relative_to(REPO)}:{i}: {line.strip()}")
    assert found == []
    yamls = [*(REPO / "conf").rglob("*.yaml"), REPO / "xbench" / "studies" / "studies.yaml"]
    metrics = {m for p in yamls for m in re.findall(r"\bmetric:\s*([a-z0-9_]+)", p.read_text())}
    assert metrics and metrics <= set(GOALS), metrics - set(GOALS)


def test_a_metric_added_to_the_table_only_is_accepted_scored_and_reported(monkeypatch):
    """A temporary `top3` line: the config check takes it, the rank scores top-3 hits, the frame finds its curve
    and the report names it in the to_target table, on the accuracy plot's axis and in the W&B report's panels."""
    monkeypatch.setitem(GOALS, "top3", TOP3)
    _check_users_agree(monkeypatch, TOP3)
    logits = torch.tensor([[4.0, 3.0, 2.0, 1.0], [4.0, 3.0, 2.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
    labels = torch.tensor([2, 3, 0])  # in the top 3, not, not
    sums = epochs.score(torch.nn.Identity(), [(logits, labels)], "top3", SimpleNamespace(autocast=contextlib.nullcontext),
                        lambda x, y: (x, y), lambda: None)
    assert sums == [1.0, 3.0, 0.0]
    recs = [fake_record(f"r{i}", mode="train_to_target", platform=p, usd_per_hour=1.0,
                        series={"top3": [0.5, 0.8], "train_time_s": [10.0, 20.0 * (i + 1)], "epoch": [1, 2]},
                        measurements={"goal_metric": "top3", "goal_target": 0.8, "target_reached": True,
                                      "train_time_to_target_s": 20.0 * (i + 1), "epochs_to_target": 2})
            for i, p in enumerate(("cpu", "gpu"))]
    df = to_frame(recs)
    rows = Rows.of(df)
    assert set(TABLES["to_target"](rows, Context()).frame["metric"]) == {"top-3 accuracy"}
    titles = {p["title"] for p in wandb_report.panels(df) if p["y"] == "top3"}
    assert titles == {"Evaluation top-3 accuracy vs training time [s]", "Evaluation top-3 accuracy vs epoch"}
    fig = plots.PLOTS["accuracy_vs_epochs"](rows, Context())
    assert fig.axes[0].get_ylabel() == "evaluation top-3 accuracy"
    plots.plt.close(fig)


def test_an_mlm_accuracy_curve_reaches_the_frame_and_the_report():
    """Before: the frame's curve keys lacked mlm_accuracy, so a record whose series was an MLM curve had no curve
    (curve None) and the accuracy plot said there was none."""
    rec = fake_record("mlm", model="bert", mode="train_to_target",
                      series={"mlm_accuracy": [0.3, 0.5, 0.72], "train_time_s": [10.0, 20.0, 30.0], "epoch": [1, 2, 3]})
    rows = Rows.of(to_frame([rec]))
    assert [p["metric"] for p in rows[0]["curve"]] == [0.3, 0.5, 0.72]
    fig = plots.PLOTS["accuracy_vs_time"](rows, Context())
    assert list(fig.axes[0].get_lines()[0].get_ydata()) == [0.3, 0.5, 0.72]
    plots.plt.close(fig)


def test_the_accuracy_plot_keeps_the_lowest_perplexity_in_colour(monkeypatch):
    """A lower-is-better metric's best run is its lowest: the line ranked first (kept in colour when lines are
    capped). Before: every curve ranked by its highest value, so the worst perplexity came first."""
    recs = [fake_record(p, mode="train_to_target", platform=p, measurements={"goal_metric": "perplexity"},
                        series={"perplexity": ys, "train_time_s": [10.0, 20.0], "epoch": [1, 2]})
            for p, ys in (("good", [30.0, 12.0]), ("bad", [40.0, 25.0]))]
    drawn = {}
    monkeypatch.setattr(plots, "line_figure", lambda panels, *a, **k: drawn.update(panels=panels))
    plots.PLOTS["accuracy_vs_epochs"](Rows.of(to_frame(recs)), Context())
    [panel] = drawn["panels"]
    best = max(panel.lines, key=lambda ln: ln.rank)
    assert best.ys == [30.0, 12.0] and panel.ylabel == "evaluation perplexity"
    assert goals.label("perplexity") == "perplexity" and goals.label("log_perplexity") == "log-perplexity [nats]"
    assert goals.label("eval_accuracy") == "eval_accuracy" and goals.label(None) is None
