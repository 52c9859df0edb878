"""The studies' full-scale commands compose to the articles' own setups (each fact checked against the article's
text): study 4 trains MLPerf v0.7's BERT, which is BERT-large; study 3's low-end Paperspace machine is the P6000;
study 2's biLSTM runs Keras' unrolled implementation; the reports normalise where the articles did."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from tests.conftest import CONF
from xbench import studies
from xbench.data.spec import InputSpec
from xbench.models import build
from xbench.studies.sweep import compose_point, expand

pytestmark = pytest.mark.usefixtures("cached_compose")


def _configs(command: str) -> list:
    cmd = studies.parse(command)
    jobs = expand(CONF, cmd.overrides) if cmd.multirun else [cmd.overrides]
    return [compose_point(CONF, job) for job in jobs]


def bert_params(vocab: int, hidden: int, layers: int, intermediate: int, positions: int, types: int = 2) -> int:
    """BERT with the tied masked-LM head and no pooler, counted from its shapes: embeddings (word, position, type,
    LayerNorm); per layer Q/K/V/output projections with biases, the two FFN matrices with biases, two LayerNorms;
    the head's dense + LayerNorm and the decoder's own bias."""
    h, i = hidden, intermediate
    embeddings = (vocab + positions + types) * h + 2 * h
    layer = 4 * (h * h + h) + (h * i + i) + (i * h + h) + 2 * 2 * h
    head = h * h + h + 2 * h + vocab
    return embeddings + layers * layer + head


def test_the_closed_form_counts_bert_base_as_built():
    assert bert_params(30522, 768, 12, 3072, 512) == 109_514_298  # tests/test_models.py's count of the built model


def test_study_4_trains_bert_large_in_every_bert_command():
    """MLPerf Training v0.7's BERT (the article's 23.1 -> 168 sequences/s, 3 million sequences on a v3-32) is
    BERT-large: 24 layers, 1024 hidden, 16 heads."""
    s = studies.get("xla_speedup")
    bert = [c for c in s["full_scale"] if "bert" in c["command"]]
    assert {c["id"] for c in bert} >= {"bert_8_v100", "bert_max_batch", "bert_v3_32", "bert_mlperf_8_v100",
                                      "bert_mlperf_v3_32"}
    for c in bert:
        for cfg in _configs(c["command"]):
            o = cfg.model.options
            assert (cfg.model.name, o.layers, o.hidden, o.heads, o.intermediate, cfg.data.seq_len) == (
                "bert", 24, 1024, 16, 4096, 512), c["id"]


def test_study_4_xla_side_on_gpus_is_torchax_and_on_tpus_torch_xla():
    s = studies.get("xla_speedup")
    by = {c["id"]: _configs(c["command"]) for c in s["full_scale"]}
    assert {(c.runtime.name, c.parallel.name) for c in by["bert_8_v100"]} == {("torchax", "jax_dp"), ("eager", "ddp")}
    assert {c.runtime.name for c in by["bert_max_batch"]} == {"torchax", "eager"}
    assert {(c.runtime.name, c.parallel.name) for c in by["bert_v3_32"]} == {("xla", "xla_spmd")}
    assert all(c.parallel.world_size == 8 for c in by["bert_8_v100"])


def test_bert_large_builds_through_the_same_code_at_a_cpu_size_with_335m_parameters():
    """The workload composed as the full-scale command composes it, at 16 tokens (a CPU test's size), built by
    xbench's model registry on the meta device: 24 x 1024 x 16 heads and 335.2M parameters by the closed form."""
    cfg = compose_point(CONF, ["+experiment=xla_speedup", "workload=bert_large_wikipedia_synthetic", "parallel=single",
                               "data.seq_len=16", "data.batch_size=1"])
    spec = InputSpec.from_data(cfg.data)
    options = OmegaConf.to_container(cfg.model.options)
    with torch.device("meta"):
        model = build(cfg.model.name, spec, options)
    layers = model.encoder.layers
    assert len(layers) == 24 and layers[0].self_attn.embed_dim == 1024 and layers[0].self_attn.num_heads == 16
    params = sum(p.numel() for p in model.parameters())
    want = bert_params(spec.vocab_size, 1024, 24, 4096, options["max_position"])
    print(f"BERT-large parameters: {params:,} (closed form {want:,})")
    assert params == want == 335_174_458 and 335e6 <= params <= 340e6


# ---------- the reports draw the articles' headline comparisons (simulated full-scale records) ----------

# Throughput [samples/s] per platform, shaped as the articles report them: the full v2 Pod ~200x one V100 and ~27x
# the 8-V100 VM; the TPU ~2% ahead of the p3.8xlarge at 1024; Paperspace's P6000 fast enough to cost half of AWS's K80.
SIMULATED = {"pod_scaling": {"gce_v100": 1000.0, "gce_n1_standard_64_8xv100": 7400.0, "tpu_v2_8": 3125.0,
                             "tpu_v2_32": 12500.0, "tpu_v2_128": 50000.0, "tpu_v2_256": 100000.0,
                             "tpu_v2_512": 200000.0},
             "tpu_vs_gpu": {"tpu_v2_8": 3060.0, "aws_p3_8xlarge": 3000.0, "aws_p3_8xlarge_reserved_1y": 3000.0},
             "gpu_clouds": {"aws_p2_xlarge": 1000.0, "gce_k80": 1000.0, "gce_p100": 2500.0, "paperspace_p6000": 2600.0,
                            "paperspace_v100": 4000.0, "leadergpu_2x_p100": 2500.0, "hetzner_ex51_gpu": 2000.0,
                            "ibm_bare_metal_k80x2": 1200.0, "aws_p3_2xlarge": 4000.0}}


def _simulated_full_store(root, study_id: str) -> None:
    """ok records of the study's full-scale throughput points (the configs as those commands compose them; the
    figures the real derive() of the simulated throughputs)."""
    from xbench.metrics.derived import derive
    from xbench.records.record import RunRecord
    from xbench.records.store import write_record

    s, i = studies.get(study_id), 0
    for c in s["full_scale"]:
        if "train_to_target" in c["command"] and study_id != "gpu_clouds":
            continue  # the to-target runs are another work (real data, a target); the headlines are throughput's
        for cfg in _configs(c["command"]):
            conf = OmegaConf.to_container(cfg, resolve=True)
            f = studies.facts(conf)
            # other machines of the study (study 3's DataParallel runs): 1,000 per GPU; torch.compile 10% faster
            tp = (SIMULATED[study_id].get(f["platform"]) or 1000.0 * f["devices_used"]) * (
                1.1 if f["runtime"] == "compile" else 1.0)
            n, batch = f["devices_used"], f["batch_size_per_device"]
            m = {"devices": n, "world_size": n, "global_batch_size": batch * n, "batch_size_per_device": batch,
                 "throughput_samples_per_s": tp, "step_time_s_median": batch * n / tp, "repeats": 1}
            rec = RunRecord(run_id=f"{study_id}{i:03d}", experiment=s["preset"], config=conf, measurements=m)
            rec.derived = derive(m, conf)
            rec.finish("ok")
            write_record(root, rec)
            i += 1


def _report(tmp_path, study_id: str, command: str):
    import shlex

    from xbench.report.__main__ import main

    words = shlex.split(command)[3:]
    argv = [str(tmp_path / w) if w == "results" or w.startswith("report/") else w for w in words]
    assert main([*argv, "--no-progress"]) == 0
    return tmp_path / next(w for w in words if w.startswith("report/"))


def _baseline_cell(out, platform: str, column: str) -> float:
    import csv

    rows = list(csv.DictReader((out / "tables" / "baseline.csv").read_text().splitlines()))
    [value] = {float(r[column]) for r in rows if r["platform"] == platform}
    return value


@pytest.mark.parametrize("study_id", ["pod_scaling", "tpu_vs_gpu", "gpu_clouds"])
@pytest.mark.slow  # over 3 s: make test-fast's budget
def test_the_full_reports_draw_the_articles_headline_comparisons(study_id, tmp_path):
    from xbench.studies.__main__ import main as studies_main

    s = studies.get(study_id)
    _simulated_full_store(tmp_path / "results", study_id)
    outs = [_report(tmp_path, study_id, cmd) for cmd in studies.full_reports(s)]
    for out in outs:
        assert studies.missing_headlines(s, out) == [], out
        assert studies_main([study_id, "--check-report", str(out), "--full"]) == 0
    time_col, cost_col = studies.BASELINE_COLUMNS["time"], studies.BASELINE_COLUMNS["cost"]
    if study_id == "pod_scaling":
        by = {o.name: o for o in outs}
        pod_vs_v100 = 1 / _baseline_cell(by["pod_scaling"], "tpu_v2_512", time_col)
        vs_vm = by["pod_scaling_vs_8xv100"]
        time, cost = _baseline_cell(vs_vm, "tpu_v2_512", time_col), _baseline_cell(vs_vm, "tpu_v2_512", cost_col)
        print(f"\npod: {pod_vs_v100:.0f}x one V100; against the 8-V100 VM time {time:.3g}x ({1 / time:.0f}x faster), "
              f"cost {cost:.3g}x")
        assert pod_vs_v100 == pytest.approx(200, rel=0.01)
        assert time == pytest.approx(0.037, abs=0.001) and cost == pytest.approx(0.622, abs=0.005)
    if study_id == "gpu_clouds":
        cost = _baseline_cell(outs[0], "paperspace_p6000", cost_col)
        print(f"\nP6000 cost against AWS's K80: {cost:.3g}x (article: $1.6 / $3.3 = 0.48)")
        assert 0 < cost < 1
    if study_id == "tpu_vs_gpu":
        time = _baseline_cell(outs[0], "tpu_v2_8", time_col)
        print(f"\nTPU v2-8 time against the p3.8xlarge: {time:.3g}x")
        assert time == pytest.approx(3000 / 3060, rel=0.01)


@pytest.mark.slow  # over 3 s: make test-fast's budget
def test_check_report_fails_a_full_report_without_the_headline(tmp_path, capsys):
    """The report command as it was (no --baseline): no baseline table, so no "x times one V100"."""
    from xbench.studies.__main__ import main as studies_main

    _simulated_full_store(tmp_path / "results", "pod_scaling")
    out = _report(tmp_path, "pod_scaling", "python -m xbench.report results --filter experiment=pod_scaling "
                                           "--out report/pod_scaling")
    assert studies_main(["pod_scaling", "--check-report", str(out), "--full"]) == 1
    said = capsys.readouterr().err
    assert "x times one V100" in said and "baseline.csv" in said
    # a report normalised to another baseline does not hold the comparison either
    out2 = _report(tmp_path, "pod_scaling", "python -m xbench.report results --filter experiment=pod_scaling "
                                            "--baseline platform=gce_n1_standard_64_8xv100 --out report/b/pod_scaling")
    assert any("is not platform=gce_v100" in m for m in studies.missing_headlines(studies.get("pod_scaling"), out2))


def test_study_2_full_scale_bilstm_runs_unrolled_and_fused_is_its_own_axis():
    """The article's biLSTM figure is Keras' LSTM default, implementation=0 (not cuDNN): every full-scale biLSTM
    point runs lstm_impl=unrolled, except the two commands whose axis is the implementation."""
    s = studies.get("cpu_vs_gpu")
    axis = {"bilstm_fused_k80", "bilstm_fused_cpu16"}
    for c in s["full_scale"]:
        impls = {cfg.model.options.lstm_impl for cfg in _configs(c["command"]) if cfg.model.name == "bilstm"}
        assert impls == ({"unrolled", "fused"} if c["id"] in axis else {"unrolled"}), c["id"]
    assert axis <= {c["id"] for c in s["full_scale"]}


def test_study_3_low_end_paperspace_machine_is_the_p6000():
    from xbench.cost import load_platform

    s = studies.get("gpu_clouds")
    platforms = {c["platform"] for c in s["full_scale"]}
    assert "paperspace_p6000" in platforms and "paperspace_m4000" not in platforms
    p = load_platform("paperspace_p6000")
    assert (p["accelerator"], p["memory_gib"], p["sm_count"], p["peak_tflops"]["fp32"]) == ("P6000", 24, 30, 12.6)
    fig = next(f for f in s["published"] if f["id"] == "cost_paperspace_low_end")
    assert fig["compare"]["where"]["platform"] == "paperspace_p6000" and "P6000" in fig["conditions"]["hardware"]


# ---------- published figures: kinds, the articles' remaining numbers, no invented ones ----------

def test_published_figures_have_the_kind_of_number_the_article_gave():
    figs = {(r["study"], r["figure"]): r for r in studies.published_rows()}
    assert studies.published_problems() == []
    assert figs[("tpu_vs_gpu", "tpu_top1_lead_90ep")]["kind"] == "difference"  # 0.7 points of top-1
    assert figs[("pod_scaling", "near_linear_scaling")]["kind"] == "count"  # 256 chips
    tf = figs[("tpu_vs_gpu", "tf_benchmarks_below_mxnet")]
    assert (tf["value"], tf["unit"], tf["kind"]) == (3, "percent slower (about)", "ratio") and "3%" in tf["quote"]
    acc = figs[("xla_speedup", "mlperf_v07_accelerators")]
    assert (acc["value"], acc["kind"]) == (4000, "count") and "more than 4,000 accelerators" in acc["quote"]
    # "similar, or even worse" is no number: it stays a qualitative line, never a figure of value 1
    assert ("cpu_vs_gpu", "cpu64_over_cpu32_time") not in figs
    study2 = next(s for s in studies.all_studies() if s["id"] == "cpu_vs_gpu")
    assert any("or even worse" in line and "qualitative" in line for line in study2["not_recovered"])


def test_the_max_batch_caption_names_the_searched_axis_not_the_starting_batch():
    from xbench.analysis.rows import Rows
    from xbench.report.tables import max_batch_table

    base = {"experiment": "x", "model": "mlp", "data": "synthetic_mnist", "platform": "local", "runtime": "eager",
            "precision": "fp32", "parallel": "single", "batch_size_per_device": 4, "global_batch_size": 4,
            "devices": 1, "bench_mode": "find_max_batch", "status": "ok", "max_batch_size_per_device": 64,
            "min_failing_batch_size_per_device": 128}
    note = max_batch_table(Rows([base]), None).note
    assert "batch/device=" not in note and "global batch=" not in note
    assert "Compared: the per-device batch" in note and "model=mlp" in note


# ---------- recipes ----------

def test_study_1_small_commands_pin_their_threads():
    study = next(s for s in studies.all_studies() if s["id"] == "tpu_vs_gpu")
    commands = [study["small"]["command"], *(a["command"] for a in study["small"]["also"])]
    assert all("bench.threads=" in c for c in commands)
    assert {cfg.bench.threads for cfg in _configs(study["small"]["command"])} == {2}  # n1-standard-2's 2 vCPUs


def test_a_far_batch_warning_names_the_epoch_budget_it_would_scale_to(capsys):
    """MLPerf's LARS recipe (3 warm-up epochs at 2048) at 32768 = 16x: the sqrt rule's warm-up is 12 epochs, so
    the 39-epoch budget would be 39 + 9 = 48 to keep the tuned decay (36 epochs); the run keeps 39."""
    from xbench.training import schedule

    lars = compose_point(CONF, ["+recipe=mlperf_resnet50"]).optim
    s = schedule.Schedule(lars, 32768, 39, 39)
    assert s.max_epochs == 39 and schedule.scaled_max_epochs(lars, 32768, 39) == pytest.approx(48.0)
    assert ("goal.max_epochs=39 (tuned at global batch 2048, this batch 32768) would scale to 48 epochs"
            in s.warning)
    assert "would scale to 48" in capsys.readouterr().err
    assert "epoch budget" not in schedule.batch_warning(lars, 32768)  # no budget given, none named


def test_the_llm_full_scale_recipe_is_mlperf_v5_1_llama31_8b_reference():
    study = next(s for s in studies.all_studies() if s["id"] == "llm_pretrain")
    entry = next(e for e in study["full_scale"] if e["id"] == "h100_fsdp_mlperf_recipe")
    [cfg] = _configs(entry["command"])
    o = cfg.optim
    assert (o.name, o.lr, o.tuned_global_batch, list(o.betas), o.eps, o.weight_decay, o.grad_clip_norm) == (
        "adamw", 5e-4, 32, [0.9, 0.95], 1e-5, 0.1, 1.0)
    assert (o.schedule.name, o.schedule.end_factor) == ("cosine", 0.1)
    assert cfg.data.batch_size * cfg.parallel.world_size == 32 and cfg.data.seq_len == 8192
    assert cfg.parallel.name == "fsdp" and cfg.parallel.activation_checkpointing is True
    assert (cfg.goal.metric, cfg.goal.target) == ("log_perplexity", 3.3)


# ---------- prices ----------

def test_an_unconfirmed_platform_price_is_marked_in_the_cost_tables(tmp_path):
    """One record on a platform whose price nobody checked (price_confirmed: false, as tpu_v5p_16 ships): the cost
    table's row and note say "unconfirmed", the markdown too; a checked price says nothing."""
    from xbench.analysis.frame import load
    from xbench.records.store import write_record
    from xbench.report.fake import fake_record
    from xbench.report.render import md_table
    from xbench.report.rows import Context
    from xbench.report.tables import build_tables

    assert OmegaConf.load(CONF / "platform" / "tpu_v5p_16.yaml").price_confirmed is False
    assert OmegaConf.load(CONF / "platform" / "aws_p5_48xlarge.yaml").price[0].amount == 55.04
    rec = fake_record("r1", platform="tpu_v5p_16", usd_per_hour=33.6, price_as_of="2025-11-01")
    rec.config["platform"]["price_confirmed"] = False
    write_record(tmp_path / "results", rec)
    write_record(tmp_path / "results", fake_record("r2", platform="gce_v100", usd_per_hour=2.48))
    made, _ = build_tables(load([tmp_path / "results"], progress=False).frame, Context())
    cost = next(t for t in made if t.name == "cost")
    rows = {r["platform"]: r for r in cost.frame.to_dict("records")}
    assert rows["tpu_v5p_16"]["price checked"] == "unconfirmed (as of 2025-11-01)"
    assert not isinstance(rows["gce_v100"]["price checked"], str)  # checked: no mark (None/NaN)
    assert "Unconfirmed price (tpu_v5p_16)" in cost.note and "gce_v100" not in cost.note.split("Unconfirmed")[1]
    table_md = md_table(cost)
    assert "price checked" in table_md and "unconfirmed (as of 2025-11-01)" in table_md
