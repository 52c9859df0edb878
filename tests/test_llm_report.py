"""The report's LLM tables (xbench/report/llm.py) from FAKE records (xbench/report/fake.py's
fake_llm_records), and the torch-free parameter count they use against a real meta-device build."""

from __future__ import annotations

import pytest

from tests.test_report import _row as _one
from xbench.analysis.frame import load
from xbench.metrics.llm_sizes import SIZES, shards_needed, size_params, state_gib_per_device
from xbench.records.store import write_record
from xbench.report.fake import fake_llm_records
from xbench.report.rows import Context
from xbench.report.tables import build_tables


@pytest.fixture(scope="module")
def llm_tables(tmp_path_factory):
    root = tmp_path_factory.mktemp("llm") / "results"
    for r in fake_llm_records():
        write_record(root, r)
    made, skipped = build_tables(load([root], progress=False).frame, Context())
    return {t.name: t for t in made}, skipped


def test_strategies_table_compares_fsdp_with_ddp_at_the_same_global_batch(llm_tables):
    t = llm_tables[0]["llm_strategies"].frame
    ddp = _one(t, parallel="ddp", platform="cpu")
    fsdp = _one(t, parallel="fsdp", platform="cpu")
    assert ddp["global batch [tokens]"] == fsdp["global batch [tokens]"] == 1024
    assert fsdp["tokens/s [tokens/s]"] == pytest.approx(5591) and ddp["tokens/s [tokens/s]"] == pytest.approx(5366)
    assert fsdp["tokens/s per device [tokens/s]"] == pytest.approx(5591 / 2)
    assert fsdp["params + grads + optimizer per device [MiB]"] == pytest.approx(4 * 0.251)
    assert fsdp["params + grads + optimizer / ddp's [x]"] == pytest.approx(0.251 / 0.501)
    assert fsdp["tokens/s / ddp's [x]"] == pytest.approx(5591 / 5366)
    assert fsdp["activations / ddp's [x]"] == pytest.approx(3.61 / 4.32)
    # xla_fsdp is set against xla_spmd (replicated), never against DDP; a failed run keeps its reason.
    assert _one(t, parallel="xla_fsdp")["tokens/s / xla_spmd's [x]"] == pytest.approx(0.138 / 0.118)
    refused = _one(t, parallel="ddp", platform="h100_x8")
    assert refused["status"] == "1 failed" and "119.7 GiB per device" in refused["reason"]


def test_fit_table_says_which_llama_sizes_fit_under_which_strategy(llm_tables):
    t = llm_tables[0]["llm_fit"].frame
    assert set(t["platform"]) == {"h100_x8"}  # only the platform whose device memory is known
    b8 = _one(t, model="llama 8b")
    assert b8["ddp"] == "refused" and b8["fsdp / xla_fsdp"] == "fits"
    assert b8["states, whole model [GiB]"] == pytest.approx(8030261248 * 16 / 2**30)
    assert b8["states per device over 8 [GiB]"] == pytest.approx(8030261248 * 16 / 8 / 2**30)
    assert _one(t, model="llama 1b")["ddp"] == "fits"
    assert _one(t, model="llama 70b")["fsdp / xla_fsdp"] == "refused (needs 14 shards)"


def test_tables_say_why_when_there_are_no_llm_runs(tmp_path):
    from xbench.report.fake import fake_record

    write_record(tmp_path, fake_record("plain", throughput=100.0))
    _, skipped = build_tables(load([tmp_path], progress=False).frame, Context())
    assert "fsdp" in skipped["llm_strategies"] and "memory_gib" in skipped["llm_fit"]


@pytest.mark.parametrize("size", list(SIZES))
def test_closed_form_parameter_count_matches_the_meta_build(size):
    from xbench.models.decoder import LLAMA3_VOCAB, meta_params

    assert size_params(size) == meta_params(LLAMA3_VOCAB, size=size)["total"]


def test_shards_needed_is_the_least_that_fits():
    n = size_params("70b")
    k = shards_needed(n, "adamw", 80)
    assert state_gib_per_device(n, "adamw", k) <= 80 < state_gib_per_device(n, "adamw", k - 1)


def test_memory_plot_draws_every_llm_work_and_says_why_without_sharded_runs(tmp_path):
    import json

    from xbench.report.fake import fake_record
    from xbench.report.plots import build_plots

    root = tmp_path / "results"
    for r in fake_llm_records():
        write_record(root, r)
    made, skipped = build_plots(load([root], progress=False).frame, Context(), tmp_path / "plots")
    assert "llm_memory" in made and made["llm_memory"][0].stat().st_size > 2000
    drawn = json.loads((tmp_path / "plots" / "llm_memory.json").read_text())["works_drawn"]
    assert len(drawn) == 2 and any("synthetic_c4_llama3" in w for w in drawn)
    plain = tmp_path / "plain"
    write_record(plain, fake_record("plain", throughput=100.0))
    _, skipped = build_plots(load([plain], progress=False).frame, Context(), tmp_path / "plots2")
    assert "memory_*_gib" in skipped["llm_memory"]
