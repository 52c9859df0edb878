"""platform: hardware and price (conf/platform/*.yaml). Billing arithmetic, the billing words (units,
granularities, kinds, pricing models) and the numbers billing can take (PLATFORM_BOUNDS, PRICE_BOUNDS: the
knobs of the price fields here, `priced`) are xbench/metrics/cost.py's, which also holds records' and price
files' platforms to them; docs/cost_and_targets.md explains the model."""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import MISSING

from xbench.config.knobs import knob
from xbench.metrics.cost import PLATFORM_BOUNDS, PRICE_BOUNDS

DEVICES = ("auto", "cpu", "cuda", "xla")


def priced(default, bounds: dict, name: str):
    """A field whose knob is the billing model's bound for `name`."""
    b = bounds[name]
    return knob(default, ge=b.ge, gt=b.gt, le=b.le, lt=b.lt)


@dataclass
class PriceConfig:
    """One component of what a platform costs (accelerator, host VM, storage, a fee)."""

    name: str = "machine"
    # list price in `currency`, per `unit` of time, per `per`
    amount: float = priced(0.0, PRICE_BOUNDS, "amount")
    currency: str = "USD"
    unit: str = "hour"  # millisecond | second | minute | hour | month (a month is 730 hours)
    per: str = "machine"  # machine | chip | vcpu | gib: what one `amount` buys
    count: int = priced(1, PRICE_BOUNDS, "count")  # how many `per` units are billed (chips, vCPUs)
    kind: str = "usage"  # usage (billed while running) | setup_fee (once) | monthly_fee (each month)
    # on_demand | spot | preemptible | reserved_1y | reserved_3y | monthly; None: the platform's
    pricing_model: str | None = None
    # granularity: millisecond | second | minute | hour (rounded up) | month_amortised; None: the platform's
    billing: str | None = None
    # billed at least this long per start; None: the platform's
    minimum_charge_s: float | None = priced(None, PRICE_BOUNDS, "minimum_charge_s")
    # fraction off `amount` (e.g. 0.7 for a spot price 70% below list)
    discount: float = priced(0.0, PRICE_BOUNDS, "discount")
    source: str | None = None  # URL for this component when it differs from the platform's price_source
    as_of: str | None = None  # YYYY-MM-DD for this component when it differs from price_as_of


@dataclass
class PlatformConfig:
    """Hardware and price of one platform; conf/platform/*.yaml. Billing rules: xbench/metrics/cost.py."""

    name: str = MISSING
    device: str = knob("auto", choices=DEVICES)  # xla: TPU or XLA on CPU/GPU
    # devices the workload may use; None = all that are seen
    device_count: int | None = knob(None, ge=1, le=1000000)
    # the accelerator's model, a whole word of its device name ("H200", "TPU v3")
    accelerator: str | None = None
    # GPU: streaming multiprocessors per device (tells H100 SXM5 132 from PCIe 114)
    sm_count: int | None = knob(None, ge=1, le=100000)
    accelerator_type: str | None = None  # TPU: the type its runtime reports (v3-8, v5litepod-8)
    cpu_vcpus: int | None = knob(None, ge=1, le=1000000)  # vCPUs of the instance, for per-vCPU prices
    # per device, by dtype: fp32, tf32, bf16, fp16
    peak_tflops: dict[str, float] = knob(gt=0, le=1e9, factory=dict)
    peak_tflops_source: str | None = None  # which vendor datasheet the peak_tflops figures come from
    # per device; a GPU platform matches a GPU of this memory (platforms/sku.py)
    memory_gib: float | None = knob(None, gt=0, le=1e9)
    pricing_model: str = "on_demand"  # on_demand | spot | preemptible | reserved_1y | reserved_3y | monthly
    # default granularity of the components: millisecond | second | minute | hour | month_amortised
    billing: str = "second"
    # default minimum billed time per start (e.g. 60 on AWS/GCE per-second billing)
    minimum_charge_s: float = priced(0.0, PLATFORM_BOUNDS, "minimum_charge_s")
    price: list[PriceConfig] = field(default_factory=list)
    price_source: str | None = None  # URL of the price page
    price_as_of: str | None = None  # date the price was read, YYYY-MM-DD
    # false: not checked against price_source (the report marks it "unconfirmed")
    price_confirmed: bool = True
    provider: str | None = None  # aws | gcp | paperspace | hetzner | leadergpu | ibm | local ...
    instance: str | None = None  # the provider's instance/machine type, e.g. p3.8xlarge, v2-8
    region: str | None = None  # where the price applies
    # Monthly rent and fixed fees are spread over the hours the machine is really used:
    # share of the month a monthly-billed machine runs jobs
    utilisation: float = priced(1.0, PLATFORM_BOUNDS, "utilisation")
    # setup fees are spread over this many months of rent
    commitment_months: float = priced(1.0, PLATFORM_BOUNDS, "commitment_months")
