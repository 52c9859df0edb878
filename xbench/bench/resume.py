"""`resume=<run id or folder>`: continue a train-to-target run from its checkpoint.

The stored record's config is authoritative (the model, data, goal and seed must be the ones the
checkpoint was made with); only `resume`, `store`, `logger` and `fault` come from this command line.
"""

from __future__ import annotations

import json

from omegaconf import DictConfig, OmegaConf

from xbench.config import XBenchConfig
from xbench.records.store import find_run


def resume_config(dcfg: DictConfig) -> tuple[DictConfig, dict]:
    path = find_run(dcfg.resume, dcfg.store.root)
    prior = json.loads(path.read_text())
    stored = OmegaConf.merge(OmegaConf.structured(XBenchConfig), prior["config"])
    stored.resume = dcfg.resume
    stored.store = dcfg.store
    stored.store.root = str(path.parent.parent)  # the checkpoint lives in that run's folder
    stored.logger = dcfg.logger
    stored.fault = dcfg.fault  # a drill belongs to one attempt, not to the run
    return stored, prior
