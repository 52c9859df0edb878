"""What is allowed, said after Hydra refuses a command line (it names the problem but, for a misspelled
key or a wrong type, not the alternatives). Reads the dataclass schema in xbench.config; no torch.

Hydra lists the options of a config group (`model=foo`) but does not say which one was meant:
`group_hints` adds the closest ones (`model=resnet5` -> did you mean model=resnet50?).
Hydra accepts a key the schema does not have when it is written `+key=v` (the form its own error message
suggests): `added_key_problems` refuses those before Hydra runs, with the same hint, and
`unknown_keys` finds them in a stored config (a record written before this check existed).
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from pathlib import Path

from omegaconf import OmegaConf

from xbench.config import XBenchConfig, config_dir
from xbench.extras import installed, message

_SCALARS = {int: "a whole number", float: "a number", bool: "true or false", str: "a string"}


def _fields(cls) -> dict[str, dataclasses.Field]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _scalar(tp):
    """The scalar type of `int`, `int | None`, `float`..., else None (dicts, lists, dataclasses)."""
    if tp in _SCALARS:
        return tp
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return args[0] if len(args) == 1 and args[0] in _SCALARS else None


def _parses(value: str, tp) -> bool:
    if value.lower() in ("null", "none", "~") or tp is str:
        return True
    if tp is bool:
        return value.lower() in ("true", "false", "yes", "no", "on", "off", "1", "0")
    try:
        tp(value)
        return True
    except ValueError:
        return False


# Keys that moved, old prefix -> new: the old spelling is refused naming the new one. FSDP's and xla_fsdp's
# options were an untyped `parallel.options` mapping; they are typed fields of parallel (config/parallel.py).
MOVED = {"parallel.options.": "parallel."}


def moved_key(override: str) -> str | None:
    """`parallel.options.shard_size=2` -> one line naming `parallel.shard_size=2`; None for any other key."""
    key, eq, value = override.lstrip("+~").partition("=")
    for old, new in MOVED.items():
        if key.startswith(old) and key != old:
            now = new + key[len(old):]
            return f"{key} is now {now}: write {now}{eq}{value}"
    return None


def moved_key_problems(argv: list[str]) -> list[str]:
    """Every override that uses a key's old spelling (MOVED), each with its new one; asked before Hydra
    runs."""
    return [m for m in (moved_key(a) for a in argv) if m]


def _schema_override(override: str, added: bool) -> str | None:
    """The override the schema judges (its `+`s stripped when `added`), or None when it is Hydra's: no
    `=`, a deletion or append, hydra's own keys, and an added config group (+experiment=...) or package."""
    if added and override.startswith("+"):
        override = override.lstrip("+")
        key = override.partition("=")[0]
        if "@" in key or "/" in key or (Path(config_dir()) / key).is_dir():
            return None
    if "=" not in override or override[0] in "+~-" or override.startswith("hydra"):
        return None
    return override


def _value_hint(key: str, value: str, scalar, path: list[str], rest: list[str]) -> str | None:
    """A leaf field's hint: a sub-key a value cannot have, or a value its type cannot parse. A free-form
    field (scalar None) takes anything; a multirun sweep (a,b / range(...)) is Hydra's to parse."""
    if scalar is None:
        return None
    if rest:
        return f"{'.'.join(path)!r} is a value, it has no sub-key {rest[0]!r}"
    if "," in value or "(" in value or _parses(value, scalar):
        return None
    return f"{key} takes {_SCALARS[scalar]}, got {value!r}"


def hint_for(override: str, added: bool = False) -> str | None:
    """One override `a.b=value` checked against the schema: a hint, or None when it looks fine.
    `added`: check the `+a.b=value` / `++a.b=value` forms too (Hydra would accept an unknown key).
    The key is walked section by section: an unknown part is named, a section at the end is a group
    choice (Hydra lists the options), a leaf is judged by `_value_hint`."""
    if moved := moved_key(override):
        return moved
    if (override := _schema_override(override, added)) is None:
        return None
    key, _, value = override.partition("=")
    parts = key.split(".")
    cls, path = XBenchConfig, []
    for i, part in enumerate(parts):
        fields = _fields(cls)
        if part not in fields:
            where = ".".join(path) or "the top level"
            near = difflib.get_close_matches(part, fields, n=1)
            guess = f"did you mean {'.'.join(path + [near[0]])!r}? " if near else ""
            return f"{key!r} is not a config key; {guess}keys of {where}: {', '.join(sorted(fields))}"
        tp, path = fields[part], path + [part]
        if not dataclasses.is_dataclass(tp):
            return _value_hint(key, value, _scalar(tp), path, parts[i + 1:])
        if i == len(parts) - 1:
            return None
        cls = tp
    return None


# Groups of presets: a plain run selects none, so a preset is added (`+experiment=NAME`); a preset may
# select a workload in its own defaults, which `workload=NAME` (no `+`) then replaces.
PRESET_GROUPS = ("experiment", "workload")


def _selects_workload(experiment: str) -> bool:
    path = Path(config_dir()) / "experiment" / f"{experiment}.yaml"
    try:
        defaults = OmegaConf.to_container(OmegaConf.load(path)).get("defaults") or []
    except (OSError, ValueError):
        return False
    return any(
        isinstance(d, dict) and any(str(k).lstrip("/").startswith("workload") for k in d) for d in defaults
    )


def preset_hints(argv: list[str]) -> list[str]:
    """The right form of a preset override, for this command line: `+experiment=`, and `+workload=` on a
    plain run but `workload=` (no +) after a preset that already selects one."""
    given = dict(a.lstrip("+").partition("=")[::2] for a in argv if "=" in a)
    selected = _selects_workload(given["experiment"]) if "experiment" in given else False
    out = []
    for a in argv:
        key, _, value = a.partition("=")
        if key == "experiment":
            out.append(f"presets are added, not replaced: +experiment={value}")
        elif key == "workload" and not selected:
            out.append(
                f"this run selects no workload to replace: +workload={value} adds one (workload={value} "
                "without + replaces the workload a preset selects, e.g. +experiment=resnet50_tpu)"
            )
        elif key == "+workload" and selected:
            out.append(
                f"+experiment={given['experiment']} already selects a workload: workload={value} (without +) "
                "replaces it"
            )
    return out


def plugin_hints(argv: list[str]) -> list[str]:
    """Hydra plugins an extra brings: `hydra/launcher=slurm` without hydra-submitit-launcher."""
    if any(a.startswith("hydra/launcher=") and "slurm" in a for a in argv) \
            and not installed("hydra_plugins.hydra_submitit_launcher"):
        return [message("hydra/launcher=slurm", "hydra_plugins.hydra_submitit_launcher")]
    return []


def group_options(group: str, search: list[Path] | None = None) -> list[str]:
    """The options of a config group: the YAML files under <conf>/<group>/ (and each folder of `search`)."""
    out = set()
    for root in [Path(config_dir()), *(search or [])]:
        folder = root / group
        if folder.is_dir():
            out.update(str(p.relative_to(folder).with_suffix("")) for p in folder.rglob("*.yaml"))
    return sorted(out)


def _group_override(a: str) -> tuple[str, str, str] | None:
    """(its `+`/`~` prefix, group, value) of a group override; None for a dotted key or Hydra's own."""
    plus = a[:len(a) - len(a.lstrip("+~"))]
    key, eq, value = a.lstrip("+~").partition("=")
    if not eq or "." in key or key.startswith("hydra") or not (Path(config_dir()) / key).is_dir():
        return None
    return plus, key, value


def _unknown_choice(choice: str, options: list[str]) -> bool:
    """A group choice that is none of its options and no zoo name (torchvision/..., timm/..., hf/...)."""
    zoo = "/" in choice and choice.split("/")[0] in ("torchvision", "timm", "hf")
    return bool(choice) and choice not in options and not zoo


def group_hints(argv: list[str]) -> list[str]:
    """`model=resnet5`, `+experiment=digits_to_targe`: the closest options of that group, when the one named
    does not exist (Hydra lists them all but names none). A sweep's choices are checked one by one."""
    out = []
    for plus, key, value in filter(None, map(_group_override, argv)):
        options = group_options(key)
        for choice in (c.strip().strip("'\"") for c in value.split(",")):
            if not _unknown_choice(choice, options):
                continue
            near = difflib.get_close_matches(choice, options, n=3, cutoff=0.6)
            if near:
                out.append(f"{key}={choice} is not an option of {key}/: did you mean "
                           + " or ".join(f"{plus}{key}={n}" for n in near) + "?")
    return out


def compose_hints(argv: list[str]) -> list[str]:
    schema = [h for h in (hint_for(a) for a in argv if a.partition("=")[0] not in PRESET_GROUPS) if h]
    return schema + group_hints(argv) + preset_hints(argv) + plugin_hints(argv)


# What `resume=` keeps from the command line (runner.resume_config): the rest comes from the stored run.
RESUME_KEEPS = ("resume", "store", "logger", "fault", "hydra")


def resume_ignored(overrides: list[str]) -> list[str]:
    """`resume=X` with overrides it ignores (the stored run's config is authoritative): said, never dropped
    without a word (a warning, not a refusal: `resume=ID goal.max_epochs=1` resumes as stored)."""
    if not any(o.lstrip("+~").partition("=")[0] == "resume" for o in overrides):
        return []
    ignored = [
        o
        for o in overrides
        if o.lstrip("+~").partition("=")[0].split(".")[0].split("/")[0] not in RESUME_KEEPS
    ]
    if not ignored:
        return []
    return [
        f"resume= continues a stored run with its own config; these overrides are ignored: "
        f"{' '.join(ignored)} (with resume= only {', '.join(k + '.*' for k in RESUME_KEEPS[1:4])} apply; "
        "start a new run to change them)"
    ]


def refusals(dcfg, overrides: list[str]) -> list[str]:
    """Why a composed config must not start (nothing written): a key added with `+` that the schema lacks,
    a store root, run name or `resume=` that names no folder (config.name_problems). The CLI and the
    Python API both ask this one function (and both say resume_ignored's warning); numbers out of their
    range are compat's (config.range_problems: a `failed` record, before any device work)."""
    from xbench.config import name_problems

    if bad := unresolved(dcfg):  # every check below reads resolved values
        return bad
    return added_key_problems(overrides) + name_problems(dcfg)


def unresolved(dcfg) -> list[str]:
    """`data.batch_size=${nosuch}`: an interpolation that names no key (or does not parse), one line with the
    key, instead of OmegaConf's traceback from the first check that reads it."""
    from omegaconf.errors import OmegaConfBaseException

    try:
        OmegaConf.to_container(dcfg, resolve=True)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or "?"
        what = (getattr(e, "msg", None) or str(e)).splitlines()[0]
        return [
            f"{key}: {what} (an interpolation ${{...}} names a key of the config, e.g. ${{data.batch_size}}; "
            "write a literal $ as \\$)"
        ]
    return []


def added_key_problems(argv: list[str]) -> list[str]:
    """`+bench.step=5`: a key the schema does not have, added with `+` (or `++`); refused like
    `bench.step=5` is, with the same hint. Free-form mappings (model.options) take any key."""
    return [h for h in (hint_for(a, added=True) for a in argv if a.startswith("+")) if h]


def unknown_keys(d: dict, cls=XBenchConfig, path: tuple = ()) -> list[tuple[str, ...]]:
    """Paths in a plain config mapping that the schema does not have (free-form mappings excepted)."""
    fields, out = _fields(cls), []
    for k, v in d.items():
        if k not in fields:
            out.append((*path, k))
        elif dataclasses.is_dataclass(fields[k]) and isinstance(v, dict):
            out += unknown_keys(v, fields[k], (*path, k))
    return out
