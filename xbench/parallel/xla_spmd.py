"""torch-xla SPMD data parallelism: one process, one program, a 1-D `data` mesh over every XLA device.

The launcher (launch/xla.py) has already switched the process to SPMD (`xr.use_spmd()` before any XLA
tensor) with the device count the config asks for. Here the batch is annotated as split along dim 0
over the mesh; parameters stay unannotated, i.e. replicated, and XLA's SPMD partitioner inserts the
gradient all-reduce itself. The model code and the step are unchanged: a global batch of
`data.batch_size x devices` trains exactly as on one device.

All torch_xla calls go through xbench.runtimes.xla (the only module that imports it).
"""

from __future__ import annotations

from xbench.runtimes import xla as rx

# One SPMD run per process (the launcher starts a fresh one), so the mesh is this module's state.
_state: dict = {}


def _mesh():
    if "mesh" not in _state:
        _state["mesh"] = rx.data_mesh()
    return _state["mesh"]


def wrap(cfg, model, device):
    if device.type != "xla":
        raise RuntimeError(f"parallel=xla_spmd runs on XLA devices (runtime=xla / xla_compile), not {device}")
    _mesh()
    return model  # replicated parameters: nothing to wrap


def place_batch(cfg, inputs, targets):
    mesh = _mesh()
    inputs, targets = rx.shard_batch(inputs, mesh), rx.shard_batch(targets, mesh)
    if "input_sharding" not in _state:  # once: with real data this runs every step of a timed window
        _state["input_sharding"] = rx.sharding_spec(inputs)
    return inputs, targets


def rank_figures(cfg, model) -> dict:
    mesh = _mesh()
    return {"xla_spmd_mesh_shape": list(mesh.mesh_shape), "xla_spmd_axis_names": list(mesh.axis_names),
            "xla_spmd_input_sharding": _state.get("input_sharding")}
