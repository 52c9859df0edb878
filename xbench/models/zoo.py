"""The open model zoo: models other libraries define, by name, with no xbench edit and no download.

    model=torchvision/efficientnet_b0            any torchvision classification model (torchvision.models)
    model=timm/convnext_atto                     any timm model (timm.list_models()), when timm is installed
    model=hf/bert  model.options.num_hidden_layers=2   a Hugging Face architecture built from its config
    model=hf/BertForSequenceClassification       ... with the head named by its class

Every model starts from random weights (`weights=None`, `pretrained=False`, `Config(**options)`):
nothing is downloaded, and `HF_HUB_OFFLINE=1` is set before transformers is imported. The input
shapes come from the data config (image size and channels, vocabulary, sequence length, classes),
`model.options` go to the family's constructor (torchvision/timm keywords, or the HF config's
attributes), and FLOPs per sample are measured on the meta device like every model's
(xbench/bench/flops.py). An unknown name fails in compat, before any device work, with close matches.

Hugging Face heads and the task (the loss) they imply: `hf/<model_type>` takes the first head the
model type has among masked LM (mlm), causal LM (lm), sequence classification (classify, tokens) and
image classification (classify, images); `hf/<ArchitectureClass>` names the head itself.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib
import os

import torch
from torch import nn

from xbench import env_vars, extras
from xbench.data.spec import InputSpec
from xbench.data.synthetic import make_batch
from xbench.models import ModelEntry


def _family(name: str) -> tuple[str, str]:
    family, _, arch = name.partition("/")
    if family not in FAMILIES:
        near = difflib.get_close_matches(family, FAMILIES, n=1)
        raise KeyError(
            f"model {name!r}: unknown zoo family {family!r}; "
            + (f"did you mean {near[0]}/{arch}? " if near else "")
            + f"families: {', '.join(f'{f}/<name>' for f in FAMILIES)}"
        )
    return family, arch


def resolve(name: str) -> ModelEntry:
    """The entry of `<family>/<name>`; KeyError with one line (close matches, or the extra to install)."""
    family, arch = _family(name)
    if any(c in arch for c in "*?["):  # models/patterns.py expands these on the command line, into a sweep
        raise KeyError(f"model {name!r} is a pattern, not a model: sweep it from the command line "
                       f"(xbench -m 'model={name}'), or name one model")
    return _resolve(family, arch)


def known_names(family: str, name: str | None = None) -> list[str]:
    """Every name the family knows (what `<family>/<name>` may be); KeyError for an unknown family or a
    family whose library is not installed."""
    _family(f"{family}/" if name is None else name)
    _needs(name or family, FAMILY_PACKAGES[family])
    return KNOWN[family]()


def _torchvision_names() -> list[str]:
    import torchvision

    return torchvision.models.list_models(module=torchvision.models)  # classification models only


def _timm_names() -> list[str]:
    import timm

    return timm.list_models()


def _hf_names() -> list[str]:
    classes, default = _hf_heads()
    return list(dict.fromkeys([*default, *classes]))  # model types, then architecture classes


@functools.cache
def _resolve(family: str, arch: str) -> ModelEntry:
    return FAMILIES[family](f"{family}/{arch}", arch)


def _unknown(name: str, arch: str, known, what: str) -> KeyError:
    near = difflib.get_close_matches(arch, known, n=5, cutoff=0.6)
    return KeyError(f"model {name!r}: {arch!r} is not one of the {len(known)} {what}; "
                    + (f"close matches: {', '.join(near)}" if near else "no close match"))


def _needs(name: str, module: str) -> None:
    if not extras.installed(module):
        raise KeyError(extras.message(f"model {name!r}", module))


def _family_module(name: str, arch: str, module: str, names, what: str):
    """The family's package, imported once it is installed and knows `arch` (else a KeyError that says which
    extra to install, or names the close matches among `names()`, the `what` it lists)."""
    _needs(name, module)
    package = importlib.import_module(module)
    known = names()
    if arch not in known:
        raise _unknown(name, arch, known, what)
    return package


def abstract_run(fn):
    """`fn(device)` on the meta device (no memory, no compute); for a model whose forward reads tensor
    values on the host (transformers' mask checks call `.all()`, which meta tensors cannot answer), again
    under FakeTensorMode on the CPU, where those checks are skipped as tracing. Same FLOPs either way."""
    try:
        with torch.device("meta"):
            return fn(torch.device("meta"))
    except (RuntimeError, NotImplementedError) as e:
        if "meta" not in str(e):
            raise
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        return fn(torch.device("cpu"))


def abstract_batch(spec: InputSpec, batch: int, task: str, device):
    """A batch of the right shapes on the device abstract_run gives (masking reads values: on a fake
    CPU the MLM targets are drawn as LM targets, the same shape)."""
    fake = device.type != "meta"
    return make_batch(spec, batch, "lm" if fake and task == "mlm" else task, device, None)


def _probe(name: str, build, task: str, channels: int | None = None):
    """compat's check of one zoo model for one data config: build it on the meta device (no memory, no
    compute) and run one batch through it, so a wrong option or shape is a reason before device work."""

    def probe(spec: InputSpec, options: dict) -> list[str]:
        if channels is not None and spec.modality == "image" and spec.channels != channels:
            return [
                f"model {name!r} takes {channels}-channel images; data has {spec.channels} (data.channels)"
            ]
        try:
            abstract_run(lambda device: build(spec, **options)(abstract_batch(spec, 2, task, device)[0]))
        except Exception as e:  # the constructor's or the forward's own words are the reason
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            return [
                f"model {name!r} cannot be built for this data ({spec.modality}, "
                f"options {options or 'none'}): {type(e).__name__}: {first[:300]}"
            ]
        return []

    return probe


# ---------- torchvision ----------

def _torchvision(name: str, arch: str) -> ModelEntry:
    torchvision = _family_module(name, arch, "torchvision", _torchvision_names,
                                 "torchvision classification models")

    def build(spec: InputSpec, **options):
        kwargs: dict = {"weights": None, "num_classes": spec.num_classes}
        if arch in ("googlenet", "inception_v3"):  # one logits tensor in training, not (logits, aux)
            kwargs.update(aux_logits=False, init_weights=True)
        if arch.startswith("vit_"):  # ViT's position embeddings are sized for the data's images
            kwargs["image_size"] = spec.image_size
        return torchvision.models.get_model(arch, **{**kwargs, **options})

    return ModelEntry(name, build, "classify", ("image",), ("torchvision",),
                      _probe(name, build, "classify", 3))


# ---------- timm ----------

def _timm(name: str, arch: str) -> ModelEntry:
    timm = _family_module(name, arch, "timm", _timm_names, "timm models")

    def build(spec: InputSpec, **options):
        kwargs = {"pretrained": False, "num_classes": spec.num_classes, "in_chans": spec.channels}
        # transformers (ViT, Swin, ...) size their embeddings for the data's images; CNNs take no img_size
        try:
            return timm.create_model(arch, **{**kwargs, "img_size": spec.image_size, **options})
        except TypeError as e:
            if "img_size" not in str(e):
                raise
        return timm.create_model(arch, **{**kwargs, **options})

    return ModelEntry(name, build, "classify", ("image",), ("timm",), _probe(name, build, "classify"))


# ---------- Hugging Face transformers ----------

# (auto mapping of transformers.models.auto.modeling_auto, task, modality), in the order a model type's
# default head is chosen.
HF_HEADS = (("MODEL_FOR_MASKED_LM_MAPPING_NAMES", "mlm", "tokens"),
            ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "lm", "tokens"),
            ("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES", "classify", "tokens"),
            ("MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES", "classify", "image"))
# Config attributes the data config sets (a model sized for other data would index out of range).
HF_FROM_DATA = {"vocab_size": "data.vocab_size", "num_labels": "data.num_classes",
                "image_size": "data.image_size", "num_channels": "data.channels"}
HF_POSITIONS = ("max_position_embeddings", "n_positions")


@contextlib.contextmanager
def _quiet_transformers():
    """Import transformers offline, and without torch_xla: transformers (through accelerate) imports
    torch_xla whenever it is installed (~10 s, and it picks a PJRT device); an XLA run has it already. The
    environment is as it was afterwards: compat's probe asks this, and a check writes no variable (what
    transformers' imports set as they load, torch._dynamo's TORCHINDUCTOR_CACHE_DIR, goes too)."""
    with env_vars.restored():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # random init from a config: nothing to download
        extras.keep_torch_xla_out()
        yield


@functools.cache
def _hf_heads() -> tuple[dict, dict]:
    """({architecture class: (model_type, task, modality)}, {model_type: its default class}): names only,
    no modeling module is imported."""
    with _quiet_transformers():
        from transformers.models.auto import modeling_auto
    classes: dict[str, tuple[str, str, str]] = {}
    default: dict[str, str] = {}
    for mapping, task, modality in HF_HEADS:
        for model_type, cls in getattr(modeling_auto, mapping).items():
            cls = cls[0] if isinstance(cls, (tuple, list)) else cls
            classes.setdefault(cls, (model_type, task, modality))
            default.setdefault(model_type, cls)
    return classes, default


def _hf(name: str, arch: str) -> ModelEntry:
    _needs(name, "transformers")
    classes, default = _hf_heads()
    cls_name = arch if arch in classes else default.get(arch)
    if cls_name is None:
        raise _unknown(name, arch, [*default, *classes], "Hugging Face model types and architectures "
                                                         "with an LM or classification head")
    _, task, modality = classes[cls_name]

    def build(spec: InputSpec, **options):
        with _quiet_transformers():  # the modeling module is imported on first access
            import transformers

            model_cls = getattr(transformers, cls_name)
            config = _hf_config(model_cls.config_class(), options, spec, task)
            mask = task == "classify" and spec.modality == "tokens" and config.pad_token_id is None
            if mask:  # classification finds each sequence's last token by the pad id
                config.pad_token_id = 0
            return HFLogits(
                model_cls(config), "pixel_values" if spec.modality == "image" else "input_ids", mask
            )

    return ModelEntry(name, build, task, (modality,), ("transformers",), _probe(name, build, task))


def _with_near(keys: list[str], known) -> str:
    """`a (did you mean b?), c`: each key with the closest of `known`, where one is close."""
    near = {k: difflib.get_close_matches(k, known, n=1) for k in keys}
    return ", ".join(f"{k} (did you mean {near[k][0]}?)" if near[k] else k for k in keys)


def _option_problem(config, options: dict) -> Exception | None:
    """Why `model.options` cannot go on this config: a key it lacks (with the closest it has), or a key
    the data config owns (HF_FROM_DATA); None when they fit."""
    if unknown := [k for k in options if not hasattr(config, k)]:
        return TypeError(f"{type(config).__name__} has no attribute {_with_near(unknown, config.to_dict())}")
    if owned := [k for k in options if k in HF_FROM_DATA]:
        return ValueError(f"{', '.join(owned)} come(s) from the data config: set "
                          f"{', '.join(HF_FROM_DATA[k] for k in owned)} instead")
    return None


def _data_fields(config, spec: InputSpec, task: str) -> dict:
    """The fields the data sets on this config: its vocabulary or image shape, the classes of a
    classifier, and positions enough for the sequence length; only those the config has."""
    if spec.modality == "tokens":
        data = {"vocab_size": spec.vocab_size}
        data.update({k: max(getattr(config, k), spec.seq_len) for k in HF_POSITIONS
                     if isinstance(getattr(config, k, None), int)})
    else:
        data = {"image_size": spec.image_size, "num_channels": spec.channels}
    if task == "classify":
        data["num_labels"] = spec.num_classes
    return {k: v for k, v in data.items() if hasattr(config, k)}


def _hf_config(config, options: dict, spec: InputSpec, task: str):
    """The architecture's default config, with `model.options` and the data's shapes (training: no
    key/value cache)."""
    if problem := _option_problem(config, options):
        raise problem
    for k, v in options.items():
        setattr(config, k, v)
    for k, v in _data_fields(config, spec, task).items():
        setattr(config, k, v)
    if hasattr(config, "use_cache"):
        config.use_cache = False
    return config


class HFLogits(nn.Module):
    """A transformers model as xbench's models are: one batch of inputs in, logits out (the loss is
    xbench's, per task, as for every model)."""

    def __init__(self, model, input_name: str, mask: bool = False):
        super().__init__()
        self.model, self.input_name, self.mask = model, input_name, mask

    def forward(self, x):
        # A model xbench gave a pad id gets an all-ones mask: without one, HF reads the ids on the host
        # every step to warn about padding (a device sync in a timed step).
        extra = {"attention_mask": torch.ones_like(x)} if self.mask else {}
        return self.model(**{self.input_name: x}, **extra).logits


FAMILIES = {"torchvision": _torchvision, "timm": _timm, "hf": _hf}
FAMILY_PACKAGES = {"torchvision": "torchvision", "timm": "timm", "hf": "transformers"}
KNOWN = {"torchvision": _torchvision_names, "timm": _timm_names, "hf": _hf_names}
# Where each family's names come from (what a pattern is matched against).
FAMILY_LISTS = {
    "torchvision": "torchvision.models.list_models(module=torchvision.models)",
    "timm": "timm.list_models()",
    "hf": "transformers' model types and LM/classification head classes",
}
