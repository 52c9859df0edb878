"""The answers a set of runs can give, in sentences with their figures and uncertainty, as the studies' posts
lead with them: fastest, cheapest per sample, fastest and cheapest to the target, scaling efficiency at N,
each compiled runtime's speed-up over eager, and where the baseline stands.

Every comparison is within one work (model and data: analysis/workload.py) and between configurations
(batch size, precision and strategy stay apart). A configuration's uncertainty is its throughput spread
(analysis/spread.py: min-max over repeated runs, else the run's 95% CI over windows, else its p10-p90
steps); a difference whose intervals overlap is said to be "within noise", and a figure without a spread
says so. Works beyond MAX_WORKS are counted, not described.
"""

from __future__ import annotations

from dataclasses import dataclass

from xbench.analysis.overhead import eager_twins
from xbench.analysis.reprice import one_machine, repriced
from xbench.analysis.rows import TP, Rows, groups
from xbench.analysis.scaling import scaling_rows
from xbench.analysis.spread import spread
from xbench.analysis.workload import CONFIGURATION, WORK, configuration_label, label_names
from xbench.metrics.numbers import compact

MAX_WORKS = 6
LABEL_KEYS = ("platform", "runtime", "precision", "cpu_capability", "parallel", "pricing_model",
              "batch_size_per_device", "global_batch_size", "devices", "threads", "runtime_options")


@dataclass
class Finding:
    question: str  # "fastest", "cheapest per sample", ...
    work: str | None  # "resnet50 on synthetic_imagenet"; None: across works
    text: str


def fmt(v: float | None) -> str:
    return compact(v, 3, whole_from=100, missing="n/a")


def _work(k: dict) -> str:
    return f"{k['model']} on {k['data']}"


def label_keys(rows) -> list[str]:
    return label_names([k for k in LABEL_KEYS if len({r.get(k) for r in rows}) > 1])


def _label(keys: dict, names: list[str]) -> str:
    return configuration_label(keys, names, "the only configuration")


@dataclass
class Config:
    label: str
    rows: Rows
    value: float
    low: float | None  # the figure's interval (None: no spread measured)
    high: float | None

    def interval(self) -> str:
        if self.low is None:
            return "no spread measured"
        return f"{fmt(self.low)}-{fmt(self.high)}"


@dataclass
class Found:
    """One configuration of a work: its keys, its ok runs, and its throughput spread (analysis/spread.py),
    computed once per findings() call and handed to every question that needs it."""
    keys: dict
    rows: Rows
    tp_low: float | None
    tp_high: float | None
    tp: float | None  # median throughput

    @classmethod
    def of(cls, keys: dict, g: Rows) -> Found:
        lo, hi, _, _ = spread(g)
        return cls(keys, g, lo, hi, g.ok().median(TP))


def _configs(found: list[Found], names: list[str], col: str, power: float | None) -> list[Config]:
    """Each configuration's median of `col` with an interval: throughput's spread carried by `power`
    (figure ~ throughput**power), or min-max over its runs when `power` is None."""
    out = []
    for f in found:
        ok = f.rows.ok(col)
        if not ok:
            continue
        v = ok.median(col)
        if power is None:
            xs = ok.nums(col)
            lo, hi = (min(xs), max(xs)) if len(xs) > 1 else (None, None)
        else:
            tlo, thi, tp = f.tp_low, f.tp_high, f.tp
            if tlo and thi and tp:
                a, b = (tlo / tp) ** power, (thi / tp) ** power
                lo, hi = v * min(a, b), v * max(a, b)
            else:
                lo = hi = None
        if all(col in (r.get("minimum_charged") or "").split(", ") for r in ok):
            lo = hi = None  # a minimum charge has no spread: the runs' speed does not move it
        out.append(Config(_label(f.keys, names), ok, v, lo, hi))
    return out


def overlap(a: Config, b: Config) -> bool | None:
    """Whether two intervals overlap (None: one has no interval)."""
    if a.low is None or b.low is None:
        return None
    return a.low <= b.high and b.low <= a.high


def _versus(best: Config, second: Config, higher: bool, what: str, better: str) -> str:
    ratio = best.value / second.value if higher else second.value / best.value
    o = overlap(best, second)
    if o:
        return f"but within noise of {second.label} ({fmt(second.value)}{what}; the intervals overlap): no winner"
    tail = "" if o is False else " (no spread measured on one side: not tested against noise)"
    return f"{ratio:.2f}x {better} the runner-up, {second.label} ({fmt(second.value)}{what}){tail}"


TIE = 0.005  # values within half a percent read the same at the 3 digits shown ("1.00x"): a tie, no winner


def _minimum_note(cs: list[Config], col: str) -> str:
    """A sentence when the platform's minimum charge set the cost of the configurations named."""
    hit = [c for c in cs if any(col in (r.get("minimum_charged") or "").split(", ") for r in c.rows)]
    if not hit:
        return ""
    low = max((v for c in hit for v in c.rows.nums("minimum_charge_s")), default=0)
    who = "each" if len(hit) == len(cs) else ", ".join(c.label for c in hit)
    return (f" The platform's {low:g} s minimum charge set the cost of {who} (the runs were shorter): "
            "the cost says nothing about the runs themselves.")


def _best(found: list[Found], names: list[str], col: str, higher: bool, power: float | None,
          question: str, unit: str, work: str, prefix: str = "", suffix: str = "", better: str = "") -> Finding | None:
    cs = sorted(_configs(found, names, col, power), key=lambda c: c.value, reverse=higher)
    if not cs:
        return None
    floor = [c for c in cs if any(col in (r.get("minimum_charged") or "").split(", ") for r in c.rows)]
    if len(cs) > 1 and len(floor) == len(cs):  # every cost is a minimum charge: a price list, not a result
        low = max((v for c in cs for v in c.rows.nums("minimum_charge_s")), default=0)
        return Finding(question, work, f"{question.capitalize()}: not compared: every cost here is its platform's "
                       f"{low:g} s minimum charge (the runs were shorter), from {prefix}{fmt(cs[0].value)}{unit} "
                       f"({cs[0].label}) to {prefix}{fmt(cs[-1].value)}{unit} ({cs[-1].label}).")
    b = cs[0]
    tied = [c for c in cs[1:] if abs(c.value - b.value) <= TIE * max(abs(b.value), abs(c.value))]
    if tied:  # no winner: the figures are the same to the digits shown
        who = ", ".join(c.label for c in [b, *tied[:-1]]) + f" and {tied[-1].label}"
        text = (f"{question.capitalize()}: no winner: {who} tie at {prefix}{fmt(b.value)}{unit}{suffix}"
                + (f"; the rest trail ({len(cs) - 1 - len(tied)} more)" if len(cs) > 1 + len(tied) else "") + ".")
        return Finding(question, work, text + _minimum_note([b, *tied], col))
    runs = len(b.rows)
    text = (f"{question.capitalize()}: {b.label} at {prefix}{fmt(b.value)}{unit}{suffix} ({b.interval()}; "
            f"{runs} run{'s' if runs != 1 else ''})")
    text += ", " + _versus(b, cs[1], higher, unit, better) + "." if len(cs) > 1 else "; nothing else to compare it with."
    return Finding(question, work, text + _minimum_note(cs[:2], col))


MAX_SCALING = 4  # scaling findings: the workloads measured at the most device counts


def _scaling(rows: Rows) -> tuple[list[Finding], int]:
    out = []
    s = scaling_rows(rows)
    found = groups(s, ["model", "data", "device_kind", "runtime", "precision", "batch_size_per_device"])
    found.sort(key=lambda x: (-len(x[1]), -max(r["devices"] for r in x[1])))
    for _, sub in found[:MAX_SCALING]:
        k = sub[0]
        parts = []
        for pk, g in groups(sub, ["parallel"]):
            top = max(g, key=lambda r: r["devices"])
            if top["devices"] <= 1:
                continue
            odd = " (above 100%: noise or a cache effect, not a result)" if top["scaling_efficiency"] > 1.05 else ""
            parts.append(f"{pk['parallel']} {top['scaling_efficiency'] * 100:.0f}% at {top['devices']} devices "
                         f"({top['speedup']:.2f}x the 1-device throughput){odd}")
        if parts:
            out.append(Finding("scaling efficiency", _work(k), f"Scaling efficiency on {k['device_kind']} "
                               f"({k['runtime']}, {k['precision']}, batch {k['batch_size_per_device']}/device): "
                               + "; ".join(parts) + ". 100% is linear."))
    return out, max(0, len(found) - MAX_SCALING)


# What compiled each runtime's rows, named in its finding: XLA through torch-xla (TPUs, XLA:CPU, XLA:CUDA up to
# torch-xla 2.8) or through torchax (JAX's XLA: the XLA side on GPUs since torch-xla 2.9 removed XLA:CUDA).
FRONT_ENDS = {"xla": "XLA (torch-xla)", "xla_compile": "XLA (torch-xla, torch.compile's openxla backend)",
              "torchax": "XLA (torchax)", "compile": "torch.compile (inductor)"}


def _runtimes(found: list[Found]) -> list[Finding]:
    """Each non-eager runtime against the eager run of the same workload and placement, per configuration
    (never pooled over batch sizes): listed when few, else the median with the best and worst named."""
    twins = eager_twins([f.rows for f in found])
    by_runtime: dict[str, list[tuple[str, float, bool | None]]] = {}
    for i, f in enumerate(found):
        rt = f.keys.get("runtime")
        twin = found[twins[i]] if i in twins else None
        if twin is None or not f.tp or not twin.tp:
            continue
        o = (None if None in (f.tp_low, f.tp_high, twin.tp_low, twin.tp_high)
             else (f.tp_low <= twin.tp_high and twin.tp_low <= f.tp_high))
        where = f"{_work(f.keys)}, batch {f.keys.get('global_batch_size')}"
        by_runtime.setdefault(str(rt), []).append((where, f.tp / twin.tp, o))
    out = []
    for rt, pairs in sorted(by_runtime.items()):
        noise = sum(1 for p in pairs if p[2])

        def one(p):
            return f"{p[1]:.2f}x ({p[0]}{', within noise' if p[2] else ''})"
        if len(pairs) <= 4:
            body = "; ".join(one(p) for p in pairs)
        else:
            ratios = sorted(p[1] for p in pairs)
            lo, hi = min(pairs, key=lambda p: p[1]), max(pairs, key=lambda p: p[1])
            body = (f"median {ratios[len(ratios) // 2]:.2f}x over {len(pairs)} configurations, from {one(lo)} "
                    f"to {one(hi)}; {noise} within noise")
        out.append(Finding(f"{rt} speed-up", None, f"{FRONT_ENDS.get(rt, rt)}, runtime {rt} vs eager (throughput "
                           f"ratio, same workload and placement): {body}."))
    return out


def findings(rows, cur: str | None = None, normalised: Rows | None = None, baseline_text: str | None = None
             ) -> tuple[list[Finding], str]:
    """(the findings, a sentence about what was left out)."""
    rows = Rows.of(rows)
    out: list[Finding] = []
    # A run that saw other processes on its cores measured the machine's load, not its configuration: it is
    # not stated as a result (the tables keep it, flagged). Every mode meters it: throughput over its timed
    # windows, train-to-target over its epochs, a batch search over each trial's window.
    contended = Rows(r for r in rows.ok(None) if r.get("contended"))
    ok = Rows(r for r in rows.ok(None) if not r.get("contended"))
    works = sorted(groups(ok, WORK), key=lambda x: -len(x[1]))

    def by_work_of(rs: Rows) -> dict[tuple, list[Found]]:
        out: dict[tuple, list[Found]] = {}
        for keys, g in groups(rs, CONFIGURATION):  # each spread once
            out.setdefault(tuple(keys[x] for x in WORK), []).append(Found.of(keys, g))
        return out

    speed_rows, _ = one_machine(ok)  # one machine priced two ways is one configuration for its speed
    by_work = by_work_of(speed_rows)
    configs = [f for fs in by_work.values() for f in fs]
    cheap_rows, same_machine = repriced(ok, cur)  # one machine priced two ways: its runs re-priced as one set
    cheap = by_work_of(cheap_rows) if cur else {}
    for k, _ in works[:MAX_WORKS]:
        w = _work(k)
        wk = tuple(k[x] for x in WORK)
        found = by_work.get(wk, [])
        names = label_keys(Rows(r for f in found for r in f.rows))
        out += [f for f in (
            _best(found, names, TP, True, 1.0, "fastest", " samples/s", w, better="the throughput of"),
            _best(cheap.get(wk, []), label_keys(Rows(r for f in cheap.get(wk, []) for r in f.rows)),
                  f"{cur}_per_million_samples", False, -1.0, "cheapest per sample", " per 1M samples",
                  w, prefix=f"{cur.upper()} ", better="cheaper than") if cur else None,
            _best(found, names, "projected_training_s", False, -1.0, "shortest projected whole training", " s", w,
                  better="shorter than"),
            _best(found, names, f"projected_training_cost_{cur}", False, -1.0, "cheapest projected whole training",
                  "", w, prefix=f"{cur.upper()} ", better="cheaper than") if cur else None,
            _best(found, names, "train_time_to_target_s", False, None, "fastest to the target", " s of training", w,
                  better="faster than"),
            _best(found, names, f"train_cost_to_target_{cur}", False, None, "cheapest to the target", "", w,
                  prefix=f"{cur.upper()} ", suffix=" of training", better="cheaper than") if cur else None,
        ) if f is not None]
        if normalised is not None:
            mine = Rows(r for r in normalised if all(r.get(x) == k[x] for x in WORK) and not r.get("is_baseline"))
            cs = sorted((r for r in mine if r.get("normalised_time")), key=lambda r: r["normalised_time"])
            if cs:
                names = label_keys(mine)
                b = cs[0]
                out.append(Finding("against the baseline", w, f"Against the baseline ({baseline_text}): "
                                   f"{_label(b, names)} takes {b['normalised_time']:.3g}x its time"
                                   + (f" and {b['normalised_cost']:.3g}x its cost" if b.get("normalised_cost") else "")
                                   + f" ({len(cs)} configurations compared; the baseline table has each)."))
    scaled, more_scaling = _scaling(ok)
    out += scaled + _runtimes([f for f in configs if f.rows.ok()])
    out += [Finding("one machine, several prices", None, n) for n in same_machine]
    if contended:
        worst = max(contended.nums("other_cpu_cores_during"), default=None)
        modes = [r.get("bench_mode") or "throughput" for r in contended]  # every mode meters it (bench/meters/contention.py)
        by_mode = ", ".join(f"{modes.count(m)} {m}" for m in sorted(set(modes)))
        out.append(Finding("contention", None, f"{len(contended)} ok runs were contended ({by_mode}: other processes "
                           "used the machine while they measured" + (f", up to {worst:.2g} cores" if worst else "")
                           + "): they measured the load, so no finding above uses them; the tables flag them."))
    bad = [r.get("status") for r in rows if r.get("status") != "ok"]
    if bad:
        counts = {s: bad.count(s) for s in sorted(set(bad), key=str)}
        out.append(Finding("runs that did not finish", None, f"{len(bad)} of {len(rows)} runs did not finish ok ("
                           + ", ".join(f"{n} {s}" for s, n in counts.items()) + "): they stay in the tables with "
                           "their reasons, outside every median."))
    noisy = sum(1 for r in ok if r.get("noisy"))
    if noisy:
        out.append(Finding("noise", None, f"{noisy} of {len(ok)} ok runs flagged themselves noisy (spread above "
                           "bench.noisy_cv): their figures are less certain than their medians look."))
    rest = len(works) - MAX_WORKS
    left = ([f"{rest} more works are in the tables (narrow the report with --filter model=... to read their "
             "findings)"] if rest > 0 else []) + ([f"{more_scaling} more scaled workloads are in the scaling table"]
                                                 if more_scaling else [])
    return out, ("; ".join(left) + ".") if left else ""
