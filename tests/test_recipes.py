"""The recipes and the pieces of train-to-target at scale, without launching a run: schedules against hand-computed
rates, LARS and LAMB against their formulas, label smoothing and gradient accumulation in the shared step, the
distributed sampler's promise (two ranks train what one device trains), the sharded evaluation's padding, the
several-target figures through derived costs, the console and the report, the masked-LM source, the curve file,
the MLPerf keys, and every bad input refused before any work with its reason."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from tests.conftest import CONF
from xbench import compat
from xbench.bench.epochs import IGNORE_LABEL, EvalShard, TrainFeed, metric_value, score
from xbench.config import OptimConfig, ScheduleConfig
from xbench.cost import load_platform
from xbench.metrics import targets as tg
from xbench.metrics.derived import derive
from xbench.platforms.detect import HostFacts
from xbench.precision import resolve
from xbench.studies.sweep import compose_point
from xbench.training import optim, schedule
from xbench.training.step import StepOptions, make_train_step

HOST = HostFacts(torch_xla=True, accelerate=True, logical_cores=2, torch_version="2.9.0")


def _cfg(*overrides):
    return OmegaConf.to_object(compose_point(CONF, list(overrides)))


def _optim(**kw) -> OptimConfig:
    sched = kw.pop("schedule", {})
    return OptimConfig(**kw, schedule=ScheduleConfig(**sched))


# ---------- schedules ----------

def test_linear_scaling_rule_and_warmup_then_step_decay():
    o = _optim(lr=0.1, lr_reference_batch=256, schedule=dict(name="step", warmup_epochs=5,
                                                             milestones_epochs=[30, 60, 80]))
    s = schedule.Schedule(o, global_batch=1024, steps_per_epoch=100, max_epochs=90)
    assert s.base == pytest.approx(0.4)  # 0.1 x 1024 / 256
    assert s.lr(0) == 0.0 and s.lr(250) == pytest.approx(0.2)  # half-way through the 5-epoch warm-up
    assert s.lr(500) == pytest.approx(0.4) and s.lr(2999) == pytest.approx(0.4)
    assert [s.lr(e * 100) for e in (30, 60, 80, 89)] == pytest.approx([0.04, 0.004, 0.0004, 0.0004])


def test_cosine_and_polynomial_decay_end_where_told():
    cos = schedule.Schedule(_optim(lr=1.0, schedule=dict(name="cosine", warmup_epochs=1)), 32, 10, 11)
    assert cos.lr(10) == pytest.approx(1.0) and cos.lr(60) == pytest.approx(0.5) and cos.lr(110) == pytest.approx(0)
    poly = schedule.Schedule(_optim(lr=9.0, schedule=dict(name="poly", power=2, warmup_epochs=3, end_lr=1e-4)),
                             2048, 10, 39)
    assert poly.lr(30) == pytest.approx(9.0) and poly.lr(390) == pytest.approx(1e-4)  # MLPerf's LARS end rate
    half = 1e-4 + (9.0 - 1e-4) * 0.5 ** 2
    assert poly.lr(210) == pytest.approx(half)  # 18 of 36 decay epochs
    opt = torch.optim.SGD([{"params": [torch.nn.Parameter(torch.zeros(1))]},
                           {"params": [torch.nn.Parameter(torch.zeros(1))], "lr_scale": 0.5}], lr=0.0)
    assert poly.apply(opt, 30) == pytest.approx(9.0)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([9.0, 4.5])


def test_schedule_hyperparameters_name_warmup_and_decay():
    h = schedule.hyperparameters(_optim(lr=9.0, schedule=dict(name="poly", power=2, warmup_epochs=3, end_lr=1e-4)),
                                 2048, 625, 39)
    assert h == {"lr_base": 9.0, "lr_schedule": "poly", "lr_warmup_epochs": 3, "lr_warmup_steps": 1875,
                 "lr_decay_epochs": 36, "lr_decay_steps": 22500, "lr_end": 1e-4, "lr_poly_power": 2}


def test_a_recipe_scaled_far_from_its_tuned_batch_follows_its_rule_and_is_warned_about(capsys):
    """Study 5's pod: MLPerf's LARS recipe (lr 9.0, 3 warm-up epochs at 2048) at global batch 32768 = 16x."""
    lars = _cfg("+recipe=mlperf_resnet50").optim
    assert (lars.tuned_global_batch, lars.scaling_rule) == (2048, "sqrt")
    s = schedule.Schedule(lars, 32768, 39, 39)
    assert s.base == pytest.approx(36.0) and s.schedule.warmup_epochs == pytest.approx(12.0)  # x sqrt(16) = 4
    assert s.lr(6 * 39) == pytest.approx(18.0)  # half-way through the 12-epoch warm-up
    assert "16x the batch this recipe was tuned at" in s.warning and "lr 9 -> 36" in s.warning
    assert "warm-up 3 -> 12 epochs" in s.warning and "16x" in capsys.readouterr().err
    h = schedule.hyperparameters(lars, 32768, 39, 39)
    assert (h["lr_base"], h["lr_warmup_epochs"], h["lr_decay_epochs"]) == (pytest.approx(36.0), pytest.approx(12.0),
                                                                         pytest.approx(27.0))
    assert h["lr_batch_ratio"] == 16 and h["lr_scaling_rule"] == "sqrt" and h["lr_batch_warning"] == s.warning
    from xbench.metrics.gates import record_gates
    assert record_gates(h, {}) == [s.warning]  # train-to-target puts the gates on the record
    at_tuned = schedule.hyperparameters(lars, 2048, 625, 39)
    assert at_tuned["lr_base"] == 9.0 and at_tuned["lr_warmup_epochs"] == 3 and "lr_batch_warning" not in at_tuned
    assert schedule.batch_warning(lars, 8192) is None  # 4x: within the rule's reach
    lin = _cfg("+recipe=resnet50_90ep").optim
    assert "1/8" not in (schedule.batch_warning(lin, 128) or "") and "0.125x" in schedule.batch_warning(lin, 128)
    assert schedule.base_lr(lin, 128) == pytest.approx(0.05)  # linear, per lr_reference_batch


@pytest.mark.parametrize("overrides,expect", [
    (("optim.scaling_rule=cube",), "optim.scaling_rule='cube' is unknown; allowed: none, linear, sqrt"),
    (("optim.scaling_rule=sqrt", "optim.tuned_global_batch=null"), "scales from optim.tuned_global_batch"),
    (("optim.scaling_rule=sqrt", "optim.tuned_global_batch=32"), "with optim.lr_reference_batch"),
])
def test_a_bad_scaling_rule_is_refused(overrides, expect):
    reasons = compat.check(_cfg("+experiment=digits_to_target", "+recipe=digits_sgd", *overrides), HOST)
    assert any(expect in r for r in reasons), reasons


# ---------- optimizers ----------

def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3), torch.nn.Linear(3, 2))


def test_no_weight_decay_on_norms_and_biases():
    groups = optim.param_groups(_model(), 1e-4, no_decay_norm_bias=True)
    decay, plain = groups
    assert [p.ndim for p in decay["params"]] == [2, 2] and decay["weight_decay"] == 1e-4 and decay["adapt"]
    assert [p.ndim for p in plain["params"]] == [1, 1, 1, 1] and plain["weight_decay"] == 0 and not plain["adapt"]
    sgd = optim.make_optimizer(_optim(name="sgd", nesterov=True, weight_decay=1e-4, no_decay_norm_bias=True),
                               _model(), lr=0.4)
    assert isinstance(sgd, torch.optim.SGD) and sgd.param_groups[0]["nesterov"]
    assert [g["weight_decay"] for g in sgd.param_groups] == [1e-4, 0.0] and sgd.param_groups[0]["lr"] == 0.4


def test_lars_step_is_the_layerwise_trust_ratio_update():
    w0, g = torch.tensor([3.0, 4.0]), torch.tensor([0.6, 0.8])  # |w| = 5, |g| = 1
    p = torch.nn.Parameter(w0.clone())
    p.grad = g.clone()
    lars = optim.LARS([{"params": [p], "weight_decay": 0.01, "adapt": True}], lr=2.0, momentum=0.9,
                      trust_coefficient=0.001)
    lars.step()
    local = 0.001 * 5 / (1 + 0.01 * 5)  # eta |w| / (|g| + wd |w|)
    assert p.detach() == pytest.approx(w0 - 2.0 * local * (g + 0.01 * w0))
    q = torch.nn.Parameter(w0.clone())  # a bias: plain momentum SGD, no adaptation
    q.grad = g.clone()
    optim.LARS([{"params": [q], "weight_decay": 0.0, "adapt": False}], lr=2.0).step()
    assert q.detach() == pytest.approx(w0 - 2.0 * g)


def test_lamb_step_is_adam_scaled_by_the_trust_ratio():
    w0, g = torch.tensor([3.0, 4.0]), torch.tensor([0.5, -1.0])
    p = torch.nn.Parameter(w0.clone())
    p.grad = g.clone()
    optim.LAMB([{"params": [p], "weight_decay": 0.01, "adapt": True}], lr=0.1, eps=1e-6).step()
    u = g / (g.abs() + 1e-6) + 0.01 * w0  # first step: bias-corrected m/sqrt(v) = sign(g)
    assert p.detach() == pytest.approx(w0 - 0.1 * (5 / u.norm()) * u, rel=1e-5)


@pytest.mark.parametrize("overrides,expect", [
    (dict(name="sgd", trust_coefficient=0.002), "optim.trust_coefficient=0.002 applies to lars"),
    (dict(name="adamw", momentum=0.5), "optim.momentum=0.5 applies to sgd/lars"),
    (dict(name="sgd", betas=[0.8, 0.9]), "optim.betas=[0.8, 0.9] applies to adamw/lamb"),
    (dict(name="lamb", nesterov=True), "optim.nesterov=True applies to sgd/lars"),
    (dict(name="adagrad"), "optim.name='adagrad' is unknown"),
])
def test_optimizer_options_it_does_not_have_are_refused(overrides, expect):
    assert any(expect in r for r in optim.rules(_optim(**overrides))), optim.rules(_optim(**overrides))
    assert optim.rules(_optim(name="lars", trust_coefficient=0.002, nesterov=True)) == []


# ---------- the shared step ----------

def test_label_smoothing_reaches_the_loss():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    want = torch.nn.functional.cross_entropy(model(x), y, label_smoothing=0.1).item()
    step = make_train_step(model, torch.optim.SGD(model.parameters(), lr=0.0), "classify", resolve("fp32", "cpu"),
                           options=StepOptions(label_smoothing=0.1))
    assert step(x, y).item() == pytest.approx(want)


def test_accumulating_two_micro_batches_is_one_step_over_both():
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    after = []
    for k in (1, 2):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        step = make_train_step(model, torch.optim.SGD(model.parameters(), lr=0.5), "classify",
                               resolve("fp32", "cpu"), options=StepOptions(accumulate=k))
        loss = step(x, y)
        after.append((loss.item(), model.weight.detach().clone()))
    assert after[0][0] == pytest.approx(after[1][0], rel=1e-6)  # the step's mean loss
    assert torch.allclose(after[0][1], after[1][1], atol=1e-6)  # the same update


# ---------- data on several ranks ----------

def test_two_ranks_train_together_what_one_device_trains_and_resume_mid_epoch():
    x, y = torch.arange(103.0).unsqueeze(1), torch.arange(103)
    data = torch.utils.data.TensorDataset(x, y)
    cfg = SimpleNamespace(num_workers=0, pin_memory=False)
    one = TrainFeed(data, 0, 1, 16, seed=3, data_cfg=cfg)
    ranks = [TrainFeed(data, r, 2, 8, seed=3, data_cfg=cfg) for r in range(2)]
    assert one.steps_per_epoch == ranks[0].steps_per_epoch == 6  # 103 // 16; (103 // 2) // 8
    for epoch in (0, 1):
        single = [set(b[1].tolist()) for b in one.batches(epoch, 0)]
        pair = [set(a[1].tolist()) | set(b[1].tolist()) for a, b in zip(*(f.batches(epoch, 0) for f in ranks))]
        assert single == pair  # global step i: the same 16 samples
    assert single != [set(b[1].tolist()) for b in one.batches(0, 0)]  # reshuffled per epoch
    resumed = [b[1].tolist() for b in ranks[1].batches(1, 4)]
    assert resumed == [b[1].tolist() for b in ranks[1].batches(1, 0)][4:]


def test_sharded_evaluation_counts_every_sample_once_with_padding():
    x = torch.eye(10)[torch.arange(23) % 10]
    y = torch.arange(23) % 10
    data = torch.utils.data.TensorDataset(x, y)
    cfg = SimpleNamespace(num_workers=0, pin_memory=False)
    shards = [EvalShard(data, r, 3, 4, cfg) for r in range(3)]  # 8, 8, 7 samples: batches of 4, one padded
    seen = [int(v) for s in shards for _, yb in s for v in yb if v != IGNORE_LABEL]
    assert sorted(seen) == sorted(y.tolist())
    assert all(xb.shape == (4, 10) for s in shards for xb, _ in s)  # one shape: one XLA graph
    identity = torch.nn.Linear(10, 10, bias=False)
    with torch.no_grad():
        identity.weight.copy_(torch.eye(10))
    sums = [score(identity, s, "top1", resolve("fp32", "cpu"), lambda a, b: (a, b), lambda: None) for s in shards]
    total = [sum(col) for col in zip(*sums)]
    assert total[:2] == [23.0, 23.0] and metric_value("top1", *total) == 1.0


def test_masked_lm_source_masks_a_seventh_of_the_tokens_and_scores_them(tmp_path):
    from xbench.data import text

    (tmp_path / "a.txt").write_text(" ".join(f"w{i % 37}" for i in range(4000)))
    data = SimpleNamespace(source="text_mlm", path=str(tmp_path), seq_len=32, vocab_size=40, eval_fraction=0.1,
                           ngrams=1)
    s = text.text_mlm(data, "mlm")
    tx, ty = s.train.tensors
    assert tx.shape[1] == 32 and len(s.eval) == 13 and len(s.train) == 112  # 125 windows, 10% held out
    masked = ty != -100
    assert 0.10 < masked.float().mean() < 0.20
    assert (tx[masked] == text.MASK).float().mean() > 0.7 and (tx[~masked] != text.MASK).all()
    assert s.info["vocab"] == 40 and int(tx.max()) < 40


# ---------- several targets: figures, cost, console, report ----------

def test_target_labels_and_per_target_names():
    assert tg.label(0.757) == "0p757" and tg.from_label("0p757") == 0.757 and tg.label(20.5) == "20p5"
    assert tg.column("train_time_to_target_s", 0.757) == "train_time_to_target_0p757_s"
    assert tg.column("epochs_to_target", 0.9) == "epochs_to_target_0p9"
    assert tg.column("train_cost_to_target_usd", 0.9) == "train_cost_to_target_0p9_usd"
    assert tg.column("metric_final", 0.9) == "metric_final"
    assert tg.targets_in(["target_reached_0p764", "target_reached_0p757", "target_reached"]) == [0.757, 0.764]


def _two_target_measurements():
    points = {0.757: {"epoch": 30.0, "step": 3000, "samples_seen": 1, "train_time_s": 100.0, "wall_s": 130.0,
                      "top1": 0.758}, 0.764: None}
    return {"target_reached": False, "goal_targets": [0.757, 0.764], "goal_metric": "top1",
            "train_time_to_target_s": None, "wall_time_to_target_s": None, "train_time_s": 200.0,
            "wall_s_total": 260.0, **tg.figures(points, "top1")}


def test_cost_to_each_target_is_billed(tmp_path):
    cfg = {"platform": load_platform("aws_p2_xlarge")}  # $0.90/h per second, 60 s minimum
    d = derive(_two_target_measurements(), cfg)
    assert d["train_cost_to_target_0p757_usd"] == pytest.approx(0.90 * 100 / 3600)
    assert d["cost_to_target_0p757_usd"] == pytest.approx(0.90 * 130 / 3600)
    assert d["train_cost_to_target_0p764_usd"] is None  # not reached: no cost
    assert d["train_cost_usd"] == pytest.approx(0.90 * 200 / 3600)  # the whole training


def test_console_and_report_show_each_target(tmp_path):
    from xbench.records.record import RunRecord
    from xbench.records.store import write_record
    from xbench.report.__main__ import main
    from xbench.sinks.console import summary

    cfg = {"model": {"name": "resnet50"}, "data": {"name": "imagenet", "batch_size": 256},
           "platform": load_platform("aws_p2_xlarge"), "runtime": {"name": "eager"}, "precision": {"name": "fp32"},
           "parallel": {"name": "ddp", "world_size": 4}, "bench": {"mode": "train_to_target"}}
    rec = RunRecord(run_id="r1", config=cfg, experiment="tpu_vs_gpu")
    rec.measurements = {**_two_target_measurements(), "target_status": "max_epochs", "metric_final": 0.76}
    rec.derived = derive(rec.measurements, cfg)
    rec.finish("ok")
    text = summary(rec, "record.json")
    assert "to 0.757" in text and "30 epochs, 100.0 / 130.0 s train / wall" in text
    assert [line.split() for line in text.splitlines() if "to 0.764" in line] == [["to", "0.764", "not", "reached"]]
    write_record(tmp_path / "results", rec)
    out = tmp_path / "report"
    assert main([str(tmp_path / "results"), "--out", str(out), "--format", "md", "--no-progress"]) == 0
    md = (out / "report.md").read_text()
    section = md[md.index("Time, epochs and cost to the quality target"):]
    rows = [line for line in section.splitlines() if line.startswith("|") and ("0.757" in line or "0.764" in line)]
    assert len(rows) == 2 and "100" in rows[0] and "0.025" in rows[0]  # 100 s, $0.025 to 75.7%


# ---------- the curve file, the MLPerf keys ----------

def test_curve_file_is_tailed_line_by_line(tmp_path):
    from xbench.sinks.curve import CurveTail, CurveWriter

    got = []
    tail = CurveTail(tmp_path / "curve.jsonl", got.append, interval_s=0.01)
    tail.start()
    w = CurveWriter(tmp_path / "curve.jsonl", [{"eval": 0}])
    w.write({"eval": 1, "top1": 0.5})
    w.f.write('{"eval": 2, "to')  # a line being written: not read until it is whole
    w.f.flush()
    tail.stop()
    assert got == [{"eval": 0}, {"eval": 1, "top1": 0.5}]


def test_mlperf_keys_of_the_lars_and_lamb_recipes():
    from xbench.bench.mlperf_log import recipe_events

    lars = _cfg("+recipe=mlperf_resnet50").optim
    events = dict(recipe_events(lars, schedule.hyperparameters(lars, 2048, 625, 39)))
    assert events["opt_name"] == "lars" and events["lars_opt_base_learning_rate"] == 9.0
    assert events["lars_opt_end_learning_rate"] == 0.0001 and events["lars_opt_learning_rate_decay_poly_power"] == 2
    assert events["lars_epsilon"] == 0.0 and math.log2(events["lars_opt_weight_decay"] / 0.0001).is_integer()
    lamb = _cfg("+recipe=mlperf_bert").optim
    events = dict(recipe_events(lamb, schedule.hyperparameters(lamb, 256, 100, 40)))
    assert events["opt_name"] == "lamb" and events["opt_lamb_weight_decay_rate"] == 0.01
    assert events["opt_learning_rate_training_steps"] == 4000 and events["opt_learning_rate_warmup_steps"] == 100


# ---------- bad input, refused before any work ----------

DIGITS = ("+experiment=digits_to_target",)


@pytest.mark.parametrize("overrides,expect", [
    (("goal.target=null", "goal.targets=[0.95,0.9]"), "goal.targets=[0.95, 0.9] must increase"),
    (("goal.targets=[0.9,0.97]",), "goal.target=0.95 and goal.targets=[0.9, 0.97] disagree"),
    (("goal.target=95",), "must be a fraction in (0, 1] (0.95, not 95)"),
    (("goal.metric=mlm_accuracy",), "goal.metric=mlm_accuracy needs a mlm model; 'mlp' is classify"),
    (("optim.schedule.warmup_epochs=20",), "warmup_epochs=20 is not shorter than the run"),
    (("optim.schedule.name=cosine", "optim.schedule.warmup_epochs=5", "optim.schedule.decay_epochs=30"),
     "warm-up 5 + decay 30 epochs do not fit goal.max_epochs=20"),
    (("optim.schedule.name=step", "optim.schedule.milestones_epochs=[10,30]"), "must lie after the warm-up"),
    (("goal.eval_batch_size=0",), "goal.eval_batch_size=0 is out of range; allowed: [1, "),
    (("optim.name=sgd", "optim.trust_coefficient=0.01"), "optim.trust_coefficient=0.01 applies to lars"),
    (("runtime=compile", "runtime.target=step", "optim.schedule.name=cosine"), "would recompile it each time"),
])
def test_bad_goals_and_recipes_are_refused_with_the_reason(overrides, expect):
    reasons = compat.check(_cfg(*DIGITS, *overrides), HOST)
    assert any(expect in r for r in reasons), reasons


def test_every_strategy_and_no_target_pass_compat():
    assert compat.check(_cfg(*DIGITS, "goal.target=null", "goal.max_epochs=4"), HOST) == []
    assert compat.check(_cfg(*DIGITS, "+recipe=digits_sgd", "parallel=ddp", "parallel.world_size=2"), HOST) == []
    assert compat.check(_cfg(*DIGITS, "parallel=xla_spmd", "parallel.world_size=2"), HOST) == []
    assert compat.check(_cfg(*DIGITS, "parallel=accelerate", "parallel.world_size=2"), HOST) == []
    assert compat.check(_cfg(*DIGITS, "parallel=xla_mp", "parallel.world_size=1"), HOST) == []


# ---------- gradient clipping: an optimizer option every recipe can set ----------

def _clip_case(clip: float | None, scaler=None):
    """(parameters before, after one step) of a linear model whose loss has a huge gradient, SGD at lr 1."""
    import dataclasses

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=1.0, momentum=0.0)
    p = resolve("fp32", "cpu")
    if scaler is not None:
        p = dataclasses.replace(p, scaler=scaler)
    step = make_train_step(model, opt, "classify", p, options=StepOptions(grad_clip_norm=clip))
    x, y = 1e4 * torch.randn(8, 4), torch.randint(0, 3, (8,))
    step(x, y)
    return model, before, (x, y)


def test_grad_clip_norm_bounds_the_update_as_clip_grad_norm_would():
    model, before, (x, y) = _clip_case(1.0)
    delta = torch.cat([(p.detach() - b).flatten() for p, b in zip(model.parameters(), before)])
    assert delta.norm().item() == pytest.approx(1.0, rel=1e-5)  # lr 1: the update is the clipped gradient
    # the same step by hand with torch's clip_grad_norm_: the same parameters
    torch.manual_seed(0)
    ref = torch.nn.Linear(4, 3)
    torch.nn.functional.cross_entropy(ref(x), y).backward()
    total = torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
    assert total.item() > 100  # the gradient really was huge
    with torch.no_grad():
        for q in ref.parameters():
            q -= q.grad
    for a, b in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b)
    unclipped, before, _ = _clip_case(None)
    assert torch.cat([(p.detach() - b).flatten() for p, b in zip(unclipped.parameters(), before)]).norm() > 100


def test_grad_clip_norm_under_a_gradient_scaler_clips_the_unscaled_gradients():
    """amp_fp16's scaler: unscaled before the norm is taken, so the update is the same as without a scaler."""
    scaled, before, _ = _clip_case(1.0, scaler=torch.amp.GradScaler("cpu", init_scale=2.0 ** 10))
    plain, _, _ = _clip_case(1.0)
    delta = torch.cat([(p.detach() - b).flatten() for p, b in zip(scaled.parameters(), before)])
    assert delta.norm().item() == pytest.approx(1.0, rel=1e-4)
    for a, b in zip(scaled.parameters(), plain.parameters()):
        torch.testing.assert_close(a, b)


def test_grad_clip_norm_is_an_optimizer_option_the_step_and_mlperf_log_take():
    from xbench.bench.mlperf_log import recipe_events

    cfg = _cfg("+experiment=digits_to_target", "optim.grad_clip_norm=1.0")
    assert StepOptions.of(cfg.optim).grad_clip_norm == 1.0
    assert ("opt_gradient_clip_norm", 1.0) in recipe_events(cfg.optim, {"lr_base": 0.1, "lr_schedule": "constant"})
    assert StepOptions.of(_cfg("+experiment=digits_to_target").optim).grad_clip_norm is None
