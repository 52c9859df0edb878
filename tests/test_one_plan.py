"""One plan per run: the runner resolves it once after compat, and every mode (find_max_batch's trials
included) builds its rank work from that plan, never resolving it again."""

from __future__ import annotations

import pytest

from xbench import plan as plan_module
from xbench.modes import batch_search


@pytest.mark.slow
def test_a_batch_search_resolves_its_plan_once(tmp_path, monkeypatch):
    import xbench
    from tests.conftest import FAST

    calls = []
    real = plan_module.resolve

    def counted(cfg, facts):
        calls.append(cfg.bench.mode)
        return real(cfg, facts)

    monkeypatch.setattr(plan_module, "resolve", counted)
    monkeypatch.setattr(batch_search, "resolve", counted, raising=False)  # where a mode bound its own copy
    rec = xbench.run([*FAST, f"store.root={tmp_path}", "bench.mode=find_max_batch", "model=mlp",
                      "model.options.hidden=8", "data=digits", "data.batch_size=4", "bench.max_batch_search_s=0.001"])
    assert rec.status == "ok", rec.reason
    assert calls == ["find_max_batch"]
