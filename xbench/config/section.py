"""A view of one config section: a frozen dataclass whose fields are some of the section's keys, each read
by its own name (the data's shapes for a model: data/spec.InputSpec; a run's windows:
bench/windows.WindowPlan)."""

from __future__ import annotations

from dataclasses import fields


class SectionView:
    """Mixed into a dataclass: `of(section)` builds it from the section's keys of the same names."""

    @classmethod
    def of(cls, section):
        return cls(**{f.name: getattr(section, f.name) for f in fields(cls)})
