"""What "the same workload" is: the one definition every comparison of stored runs uses.

Three nested levels, each a tuple of tidy-frame columns (xbench/analysis/frame.py writes them):

- WORK: model (+ its options) and data (+ its shape). The same samples through the same network, so
  time and cost *per sample*, or to a quality target, compare across any machine, batch size,
  precision or runtime. Baseline normalisation matches here: "CPU time and cost relative to the K80
  for the same work" changes the machine and its best settings on purpose.
- WORKLOAD: WORK + batch per device, precision, runtime (+ options) and platform: everything that
  sets how fast one device goes. Two throughputs of one workload differ only in how it is spread over
  devices (PLACEMENT), which is what scaling efficiency compares. The platform is the named machine,
  not the device type: a K80 and a V100 are both `cuda`.
- CONFIGURATION: WORKLOAD + placement (parallel strategy, devices, threads), global batch, pricing
  model and experiment. Runs that repeat one configuration are one table row (median and spread).

A comparison holds its level fixed and lets the studied axis vary: SCALING (devices and strategy;
threads follow the device count, since ranks share the cores), VERSUS_EAGER (the runtime, on the same
placement), BASELINE (everything but the work). The option and shape columns hold short `key=value`
text (None when empty), so rows stay hashable and one column says what differs.
"""

from __future__ import annotations

from xbench.metrics.numbers import whole

WORK = ("model", "model_options", "data", "data_shape")
RUNTIME = ("runtime", "runtime_options")
WORKLOAD = (*WORK, "platform", *RUNTIME, "precision", "cpu_capability", "batch_size_per_device")
PLACEMENT = ("parallel", "devices", "threads")
# In the order tables show them (and sort rows by).
CONFIGURATION = ("experiment", *WORK, "platform", *RUNTIME, "precision", "cpu_capability", "parallel",
                 "pricing_model", "batch_size_per_device", "global_batch_size", "devices", "threads")
# Detail columns: implied by the name in the usual case, so a caption leaves them out when constant.
DETAILS = ("model_options", "data_shape", "runtime_options")

# Scaling varies the device count; on a pod each count is its own platform (a slice: v2-8, v2-32, ...),
# so it holds the kind of device fixed instead of the platform.
SCALING = tuple("device_kind" if k == "platform" else k for k in WORKLOAD)
VERSUS_EAGER = (*(k for k in WORKLOAD if k not in RUNTIME), *PLACEMENT)
BASELINE = WORK

# Config fields that change what one sample costs (data) or how it is computed (runtime).
DATA_SHAPE = ("image_size", "channels", "seq_len", "vocab_size", "num_features", "num_classes")
# The shape fields that apply to each data modality (config.DataConfig): an image has no seq_len; a record
# without a modality (an older one) keeps every field it has.
MODALITY_SHAPE = {
    "image": ("image_size", "channels", "num_classes"),
    "tokens": ("seq_len", "vocab_size", "num_classes"),
    "features": ("num_features", "num_classes"),
}
# The runtime section's options each runtime reads (runtimes/compiled.py, runtimes/xla.py): the schema gives
# every runtime all of them, so an eager row would otherwise carry compile's unused `backend=inductor
# target=model`.
RUNTIME_OPTIONS = {"compile": ("backend", "mode", "target", "fullgraph", "dynamic"),
                   "xla_compile": ("backend", "fullgraph", "dynamic")}

assert set(WORK) <= set(WORKLOAD) <= set(CONFIGURATION) and set(PLACEMENT) <= set(CONFIGURATION)


def _text(d: dict) -> str | None:
    return " ".join(f"{k}={d[k]}" for k in sorted(d) if d[k] is not None) or None


def detail_columns(config: dict) -> dict:
    """The option and shape columns of one record's config (flatten puts them in its row)."""
    model, data, runtime = ((config.get(g) or {}) for g in ("model", "data", "runtime"))
    options = dict(model.get("options") or {})
    if model.get("channels_last"):
        options["channels_last"] = True
    return {
        "model_options": _text(options),
        "data_shape": _text(
            {k: data[k] for k in MODALITY_SHAPE.get(data.get("modality"), DATA_SHAPE) if k in data}
        ),
        "runtime_options": _text(
            {k: runtime[k] for k in RUNTIME_OPTIONS.get(runtime.get("name"), ()) if k in runtime}
        ),
    }


def device_kind(platform: dict, cpu_model: str | None = None) -> str | None:
    """What one device of the platform is: its accelerator ("TPU v2", "V100"), else the CPU (its model
    when the record knows it); None without a platform."""
    if not platform:
        return None
    if platform.get("accelerator"):
        return platform["accelerator"]
    return f"cpu: {cpu_model}" if cpu_model else platform.get("device") or platform.get("name")


def key(row: dict, level: tuple[str, ...]) -> tuple:
    """The values of `level`'s columns in a row: equal keys, comparable runs."""
    return tuple(row.get(k) for k in level)


def label_names(names: list[str]) -> list[str]:
    """The varying keys a configuration's label names, less the per-device batch when the device count is
    the same everywhere (the global batch then says it)."""
    if "devices" not in names and "global_batch_size" in names and "batch_size_per_device" in names:
        return [k for k in names if k != "batch_size_per_device"]
    return names


def configuration_label(keys: dict, names: list[str], empty: str, devices: str = "devices") -> str:
    """A configuration's label from the keys `label_names` chose: "gpu / eager / batch 32 / 1 thread".
    `devices` is the word after a device count (bars use "dev"); `empty` stands for no key at all."""
    parts = []
    for k in names:
        v = keys.get(k)
        if k == "cpu_capability":  # None is a setting too: the best kernels the CPU has
            parts.append(f"{v or 'best'} CPU kernels")
        elif v is None:
            continue
        elif k == "global_batch_size":
            parts.append(f"batch {whole(v)}")
        elif k == "batch_size_per_device":
            parts.append(f"{whole(v)}/device")
        elif k == "devices":
            parts.append(f"{whole(v)} {devices.removesuffix('s') if v == 1 else devices}")  # 1 device
        elif k == "threads":
            parts.append(f"{whole(v)} thread" + ("s" if v != 1 else ""))
        else:
            parts.append(str(v))
    return " / ".join(parts) or empty

