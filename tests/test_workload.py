"""The option and shape columns a report row carries (analysis/workload.detail_columns)."""

from xbench.analysis.workload import detail_columns
from xbench.config import RuntimeConfig


def _runtime(name: str, **kw) -> dict:
    return {**vars(RuntimeConfig(name=name)), **kw}  # every runtime's section has all the schema's fields


def test_a_runtime_row_names_only_the_options_its_runtime_reads():
    """Eager, XLA and Accelerate read none of the compile options the schema gives every runtime section; an
    eager row used to read 'backend=inductor fullgraph=False target=model' (a compile that never happened)."""
    for name in ("eager", "xla", "accelerate"):
        assert detail_columns({"runtime": _runtime(name)})["runtime_options"] is None, name
    assert (detail_columns({"runtime": _runtime("compile", mode="max-autotune")})["runtime_options"]
            == "backend=inductor fullgraph=False mode=max-autotune target=model")
    assert (detail_columns({"runtime": _runtime("xla_compile", backend="openxla")})["runtime_options"]
            == "backend=openxla fullgraph=False")
