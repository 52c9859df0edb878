"""Every study preset is its study: each command in xbench/studies/studies.yaml composes (sweeps expanded into
their points) to the facts the study depends on, on a simulated host of its platform, bills exactly the devices
it drives and passes compat; headers and docs carry the same commands; no sweep point repeats another."""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from tests import studies_checks
from tests.conftest import CONF, REPO, cli_env, records
from xbench import compat, studies
from xbench.cost import load_platform
from xbench.platforms.detect import HostFacts, host_facts
from xbench.studies.sweep import compose_point, distinct_points, expand

pytestmark = pytest.mark.usefixtures("cached_compose")  # each override list composed once (compose_cache.py)
STUDIES = studies.all_studies()
FIVE = [s for s in STUDIES if s.get("study")]
COMMANDS = [pytest.param(s["id"], e["id"], id=f"{s['id']}-{e['id']}") for s in STUDIES
            for e in studies.small_entries(s)] + [
    pytest.param(s["id"], c["id"], id=f"{s['id']}-{c['id']}",
                 marks=[pytest.mark.xfail(strict=True, reason=c["pending"]["needs"])]
                 if c.get("pending", {}).get("stage") == "compose" else [])
    for s in STUDIES for c in s["full_scale"]]
COMPAT = [pytest.param(s["id"], c["id"], id=f"{s['id']}-{c['id']}",
                       marks=[pytest.mark.xfail(strict=True, reason=c["pending"]["needs"])] if c.get("pending") else [])
          for s in STUDIES for c in s["full_scale"]]


@pytest.fixture(scope="module", autouse=True)
def data_root(tmp_path_factory):
    """XBENCH_DATA with the real data sets' layouts (compat checks that the files are there)."""
    root = tmp_path_factory.mktemp("data")
    for split in ("train", "val"):
        (root / "imagenet" / split / "n01440764").mkdir(parents=True)
        (root / "imagenet" / split / "n01440764" / "a.JPEG").write_bytes(b"")
    (root / "wikipedia").mkdir()
    (root / "wikipedia" / "a.txt").write_text("plain text for masked-LM training\n")
    (root / "twitter_sentiment").mkdir()
    (root / "twitter_sentiment" / "Sentiment Analysis Dataset.csv").write_text(
        "ItemID,Sentiment,SentimentSource,SentimentText\n1,0,Sentiment140,is so sad\n")
    before = os.environ.get("XBENCH_DATA")
    os.environ["XBENCH_DATA"] = str(root)
    yield root
    if before is None:
        os.environ.pop("XBENCH_DATA", None)
    else:
        os.environ["XBENCH_DATA"] = before


def _entry(study_id: str, which: str) -> dict:
    s = studies.get(study_id)
    return next(c for c in (*studies.small_entries(s), *s["full_scale"]) if c["id"] == which)


@functools.cache
def _points(command: str) -> tuple:
    """(overrides, composed config) for every job the command runs."""
    cmd = studies.parse(command)
    jobs = expand(CONF, cmd.overrides) if cmd.multirun else [cmd.overrides]
    return tuple((tuple(job), compose_point(CONF, job)) for job in jobs)


def _facts(command: str) -> list[dict]:
    env = studies.parse(command).env
    return [studies.facts(OmegaConf.to_container(cfg, resolve=True), env) for _, cfg in _points(command)]


# ---------- the manifest, the headers, the docs ----------

def test_manifest_names_five_studies_and_their_presets():
    assert [s["study"] for s in FIVE] == [1, 2, 3, 4, 5]
    assert len({s["id"] for s in STUDIES}) == len(STUDIES)
    for s in STUDIES:
        assert (CONF / "experiment" / f"{s['preset']}.yaml").is_file(), s["preset"]
        assert s["full_scale"], f"{s['id']} names no full-scale command"
        for cmd in studies.commands(s):
            assert studies.parse(cmd).module in ("xbench", "xbench.report"), cmd


@pytest.mark.parametrize("study_id", [s["id"] for s in STUDIES])
def test_header_and_docs_carry_every_command_verbatim(study_id):
    s = studies.get(study_id)
    lines = (CONF / "experiment" / f"{s['preset']}.yaml").read_text().splitlines()
    header = [line for line in lines[: next(i for i, line in enumerate(lines) if not line.startswith("#"))]]
    docs = (REPO / "docs" / "studies.md").read_text()
    for cmd in studies.commands(s):
        assert any(cmd in line for line in header), f"conf/experiment/{s['preset']}.yaml header lacks: {cmd}"
        assert cmd in docs, f"docs/studies.md lacks: {cmd}"
    assert header[1:] == studies.header_lines(s), "run python -m xbench.studies --write"


# ---------- every command composes to its study ----------

@pytest.mark.parametrize("study_id,which", COMMANDS)
def test_command_composes_to_the_study(study_id, which):
    entry = _entry(study_id, which)
    got = _facts(entry["command"])
    assert got, entry["command"]
    assert studies_checks.mismatches(got, entry["expect"]) == [], entry["command"]
    idle = entry.get("idle_devices", 0)  # a study's own under-use (study 3's LeaderGPU: 1 of 2 GPUs), stated
    for f, (job, _) in zip(got, _points(entry["command"])):
        assert f["devices_billed"] is not None and f["devices_used"] + idle == f["devices_billed"], (
            f"{' '.join(job)}: drives {f['devices_used']} {f['billed_unit']}s (+{idle} idle), billed for {f['devices_billed']}")
        assert f["price_per_hour"], f"{' '.join(job)}: unpriced (every study command carries a price)"
    if which not in {e["id"] for e in studies.small_entries(studies.get(study_id))}:
        assert {f["platform"] for f in got} == {entry["platform"]}


XLA_CUDA_PAIR = "2.8.0"  # the last torch / torch-xla release with XLA:CUDA (and its fp16 AMP): study 4's GPU host


@pytest.mark.parametrize("study_id,which", COMPAT)
def test_full_scale_command_passes_compat_on_its_platform(study_id, which, monkeypatch):
    """On a simulated host of the command's platform; an XLA:CUDA command (PJRT_DEVICE=CUDA) on one set up as
    torch-xla's docs require for it: torch 2.8 + torch-xla 2.8 + its CUDA plugin (2.9 removed XLA:CUDA)."""
    entry = _entry(study_id, which)
    cmd = studies.parse(entry["command"])
    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    for key, value in cmd.env.items():
        monkeypatch.setenv(key, value)
    xla_cuda = cmd.env.get("PJRT_DEVICE") == "CUDA"
    if xla_cuda:
        monkeypatch.setattr(compat, "_version", lambda dist: XLA_CUDA_PAIR if dist == "torch-xla" else None)
    for job, cfg in _points(entry["command"]):
        obj = OmegaConf.to_object(cfg)
        host = studies_checks.simulated_host(OmegaConf.to_container(cfg.platform, resolve=True))
        facts = HostFacts(**{**host, "torch_version": XLA_CUDA_PAIR} if xla_cuda else host)
        assert compat.check(obj, facts) == [], " ".join(job)


def _xla_cuda_bert_8_v100():
    """bert_8_v100's XLA side through torch-xla's XLA:CUDA (parallel=xla_spmd, PJRT CUDA), the route the
    manifest names for torch 2.8 + torch-xla 2.8 while torchax has no fp16 loss scaling."""
    words = studies.parse(_entry("xla_speedup", "bert_8_v100")["command"]).overrides
    job = [w for w in words if not w.startswith(("parallel=", "data.batch_size="))] + ["parallel=xla_spmd"]
    return OmegaConf.to_object(compose_point(CONF, job))


def test_study_4_xla_side_on_v100s_is_torchax_and_says_why_fp16_waits(monkeypatch):
    """The 8-V100 commands' XLA side is runtime=torchax over a JAX mesh (torch-xla 2.9 has no XLA:CUDA); compat
    refuses its amp_fp16 with the reason the manifest's pending states (no gradient scaler under jax.grad)."""
    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    for which in ("bert_8_v100", "bert_max_batch"):
        entry = _entry("xla_speedup", which)
        xla_side = [OmegaConf.to_object(c) for _, c in _points(entry["command"]) if c.runtime.name == "torchax"]
        assert xla_side and all(c.precision.name == "amp_fp16" for c in xla_side), which
        assert "PJRT_DEVICE" not in studies.parse(entry["command"]).env
        host = studies_checks.simulated_host(load_platform(entry["platform"]))
        for cfg in xla_side:
            assert cfg.parallel.name == ("jax_dp" if which == "bert_8_v100" else "single")
            reasons = compat.check(cfg, HostFacts(**host))
            assert any("amp_fp16 needs a gradient scaler" in r for r in reasons), reasons
        assert "gradient scaler" in entry["pending"]["needs"] and entry["pending"]["stage"] == "compat"


def test_study_4_runs_fp16_on_xla_cuda_where_torch_xla_has_it(monkeypatch):
    """XLA on 8 V100 in amp_fp16, as the study: accepted with torch-xla 2.8 (torch_xla.amp's fp16 autocast and
    GradScaler on XLA:GPU), refused with the reason on 2.9, which removed them; amp_fp16 on XLA:CPU stays refused."""
    monkeypatch.setenv("PJRT_DEVICE", "CUDA")
    cfg = _xla_cuda_bert_8_v100()
    assert cfg.precision.name == "amp_fp16" and cfg.platform.accelerator == "V100" and cfg.platform.memory_gib == 16
    host = studies_checks.simulated_host(load_platform("gce_n1_standard_64_8xv100"))
    for release, refused in (("2.8.0", False), ("2.9.0", True)):
        monkeypatch.setattr(compat, "_version", lambda dist, r=release: r if dist == "torch-xla" else None)
        reasons = [r for r in compat.check(cfg, HostFacts(**{**host, "torch_version": release}))
                   if "amp_fp16" in r]
        assert bool(reasons) == refused, reasons
    assert "pytorch/xla#9608" in reasons[0] and "torch-xla 2.8" in reasons[0]
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    assert any("amp_fp16" in r and "needs a CUDA GPU" in r for r in compat.check(cfg, HostFacts(**host)))


@pytest.mark.xla
def test_xla_cuda_fp16_trains_under_torch_xlas_autocast_and_scaler():
    """The runtime's XLA:CUDA fp16 policy (runtimes/xla.py xla_cuda_amp) as torch-xla <= 2.8 documents it: the
    step runs under `torch_xla.amp.autocast(device, dtype=torch.float16)` and scales through
    `torch_xla.amp.GradScaler`. No XLA:CUDA here, so `torch_xla.amp` is a stand-in with that documented API
    (autocast records its arguments; GradScaler is torch's GradScaler, as torch-xla's subclasses it) and the
    step runs on the CPU; the XLA:CPU device's own policy is unchanged."""
    import contextlib
    from types import SimpleNamespace

    import torch

    from xbench.precision import resolve
    from xbench.runtimes.xla import xla_cuda_amp
    from xbench.training.step import make_train_step

    entered = []

    class Scaler(torch.amp.GradScaler):
        def __init__(self):
            super().__init__("cpu", init_scale=8.0)
            self.scaled = 0

        def scale(self, outputs):
            self.scaled += 1
            return super().scale(outputs)

    def autocast(device, dtype):
        entered.append((device, dtype))
        return contextlib.nullcontext()

    base = resolve("amp_fp16", "xla")
    assert xla_cuda_amp(base, "xla:0", hw="CPU", amp=SimpleNamespace(autocast=autocast, GradScaler=Scaler)) is base
    p = xla_cuda_amp(base, "xla:0", hw="CUDA", amp=SimpleNamespace(autocast=autocast, GradScaler=Scaler))
    assert isinstance(p.scaler, Scaler) and p.compute_dtype == "fp16"
    model = torch.nn.Linear(4, 2)
    step = make_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1), "classify", p)
    step(torch.randn(8, 4), torch.randint(0, 2, (8,)))
    assert entered == [("xla:0", torch.float16)] and p.scaler.scaled == 1
    with pytest.raises(RuntimeError, match="pytorch/xla#9608"):
        xla_cuda_amp(base, "xla:0", hw="CUDA", amp=SimpleNamespace(autocast=autocast))  # torch-xla 2.9's amp


def _needs_torch_xla(cfg) -> bool:
    """Whether a point runs through torch-xla (its runtime or strategy): such points run in .venv-xla."""
    from xbench import parallel, runtimes

    return "torch_xla" in runtimes.requires(cfg.runtime.name) + tuple(parallel.get(cfg.parallel.name).requires)


def _small_points_pass_compat_here(study_id: str, monkeypatch, through_xla: bool) -> int:
    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    here, checked = host_facts(), 0
    for command in studies.small_commands(studies.get(study_id)):
        for job, cfg in _points(command):
            if _needs_torch_xla(cfg) == through_xla:
                assert compat.check(OmegaConf.to_object(cfg), here) == [], " ".join(job)
                checked += 1
    return checked


@pytest.mark.parametrize("study_id", [s["id"] for s in STUDIES])
def test_small_command_passes_compat_here(study_id, monkeypatch):
    """Every point of the small commands that needs no torch-xla, in the default environment (the newest torch)."""
    _small_points_pass_compat_here(study_id, monkeypatch, through_xla=False)


@pytest.mark.xla
def test_small_commands_xla_points_pass_compat_in_the_xla_environment(monkeypatch):
    """The points that run through torch-xla, in .venv-xla (torch 2.9.0 + torch-xla 2.9.0)."""
    checked = {s["id"]: _small_points_pass_compat_here(s["id"], monkeypatch, through_xla=True) for s in STUDIES}
    assert {k for k, n in checked.items() if n} >= {"xla_speedup", "resnet50_tpu", "llm_pretrain"}, checked


def test_every_platform_bills_exactly_the_devices_it_declares():
    for path in sorted((CONF / "platform").glob("*.yaml")):
        assert studies_checks.platform_problems(load_platform(path.stem)) == [], path.name


def test_cpu_vs_gpu_small_trains_the_six_distinct_workloads():
    got = _facts(studies.get("cpu_vs_gpu")["small"]["command"])
    assert len(got) == 12
    pairs = {(f["model"], f["data"]) for f in got}
    assert pairs == {("mlp", "synthetic_mnist"), ("cnn_small", "synthetic_mnist"), ("vgg_cifar", "synthetic_cifar10"),
                     ("fasttext", "synthetic_imdb"), ("bilstm", "synthetic_imdb"), ("char_lstm", "synthetic_nietzsche")}
    assert {(f["platform"], f["threads"]) for f in got} == {("local_as_gce_n1_standard_1", 1),
                                                           ("local_as_gce_n1_standard_2", 2)}


def test_tpu_and_gpu_sides_of_study_1_train_the_same_global_batches():
    s = studies.get("tpu_vs_gpu")
    tpu, gpu = (_facts(_entry("tpu_vs_gpu", i)["command"]) for i in ("tpu_synthetic", "gpu_synthetic"))
    assert {f["global_batch"] for f in tpu} == {f["global_batch"] for f in gpu} == {256, 512, 768, 1024}
    assert all(f["devices"] == 8 and f["billed_unit"] == "device" for f in tpu)  # cores of a v2-8
    assert s["study"] == 1


def test_pod_slices_are_priced_per_chip_and_drive_every_core():
    got = {c["platform"]: _facts(c["command"])[0] for c in studies.get("pod_scaling")["full_scale"]
           if c["id"] != "pod_to_target"}  # the throughput slices (the to-target run takes 64 per core)
    for name, cores in (("tpu_v2_8", 8), ("tpu_v2_32", 32), ("tpu_v2_128", 128), ("tpu_v2_256", 256), ("tpu_v2_512", 512)):
        assert got[name]["devices"] == cores and got[name]["global_batch"] == cores * 128
    assert [got[f"tpu_v2_{n}"]["price_per_hour"] for n in (32, 128, 256, 512)] == pytest.approx([24, 96, 192, 384])


# ---------- workloads win; sweeps do not repeat ----------

def test_a_workload_wins_over_the_preset_and_plus_workload_is_refused():
    from hydra.errors import ConfigCompositionException

    for preset in ("cpu_vs_gpu", "cpu_vs_gpu_zoo"):
        cfg = compose_point(CONF, [f"+experiment={preset}", "workload=vgg_cifar10"])
        assert (cfg.model.name, cfg.data.name, cfg.data.batch_size) == ("vgg_cifar", "synthetic_cifar10", 32)
        cfg = compose_point(CONF, ["workload=bilstm_imdb", f"+experiment={preset}"])
        assert cfg.model.name == "bilstm"
        with pytest.raises(ConfigCompositionException, match="Multiple values for workload"):
            compose_point(CONF, ["+workload=vgg_cifar10", f"+experiment={preset}"])  # the shape


@pytest.mark.parametrize("command", sorted({c for s in STUDIES for c in studies.commands(s)
                                            if studies.parse(c).multirun and studies.parse(c).module == "xbench"
                                            and "cpu_capability" not in c}))
def test_no_sweep_point_repeats_another(command):
    assert distinct_points(CONF, studies.parse(command).overrides) == []


@pytest.mark.parametrize("preset", sorted(p.stem for p in (CONF / "experiment").glob("*.yaml")))
def test_no_preset_sweep_repeats_a_point(preset):
    assert distinct_points(CONF, [f"+experiment={preset}"]) == []


def test_distinct_points_catches_the_old_cpu_vs_gpu(tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / "experiment" / "old_cpu_vs_gpu.yaml").write_text(
        "# @package _global_\n# The issue's shape: the preset overrides the model the swept +workload chose.\n"
        "defaults:\n  - override /model: mlp\n  - override /data: synthetic_mnist\n"
        "experiment: old_cpu_vs_gpu\ndata:\n  batch_size: 128\nhydra:\n  sweeper:\n    params:\n"
        "      +workload: mlp_mnist,cnn_mnist,vgg_cifar10\n      bench.threads: 1,2\n")
    problems = distinct_points(conf, ["+experiment=old_cpu_vs_gpu"])
    assert len(problems) == 4  # cnn and vgg repeat mlp, at each thread count
    assert "+workload=cnn_mnist changes nothing" in problems[0]


# ---------- published figures ----------

def test_published_figures_have_value_unit_conditions_source_and_date():
    assert studies.published_problems() == []
    by = {(r["study"], r["figure"]): r["value"] for r in studies.published_rows()}
    assert by[("tpu_vs_gpu", "tpu_throughput")] == 2796 and by[("tpu_vs_gpu", "gpu_throughput")] == 2839
    assert (by[("tpu_vs_gpu", "cost_to_757")], by[("tpu_vs_gpu", "cost_to_764")]) == (55, 73)
    assert by[("tpu_vs_gpu", "reserved_images_per_dollar")] == 375
    assert by[("xla_speedup", "xla_bert_speedup")] == 7 and by[("xla_speedup", "bert_3m_cost")] == 32
    assert by[("pod_scaling", "near_linear_scaling")] == 256 and by[("pod_scaling", "pod_vs_v100")] == 200
    for s in FIVE:
        assert studies.published_rows(s["id"]), f"{s['id']} has no published figure"


def test_the_articles_figures_are_there_with_their_kind():
    """The figures the issue found wrong or missing, as the articles print them (each row's source quotes it)."""
    rows = {(r["study"], r["figure"]): r for r in studies.published_rows()}
    want = {("pod_scaling", "v2_pod_minutes"): (7.9, "training_time"), ("pod_scaling", "one_v100_hours"): (26, "training_time"),
            ("pod_scaling", "pod_cost_vs_8_v100"): (0.6, "ratio"), ("pod_scaling", "pod_speed_vs_8_v100"): (27, "ratio"),
            ("xla_speedup", "bert_throughput_xla_off"): (23.1, "real_throughput"),
            ("xla_speedup", "bert_throughput_xla_on"): (168, "real_throughput"),
            ("gpu_clouds", "cost_paperspace_low_end"): (1.6, "cost"), ("gpu_clouds", "cost_aws_low_end"): (3.3, "cost"),
            ("gpu_clouds", "cost_gce_low_end"): (2.4, "cost"), ("gpu_clouds", "cost_gce_high_end"): (3.4, "cost"),
            ("tpu_vs_gpu", "tpu_throughput"): (2796, "real_throughput"), ("tpu_vs_gpu", "gpu_throughput"): (2839, "real_throughput"),
            ("tpu_vs_gpu", "mxnet_gpu_768"): (3280, "synthetic_throughput")}
    for key, (value, kind) in want.items():
        r = rows[key]
        assert (r["value"], r["kind"]) == (value, kind), key
        quoted = {0.6: "40%", 2796: "2,796", 2839: "2,839", 3280: "3,280"}.get(value, f"{value:g}")
        assert quoted in r["source"], key
    assert "11.3" not in " ".join(str(r["value"]) for r in rows.values())
    text = (studies.MANIFEST.read_text() + (REPO / "docs" / "studies.md").read_text() + (REPO / "README.md").read_text())
    assert "/work/shared" not in text and "STUDIES.md" not in text and "seeds/" not in text
    assert "total cost of the 4-epoch training" not in " ".join(studies.get("gpu_clouds")["not_recovered"])


def test_published_problems_refuses_a_compare_of_another_kind(monkeypatch):
    manifest = studies._manifest()
    fig = {"id": "x", "what": "x", "value": 2796, "unit": "images/s", "kind": "real_throughput", "date": "2018",
           "conditions": {"hardware": "h", "batch": "b", "precision": "p", "data": "d"},
           "source": {"article": "riseml_2018", "quote": "q"},
           "compare": {"column": "throughput_samples_per_s", "where": {"data": "synthetic_imagenet"}}}
    fake = {**manifest, "studies": [{"id": "s", "preset": "s", "published": [fig]}]}
    monkeypatch.setattr(studies, "_manifest", lambda: fake)
    assert any("is synthetic_throughput, the figure is real_throughput" in p for p in studies.published_problems())
    fig["compare"]["where"] = {}
    assert any("of no kind" in p for p in studies.published_problems())  # a throughput must pin its data


def test_studies_package_needs_no_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "from xbench import studies; from xbench.studies import sweep\n"
            "assert studies.published_rows('tpu_vs_gpu')\n"
            "assert sweep.expand(sys.argv[1], ['+experiment=cpu_vs_gpu'])\n"
            "import runpy; sys.argv = ['x', 'gpu_clouds']; runpy.run_module('xbench.studies', run_name='__main__')")
    p = subprocess.run([sys.executable, "-c", code, str(CONF)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert studies.get("gpu_clouds")["small"]["command"] in p.stdout


# ---------- what other code must do (xfail until it does) ----------

def _cfg(command: str):
    return OmegaConf.to_object(_points(command)[0][1])


@pytest.mark.slow
def test_the_cli_refuses_a_repeating_sweep_by_default(tmp_path):
    store = tmp_path / "results"
    p = subprocess.run([sys.executable, "-m", "xbench", "-m", "+experiment=digits_to_target", "platform=cpu,cpu",
                        f"store.root={store}", "logger=none", "bench.steps=2", "goal.max_epochs=1"], cwd=REPO,
                       env=cli_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "compose to the same config" in p.stderr and records(store) == []


def test_a_preset_refused_here_says_what_runs_here(monkeypatch):
    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    here = HostFacts(torch_xla=True, accelerate=True, logical_cores=2, torch_version="2.9.0")
    for study_id, which in (("resnet50_tpu", "tpu_v3_8"), ("tpu_vs_gpu", "gpu_synthetic")):
        reasons = compat.check(_cfg(_entry(study_id, which)["command"]), here)
        hint = studies.run_here_hint(study_id)
        assert reasons and any(hint in r for r in reasons), reasons


def test_xla_spmd_on_pjrt_cuda_spans_world_size_gpus(monkeypatch):
    from xbench.launch.xla import xla_env

    monkeypatch.setenv("PJRT_DEVICE", "CUDA")
    cfg = _xla_cuda_bert_8_v100()
    assert xla_env(cfg).get("GPU_NUM_DEVICES") == "8"


@pytest.mark.xla  # judged against the installed torch-xla's version
def test_xla_on_a_gpu_platform_does_not_fall_back_to_the_cpu(monkeypatch):
    from xbench.launch.xla import xla_env

    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    cfg = _xla_cuda_bert_8_v100()
    facts = HostFacts(**studies_checks.simulated_host(load_platform("gce_n1_standard_64_8xv100")))
    reasons = compat.check(cfg, facts)
    assert xla_env(cfg)["PJRT_DEVICE"] == "CUDA" and "PJRT_DEVICE" not in os.environ  # the check set nothing
    assert not any("would run XLA on" in r for r in reasons)  # the runtime's rule: PJRT is the billed GPUs
    assert any("on XLA:CUDA" in r for r in reasons)  # judged as XLA:CUDA (torch-xla 2.9 has no fp16 there), not CPU


def test_an_spmd_world_size_other_than_the_slice_is_refused(monkeypatch):
    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    cfg = compose_point(CONF, ["+experiment=pod_scaling", "workload=resnet50_imagenet_synthetic", "platform=tpu_v2_32",
                               "parallel=xla_spmd", "parallel.world_size=8", "precision=bf16"])
    facts = HostFacts(**studies_checks.simulated_host(load_platform("tpu_v2_32")))
    assert any("world_size" in r for r in compat.check(OmegaConf.to_object(cfg), facts))


def _report_of_small_runs(tmp_path, study_id: str, throughputs: list[float]) -> str:
    """report.md drawn from fake ok records of the study's small points (throughputs in point order)."""
    from xbench.records.record import RunRecord
    from xbench.records.store import write_record
    from xbench.report.__main__ import main

    for i, ((_, cfg), tp) in enumerate(zip(_points(studies.get(study_id)["small"]["command"]), throughputs)):
        rec = RunRecord(run_id=f"r{i}", experiment=study_id, config=OmegaConf.to_container(cfg, resolve=True))
        rec.measurements = {"throughput_samples_per_s": tp}
        rec.finish("ok")
        write_record(tmp_path / "results", rec)
    out = tmp_path / "report"
    assert main([str(tmp_path / "results"), "--out", str(out), "--format", "md", "--no-progress"]) == 0
    return (out / "report.md").read_text()


def test_the_report_shows_the_published_figures(tmp_path):
    assert "2796" in _report_of_small_runs(tmp_path, "tpu_vs_gpu", [10.0]).replace(",", "")


def test_the_report_scales_over_platforms_of_one_family(tmp_path):
    md = _report_of_small_runs(tmp_path, "pod_scaling", [10.0, 19.0])
    assert "**table scaling**" not in md  # not among "Not drawn"


def test_published_figures_are_drawn_beside_matching_runs_and_never_mixed_into_them(tmp_path):
    """Runs under a published figure's conditions: the published table holds their median beside the figure,
    the plot is drawn, and no measured statistic counts the published value. The 2,796 / 2,839 img/s were
    measured on real, augmented ImageNet: a synthetic run at the same batch is never set beside them."""
    from xbench.analysis.frame import load
    from xbench.analysis.published import published_beside_measured
    from xbench.records.record import RunRecord
    from xbench.records.store import write_record
    from xbench.report.__main__ import main

    sides = (("tpu_v2_8", ["parallel=xla_spmd", "parallel.world_size=8", "precision=amp_bf16", "data.batch_size=128"], 8),
             ("aws_p3_8xlarge", ["parallel=ddp", "parallel.world_size=4", "precision=amp_fp16", "data.batch_size=256"], 4))
    points = [(plat, [*extra, "data=imagenet", "data.augment=true"], n) for plat, extra, n in sides] + [
        (sides[0][0], sides[0][1], sides[0][2])]  # a synthetic TPU run at the same batch
    for i, ((plat, extra, n), tp) in enumerate(zip(points, (2500.0, 2700.0, 3100.0))):
        cfg = compose_point(CONF, ["+experiment=tpu_vs_gpu", "workload=resnet50_imagenet_synthetic", f"platform={plat}",
                                   *extra])
        rec = RunRecord(run_id=f"r{i}", experiment="tpu_vs_gpu", config=OmegaConf.to_container(cfg, resolve=True))
        rec.measurements = {"throughput_samples_per_s": tp, "devices": n, "global_batch_size": 1024}
        rec.finish("ok")
        write_record(tmp_path / "results", rec)
    rows = {r["figure"]: r for r in published_beside_measured(load([tmp_path / "results"], progress=False).frame)}
    assert rows["tpu_throughput"]["value"] == 2796 and rows["tpu_throughput"]["measured"] == 2500.0
    assert rows["tpu_throughput"]["kind"] == "real_throughput" and rows["tpu_throughput"]["measured_runs"] == 1
    assert rows["gpu_throughput"]["measured"] == 2700.0 and rows["gpu_throughput"]["measured_runs"] == 1
    assert rows["cost_to_757"]["measured"] is None and "no ok run" in rows["cost_to_757"]["why_not"]
    assert rows["mxnet_over_best_tpu"]["measured"] is None and "ratio" in rows["mxnet_over_best_tpu"]["why_not"]
    assert rows["cirrascale_monthly"]["why_not"].startswith("a price")
    assert all(r["why_not"] for r in rows.values() if r["measured"] is None)
    out = tmp_path / "report"
    assert main([str(tmp_path / "results"), "--out", str(out), "--no-progress"]) == 0
    assert (out / "plots" / "published.png").stat().st_size > 10_000
    throughput_csv = (out / "tables" / "throughput.csv").read_text()
    assert "2796" not in throughput_csv and "2,796" not in throughput_csv  # measured tables hold runs only


@pytest.mark.parametrize("study_id", [s["id"] for s in FIVE])
@pytest.mark.slow  # over 3 s: make test-fast's budget
def test_each_small_report_draws_every_figure_kind_of_its_study(study_id, tmp_path, monkeypatch):
    """The report of the study's small points (records shaped as those runs leave them; the figures are
    the real derive() of made-up throughputs) draws every table and plot its manifest promises (the report
    draws those plots only: the others are not what this checks). scripts/study_walkthrough.sh checks the
    same on real runs, every plot drawn (python -m xbench.studies --check-report)."""
    from xbench.metrics import targets
    from xbench.metrics.derived import derive
    from xbench.records.record import RunRecord
    from xbench.records.store import write_record
    from xbench.report import plots
    from xbench.report.__main__ import main

    s = studies.get(study_id)
    promised = {f.split(":", 1)[1] for f in s["small"].get("figures") or [] if f.startswith("plot:")}
    monkeypatch.setattr(plots, "PLOTS", {name: fn for name, fn in plots.PLOTS.items() if name in promised})
    i = 0
    for command in studies.small_commands(s):
        for _, cfg in _points(command):
            c = OmegaConf.to_container(cfg, resolve=True)
            f = studies.facts(c)
            n, batch = f["devices_used"], f["batch_size_per_device"]
            tp = 100.0 * n * (1 + i % 3) * (1 + batch / 64)  # any positive figures: only the shapes matter here
            step = batch * n / tp
            m = {"devices": n, "world_size": n, "global_batch_size": batch * n, "batch_size_per_device": batch,
                 "throughput_samples_per_s": tp, "step_time_s_median": step, "step_time_s_p10": step, "step_time_s_p90": step,
                 "first_step_s": 3 * step, "warmup_s": 5 * step, "compiles_warmup": 2, "compiles_timed": 0,
                 "compile_time_s": 1.0 if c["runtime"]["name"] != "eager" else None, "compute_dtype": "fp32",
                 "flops_per_sample_train": 3e6, "window_s_total": 30 * step, "timed_steps_per_window": 30, "repeats": 1,
                 "threads_intra": f["threads"]}
            series = {}
            if f["bench_mode"] == "train_to_target":  # epochs to each target, and the curve they come from
                goals = str(f["targets"] or f["target"] or "").split(",")  # none: a fixed number of epochs
                reached = {float(t): {"epoch": 2 + j, "step": 100 * (j + 1), "samples_seen": 3200 * (j + 1),
                                      "train_time_s": 10.0 * (j + 1) / n, "wall_s": 12.0 * (j + 1) / n, "top1": float(t)}
                           for j, t in enumerate(g for g in goals if g)}
                m.update(targets.figures(reached, "top1"), target_reached=bool(reached), goal_metric="top1",
                         train_time_to_target_s=max((p["train_time_s"] for p in reached.values()), default=None),
                         wall_time_to_target_s=max((p["wall_s"] for p in reached.values()), default=None),
                         train_time_s=30.0 / n, wall_s_total=40.0 / n, metric_final=0.9)
                series = {"eval": [0, 1], "epoch": [1, 2], "train_time_s": [5.0 / n, 10.0 / n], "top1": [0.5, 0.9]}
            rec = RunRecord(run_id=f"r{i:03d}", experiment=s["preset"], config=c, measurements=m, series=series)
            rec.derived = derive(m, c)
            rec.finish("ok")
            write_record(tmp_path / "results", rec)
            i += 1
    words = shlex.split(s["report"]["small"])[3:]  # python -m xbench.report results ... --out report/<study>
    argv = [str(tmp_path / w) if w == "results" or w.startswith("report/") else w for w in words]
    assert main([*argv, "--no-progress"]) == 0
    out = tmp_path / next(w for w in words if w.startswith("report/"))
    assert studies.missing_figures(s, out) == []
