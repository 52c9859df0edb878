"""Billing arithmetic against hand-computed answers, the catalog's prices, derived cost figures, and
`python -m xbench.cost` re-pricing stored records without torch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from tests.conftest import CONF, REPO, cli_env
from xbench.config import register_configs
from xbench.cost import apply_prices, load_platform
from xbench.metrics.cost import billed_s, price_per_hour, problems, run_cost
from xbench.metrics.derived import derive, normalise
from xbench.records.record import RunRecord
from xbench.records.store import write_record


def cost(platform, seconds, standalone=False):
    return run_cost(platform, seconds, standalone)["total"]


def test_per_second_against_per_hour_rounding_up():
    per_s = {"billing": "second", "price": [{"amount": 3.06}]}
    hourly = {"billing": "hour", "price": [{"amount": 2.80}]}
    assert cost(per_s, 5400) == pytest.approx(4.59)  # 1.5 h x $3.06
    assert cost(hourly, 5400) == pytest.approx(5.60)  # two started hours x $2.80
    assert cost(hourly, 3600) == pytest.approx(2.80)  # exactly one hour is one hour
    assert cost(hourly, 3601) == pytest.approx(5.60)
    assert cost(per_s, 0.4) == pytest.approx(3.06 / 3600)  # a started second
    assert billed_s(61, "minute") == 120 and billed_s(10.0004, "millisecond") == pytest.approx(10.001)


def test_minimum_charge_and_per_minute_euros():
    aws = load_platform("aws_p2_xlarge")  # $0.90/h, per second, 60 s minimum
    assert cost(aws, 30) == pytest.approx(0.015)  # 60 s x $0.90 / 3600
    assert cost(aws, 90) == pytest.approx(0.0225)
    leader = load_platform("leadergpu_p100")  # EUR 0.08 per started minute
    assert run_cost(leader, 61)["currency"] == "EUR"
    assert cost(leader, 61) == pytest.approx(0.16)
    assert derive({"throughput_samples_per_s": 100.0}, {"platform": leader})["eur_per_hour"] == pytest.approx(4.8)


def test_host_vm_is_a_component_of_the_price():
    tpu = load_platform("tpu_v2_8")  # $6.50 TPU + $0.19 n1-standard-4 host
    c = run_cost(tpu, 3600)
    assert c["components"] == pytest.approx({"tpu": 6.50, "host_vm": 0.19})
    assert c["total"] == pytest.approx(6.69)
    gce = load_platform("gce_k80")  # $0.45 K80 + $0.0475 n1-standard-1
    assert price_per_hour(gce) == pytest.approx(0.4975)


def test_monthly_rent_and_setup_fee_amortised_over_utilisation():
    hetzner = {"billing": "month_amortised", "utilisation": 0.5, "commitment_months": 12,
               "price": [{"name": "server", "amount": 99.0, "unit": "month", "currency": "EUR"},
                         {"name": "setup", "kind": "setup_fee", "amount": 99.0, "currency": "EUR"}]}
    # 99 / (730 h x 0.5) = 0.271233 per used hour, plus 99 / (365 h x 12) = 0.0226027
    assert price_per_hour(hetzner) == pytest.approx(0.2938356, rel=1e-6)
    assert cost(hetzner, 36000) == pytest.approx(2.938356, rel=1e-6)  # a 10-hour job
    assert cost(hetzner, 36000, standalone=True) == pytest.approx(198.0)  # one month + the setup fee
    assert cost(hetzner, 1000 * 3600, standalone=True) == pytest.approx(297.0)  # 1000 h: two months + setup


def test_monthly_fee_on_top_of_per_millisecond_billing():
    ps = load_platform("paperspace_v100")  # $2.30/h per millisecond + $5/month
    assert price_per_hour(ps) == pytest.approx(2.30 + 5 / 730)
    ps["utilisation"] = 0.1  # the account runs machines 73 h a month: the fee weighs 10x more per hour
    assert price_per_hour(ps) == pytest.approx(2.30 + 5 / 73)
    assert cost(ps, 1.0004) == pytest.approx(2.30 / 3600 * 1.001 + 5 / 73 / 3600 * 1.0004)


def test_spot_discount_per_vcpu_and_reserved_utilisation():
    spot = {"price": [{"amount": 3.06, "discount": 0.7, "pricing_model": "spot"}]}
    assert cost(spot, 7200) == pytest.approx(1.836)  # 2 h x $3.06 x 0.3
    vcpu = load_platform("gce_n1_standard_64_preemptible")  # 64 x $0.01 per vCPU-hour
    assert price_per_hour(vcpu) == pytest.approx(0.64)
    assert cost(vcpu, 5400) == pytest.approx(0.96)
    assert price_per_hour(load_platform("gce_cpu64_preemptible_2017")) == pytest.approx(0.509)
    ri = load_platform("aws_p3_8xlarge_reserved_1y")  # $12.24 less 31%, paid for every hour of the term
    assert price_per_hour(ri) == pytest.approx(8.4456)
    ri["utilisation"] = 0.5
    assert price_per_hour(ri) == pytest.approx(16.8912)  # half the hours idle: each used hour costs double
    committed = load_platform("local_as_gce_n1_standard_2_committed_1y")  # 2 vCPUs x $0.0475 less 37%
    assert price_per_hour(committed) == pytest.approx(0.05985)


def test_an_amortised_price_without_its_unit_is_refused():
    """An hourly rate under month_amortised billing read as monthly rent would be 730x too cheap."""
    p = {"name": "x", "billing": "month_amortised", "price": [{"name": "vm", "amount": 0.0475, "count": 2}]}
    [msg] = problems(p)
    assert "needs the amount's unit: unit: hour" in msg and "unit: month" in msg
    with pytest.raises(ValueError, match="needs the amount's unit"):
        price_per_hour(p)
    fee = {"name": "y", "billing": "month_amortised", "price": [{"name": "setup", "kind": "setup_fee", "amount": 9}]}
    assert problems(fee) == []  # a one-off fee has no rate


def test_bad_prices_are_reported_with_what_is_allowed():
    bad = {"name": "x", "utilisation": 0, "price": [
        {"name": "a", "amount": 1, "unit": "fortnight"}, {"name": "b", "amount": 1, "billing": "yearly"},
        {"name": "c", "amount": 1, "discount": 1.5, "currency": "EUR"}]}
    text = "; ".join(problems(bad))
    for part in ("utilisation=0 is out of range; allowed: (0, 1]", "unit='fortnight' is unknown",
                 "billing='yearly' is unknown", "discount=1.5 is out of range; allowed: [0, 1)", "mix currencies"):
        assert part in text
    with pytest.raises(ValueError, match="fortnight"):
        price_per_hour(bad)


def test_every_priced_platform_names_its_source_and_date():
    for path in sorted((CONF / "platform").glob("*.yaml")):
        p = load_platform(path.stem)
        assert not problems(p), path
        if p["price"]:
            assert p["price_source"].startswith("https://") and len(p["price_as_of"]) == 10, path
        if p["peak_tflops"]:
            assert p["peak_tflops_source"], f"{path}: say which datasheet the peak figures come from"


def test_study_figures_recomputed():
    # 2018 TPUv2 vs V100: ~3186 img/s on a Cloud TPU ($6.50 + $0.19 host) vs ~3128 img/s on p3.8xlarge ($12.24)
    tpu = derive({"throughput_samples_per_s": 3186.0}, {"platform": load_platform("tpu_v2_8"),
                 "data": {"dataset_size": 1_281_167}, "goal": {"projection_epochs": 90}})
    gpu = derive({"throughput_samples_per_s": 3128.0}, {"platform": load_platform("aws_p3_8xlarge")})
    assert tpu["samples_per_s_per_usd_per_hour"] == pytest.approx(476.23, rel=1e-4)  # 3186 / 6.69
    assert gpu["samples_per_s_per_usd_per_hour"] == pytest.approx(255.56, rel=1e-4)  # 3128 / 12.24
    # 90 ImageNet epochs at 3186 img/s: 115,305,030 images / 3186 = 36,191.16 s = 10.053 h -> $67.26
    assert tpu["projected_training_s"] == pytest.approx(36191.16, rel=1e-6)
    assert tpu["projected_training_cost_usd"] == pytest.approx(67.255, rel=1e-4)
    # MLPerf v0.7: BERT on a v3-32 slice (16 chips x $2.00) for under an hour: under $32
    assert cost(load_platform("tpu_v3_32"), 3599) < 32.0 <= cost(load_platform("tpu_v3_32"), 3600) + 1e-9


def test_cost_to_target_bills_wall_and_training_time_and_normalises():
    m = {"target_reached": True, "train_time_to_target_s": 30.0, "wall_time_to_target_s": 95.0,
         "wall_s_total": 95.0, "throughput_samples_per_s": 1000.0}
    d = derive(m, {"platform": load_platform("aws_p3_2xlarge")})
    assert d["train_cost_to_target_usd"] == pytest.approx(0.051)  # 30 s, billed as the 60 s minimum
    assert d["cost_to_target_usd"] == pytest.approx(3.06 * 95 / 3600)
    base = {"run_id": "k80", "measurements": {**m, "train_time_to_target_s": 120.0},
            "config": {"platform": load_platform("aws_p2_xlarge")}}
    base["derived"] = derive(base["measurements"], base["config"])  # 120 s x $0.90/h = $0.03
    n = derive(m, {"platform": load_platform("aws_p3_2xlarge")}, baseline=base)
    assert n["normalised_basis"] == "train_time_to_target_s" and n["normalised_time"] == pytest.approx(0.25)
    assert n["normalised_cost"] == pytest.approx(0.051 / 0.03)
    assert normalise({"measurements": {"throughput_samples_per_s": 10.0}}, {"measurements": {}}) == {}


def test_price_override_from_the_command_line_is_config():
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        c = compose(config_name="config", overrides=["platform=tpu_v2_8", "platform.price.0.amount=4.5"])
    p = OmegaConf.to_container(c.platform, resolve=True)
    assert price_per_hour(p) == pytest.approx(4.69)
    assert apply_prices(load_platform("gce_k80"), ["gpu=0.35"])["price"][0]["amount"] == 0.35
    with pytest.raises(SystemExit, match="ambiguous"):
        apply_prices(load_platform("gce_k80"), ["0.35"])


def test_cost_cli_reprices_stored_records_without_torch(tmp_path):
    rec = RunRecord(run_id="r1", config={"bench": {"mode": "train_to_target"}, "platform": {"name": "local"}})
    rec.measurements = {"throughput_samples_per_s": 2000.0, "target_reached": True, "train_time_to_target_s": 7200.0,
                        "wall_time_to_target_s": 7300.0, "wall_s_total": 7300.0, "epochs_to_target": 3.0}
    rec.finish("ok")
    write_record(tmp_path, rec)
    code = ("import sys; from xbench.cost import main; main(sys.argv[1:]); "
            "assert 'torch' not in sys.modules, 'xbench.cost imported torch'")
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path), "--platform", "ibm_bare_metal_k80", "--json"],
                       cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    [row] = [json.loads(line) for line in p.stdout.splitlines()]
    assert row["train_cost_to_target_usd"] == pytest.approx(5.60)  # 2 h exactly: two hours
    assert row["cost_to_target_usd"] == pytest.approx(8.40)  # 2 h 1 min 40 s: three started hours
    assert row["usd_per_million_samples"] == pytest.approx(2.80 / 3600 / 2000 * 1e6)


def test_cost_cli_baseline_is_repriced_with_its_currency(tmp_path, capsys):
    """Records priced in EUR, re-priced as a USD platform, against one of them: the baseline's cost is
    in the new currency too, so the normalised cost is there (it was dropped as a currency mismatch)."""
    from xbench.cost import main

    for rid, tp in (("base", 1000.0), ("fast", 2000.0)):
        rec = RunRecord(run_id=rid, config={"bench": {"mode": "throughput"}, "platform": load_platform("hetzner_ex51_gpu")})
        rec.measurements = {"throughput_samples_per_s": tp, "window_s_total": 1.0}
        rec.finish("ok")
        write_record(tmp_path, rec)
    assert main([str(tmp_path), "--platform", "aws_p3_2xlarge", "--baseline", "base", "--json"]) == 0
    rows = {r["run_id"]: r for r in (json.loads(line) for line in capsys.readouterr().out.splitlines())}
    assert rows["fast"]["normalised_cost"] == pytest.approx(0.5)  # same price, twice the throughput
    assert rows["fast"]["normalised_time"] == pytest.approx(0.5)


def test_cost_refuses_an_alias_bomb_a_huge_or_deep_platform_file(tmp_path):
    """A platform YAML is bounded in bytes, nesting and size with its aliases expanded (9 aliases of 9
    aliases ... is 490 million values from 1 kB): refused at once, not expanded by OmegaConf."""
    bomb = 'a: &a ["x","x","x","x","x","x","x","x","x"]\n' + "".join(
        f"{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
    (tmp_path / "bomb.yaml").write_text(bomb + "name: bomb\n")
    with pytest.raises(SystemExit, match="490329066 values once its aliases are expanded, more than 100000"):
        load_platform(str(tmp_path / "bomb.yaml"))
    (tmp_path / "deep.yaml").write_text("name: deep\nx: " + "[" * 100 + "]" * 100 + "\n")
    with pytest.raises(SystemExit, match="nested more than 32 levels"):
        load_platform(str(tmp_path / "deep.yaml"))
    (tmp_path / "big.yaml").write_text("name: big\n" + "#" * (2 << 20))
    with pytest.raises(SystemExit, match="more than 1048576 bytes"):
        load_platform(str(tmp_path / "big.yaml"))
    (tmp_path / "ok.yaml").write_text("name: lab\nminimum_charge_s: &p 1.5\nprice:\n  - {name: machine, amount: *p}\n")
    assert load_platform(str(tmp_path / "ok.yaml"))["price"][0]["amount"] == 1.5  # an alias or two is fine


def test_cost_refuses_boolean_throughput_and_infinite_prices(tmp_path, capsys):
    from xbench.cost import main
    from xbench.metrics.cost import not_numbers

    for rid, tp in (("bool", True), ("text", "fast"), ("fine", 100.0)):
        rec = RunRecord(run_id=rid, config={"bench": {"mode": "throughput"}, "platform": load_platform("aws_p3_2xlarge")})
        rec.measurements = {"throughput_samples_per_s": tp, "window_s_total": 1.0, "target_reached": True}
        rec.finish("ok")
        write_record(tmp_path, rec)
    assert main([str(tmp_path), "--platform", "aws_p3_2xlarge", "--json"]) == 0
    out = capsys.readouterr()
    assert [json.loads(line)["run_id"] for line in out.out.splitlines()] == ["fine"]
    assert "throughput_samples_per_s=True is not a finite number" in out.err
    assert "throughput_samples_per_s='fast' is not a finite number" in out.err
    assert not_numbers({"target_reached": True, "window_s": [1.0, 2.0], "step_time_source": "host"}) == []
    assert main([str(tmp_path), "--platform", "aws_p3_2xlarge", "--price", "inf"]) == 2
    assert "amount=inf is out of range; allowed: [0, 1e12] (a finite number)" in capsys.readouterr().err
    lab = dict(load_platform("aws_p3_2xlarge"), minimum_charge_s=float("inf"))
    assert problems(lab) == ["platform 'aws_p3_2xlarge': minimum_charge_s=inf is out of range; allowed: [0, 1e9] "
                             "(a finite number)"]
    lab["minimum_charge_s"] = 60.0
    lab["price"] = [dict(lab["price"][0], amount=True)]
    assert "amount=True is not a number; allowed: [0, 1e12]" in problems(lab)[0]


def test_cost_keeps_notes_beside_the_priced_figures():
    from xbench.metrics.cost import not_numbers

    assert not_numbers({"throughput_ci95_note": "95% CI of the geometric mean", "throughput_samples_per_s": 10.0,
                        "step_time_s_per_rank": [[0.1, 0.2]], "samples_per_window": 40}) == []
    assert not_numbers({"throughput_samples_per_s": "fast"}) == ["throughput_samples_per_s='fast' is not a finite number"]
    assert not_numbers({"step_time_s_median": float("inf")}) == ["step_time_s_median=inf is not a finite number"]
