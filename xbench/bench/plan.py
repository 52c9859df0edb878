"""The plan: what the record side resolves once, after compat, and hands down to every rank instead of the
config and the host's facts: the device type, the runtime, the strategy and its launcher, the precision,
and the shapes from the data.

`resolve(cfg, facts)` runs in the process that launches the ranks (the record writer, or a process that
joins them: a rank > 0 under the torchrun command, a node > 0), after compat.check passed; the plan is
frozen and travels inside the rank work (pickled into launched processes). A rank reads what was resolved
here and never resolves it again from HostFacts; the knobs it applies (bench.*, optim, data, model) it
reads from `plan.cfg`, the config compat checked.
"""

from __future__ import annotations

from dataclasses import dataclass

from xbench import parallel
from xbench.config import XBenchConfig
from xbench.data.spec import InputSpec
from xbench.platforms.detect import HostFacts, device_type


@dataclass(frozen=True)
class Plan:
    cfg: XBenchConfig  # the config compat checked (the knobs a rank applies)
    device_type: str  # cpu | cuda | xla on this host (platforms.detect.device_type)
    runtime: str  # runtime.name
    strategy: str  # parallel.name
    launcher: str  # inline | torchrun | xla: the strategy's registry line (launch/)
    precision: str  # precision.name (each rank builds its Precision on its device: a scaler is its own)
    spec: InputSpec  # the shapes from the data (data/spec.py)


def resolve(cfg: XBenchConfig, facts: HostFacts) -> Plan:
    """The plan of `cfg` on this host (after compat.check: the names are known and fit)."""
    return Plan(cfg, device_type(cfg.platform.device, cfg.runtime.name, facts), cfg.runtime.name,
                cfg.parallel.name, parallel.get(cfg.parallel.name).launcher, cfg.precision.name,
                InputSpec.from_data(cfg.data))
