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
from xbench.analysis.rows import TP, Rows, groups, varies
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
    return label_names([k for k in LABEL_KEYS if varies(rows, k)])


def _names(found: list[Found]) -> list[str]:
    """The keys that tell a work's configurations apart (their labels name these)."""
    return label_keys(Rows(r for f in found for r in f.rows))


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
        if all(_charged(r, col) for r in ok):
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
        return (f"but within noise of {second.label} ({fmt(second.value)}{what}; the intervals overlap): "
                "no winner")
    tail = "" if o is False else " (no spread measured on one side: not tested against noise)"
    return f"{ratio:.2f}x {better} the runner-up, {second.label} ({fmt(second.value)}{what}){tail}"


TIE = 0.005  # values within half a percent read the same at the 3 digits shown ("1.00x"): a tie, no winner


def _minimum_note(cs: list[Config], col: str) -> str:
    """A sentence when the platform's minimum charge set the cost of the configurations named."""
    hit = [c for c in cs if any(_charged(r, col) for r in c.rows)]
    if not hit:
        return ""
    low = max((v for c in hit for v in c.rows.nums("minimum_charge_s")), default=0)
    who = "each" if len(hit) == len(cs) else ", ".join(c.label for c in hit)
    return (f" The platform's {low:g} s minimum charge set the cost of {who} (the runs were shorter): "
            "the cost says nothing about the runs themselves.")


def _charged(r: dict, col: str) -> bool:
    """Whether the platform's minimum charge, not the run, set this row's `col`."""
    return col in (r.get("minimum_charged") or "").split(", ")


@dataclass(frozen=True)
class Question:
    """A question asked of each work: the figure compared (`{cur}` in it: asked only where money is shown, in
    that currency), which way is better, and how throughput's spread carries to it (`power`; None: min-max
    over the runs)."""
    question: str
    col: str
    higher: bool
    power: float | None
    unit: str
    better: str  # "the throughput of": "1.50x the throughput of the runner-up"
    suffix: str = ""
    repriced: bool = False  # asked of the re-priced runs (analysis/reprice.py), not of each machine's price

    @property
    def priced(self) -> bool:
        return "{cur}" in self.col


QUESTIONS = (
    Question("fastest", TP, True, 1.0, " samples/s", "the throughput of"),
    Question("cheapest per sample", "{cur}_per_million_samples", False, -1.0, " per 1M samples",
             "cheaper than", repriced=True),
    Question("shortest projected whole training", "projected_training_s", False, -1.0, " s", "shorter than"),
    Question("cheapest projected whole training", "projected_training_cost_{cur}", False, -1.0, "",
             "cheaper than"),
    Question("fastest to the target", "train_time_to_target_s", False, None, " s of training", "faster than"),
    Question("cheapest to the target", "train_cost_to_target_{cur}", False, None, "", "cheaper than",
             suffix=" of training"),
)


def _price_list(q: Question, cs: list[Config], prefix: str) -> str:
    """Every cost is a minimum charge: a price list, not a result."""
    low = max((v for c in cs for v in c.rows.nums("minimum_charge_s")), default=0)
    return (f"{q.question.capitalize()}: not compared: every cost here is its platform's {low:g} s minimum "
            f"charge (the runs were shorter), from {prefix}{fmt(cs[0].value)}{q.unit} ({cs[0].label}) to "
            f"{prefix}{fmt(cs[-1].value)}{q.unit} ({cs[-1].label}).")


def _tie(q: Question, cs: list[Config], tied: list[Config], prefix: str, col: str) -> str:
    """No winner: the figures are the same to the digits shown."""
    b = cs[0]
    who = ", ".join(c.label for c in [b, *tied[:-1]]) + f" and {tied[-1].label}"
    rest = len(cs) - 1 - len(tied)
    return (f"{q.question.capitalize()}: no winner: {who} tie at {prefix}{fmt(b.value)}{q.unit}{q.suffix}"
            + (f"; the rest trail ({rest} more)" if rest > 0 else "") + "." + _minimum_note([b, *tied], col))


def _winner(q: Question, cs: list[Config], prefix: str, col: str) -> str:
    """The best, with its interval and runs, against the runner-up (or alone)."""
    b = cs[0]
    runs = len(b.rows)
    text = (f"{q.question.capitalize()}: {b.label} at {prefix}{fmt(b.value)}{q.unit}{q.suffix} "
            f"({b.interval()}; {runs} run{'s' if runs != 1 else ''})")
    if len(cs) > 1:
        text += ", " + _versus(b, cs[1], q.higher, q.unit, q.better) + "."
    else:
        text += "; nothing else to compare it with."
    return text + _minimum_note(cs[:2], col)


def _best(found: list[Found], names: list[str], q: Question, cur: str | None, work: str) -> Finding | None:
    """The question's answer among a work's configurations: not compared (all minimum charges), a tie, or a
    winner."""
    col = q.col.format(cur=cur)
    prefix = f"{cur.upper()} " if q.priced else ""
    cs = sorted(_configs(found, names, col, q.power), key=lambda c: c.value, reverse=q.higher)
    if not cs:
        return None
    if len(cs) > 1 and all(any(_charged(r, col) for r in c.rows) for c in cs):
        return Finding(q.question, work, _price_list(q, cs, prefix))
    b = cs[0]
    tied = [c for c in cs[1:] if abs(c.value - b.value) <= TIE * max(abs(b.value), abs(c.value))]
    text = _tie(q, cs, tied, prefix, col) if tied else _winner(q, cs, prefix, col)
    return Finding(q.question, work, text)


MAX_SCALING = 4  # scaling findings: the workloads measured at the most device counts


def _at_most_devices(parallel: str, g: Rows) -> str | None:
    """A strategy's efficiency at its most devices (None: it ran on one)."""
    top = max(g, key=lambda r: r["devices"])
    if top["devices"] <= 1:
        return None
    odd = " (above 100%: noise or a cache effect, not a result)" if top["scaling_efficiency"] > 1.05 else ""
    return (f"{parallel} {top['scaling_efficiency'] * 100:.0f}% at {top['devices']} devices "
            f"({top['speedup']:.2f}x the 1-device throughput){odd}")


def _scaling(rows: Rows) -> tuple[list[Finding], int]:
    """(a finding for each of the MAX_SCALING workloads measured at the most device counts, how many more)."""
    out = []
    found = groups(scaling_rows(rows), ["model", "data", "device_kind", "runtime", "precision",
                                        "batch_size_per_device"])
    found.sort(key=lambda x: (-len(x[1]), -max(r["devices"] for r in x[1])))
    for _, sub in found[:MAX_SCALING]:
        k = sub[0]
        parts = [p for pk, g in groups(sub, ["parallel"]) if (p := _at_most_devices(pk["parallel"], g))]
        if parts:
            out.append(Finding("scaling efficiency", _work(k), f"Scaling efficiency on {k['device_kind']} "
                               f"({k['runtime']}, {k['precision']}, batch {k['batch_size_per_device']}"
                               "/device): " + "; ".join(parts) + ". 100% is linear."))
    return out, max(0, len(found) - MAX_SCALING)


# What compiled each runtime's rows, named in its finding: XLA through torch-xla (TPUs, XLA:CPU, XLA:CUDA up
# to torch-xla 2.8) or through torchax (JAX's XLA: the XLA side on GPUs since torch-xla 2.9 removed XLA:CUDA).
FRONT_ENDS = {"xla": "XLA (torch-xla)", "xla_compile": "XLA (torch-xla, torch.compile's openxla backend)",
              "torchax": "XLA (torchax)", "compile": "torch.compile (inductor)"}


@dataclass
class SpeedUp:
    """One configuration's throughput over its eager twin's."""
    where: str
    ratio: float
    noise: bool | None  # the two throughput intervals overlap (None: a side has no spread)

    @classmethod
    def of(cls, f: Found, twin: Found) -> SpeedUp:
        o = (None if None in (f.tp_low, f.tp_high, twin.tp_low, twin.tp_high)
             else (f.tp_low <= twin.tp_high and twin.tp_low <= f.tp_high))
        return cls(f"{_work(f.keys)}, batch {f.keys.get('global_batch_size')}", f.tp / twin.tp, o)

    def text(self) -> str:
        return f"{self.ratio:.2f}x ({self.where}{', within noise' if self.noise else ''})"


def _speedups(found: list[Found]) -> dict[str, list[SpeedUp]]:
    """Each non-eager runtime's speed-ups, a configuration each (one with a twin and both throughputs)."""
    twins = eager_twins([f.rows for f in found])
    by_runtime: dict[str, list[SpeedUp]] = {}
    for f, twin in ((f, found[twins[i]]) for i, f in enumerate(found) if i in twins):
        if f.tp and twin.tp:
            by_runtime.setdefault(str(f.keys.get("runtime")), []).append(SpeedUp.of(f, twin))
    return by_runtime


def _speedup_body(pairs: list[SpeedUp]) -> str:
    """A few speed-ups listed; more: their median, with the lowest and the highest named."""
    if len(pairs) <= 4:
        return "; ".join(p.text() for p in pairs)
    ratios = sorted(p.ratio for p in pairs)
    lo, hi = min(pairs, key=lambda p: p.ratio), max(pairs, key=lambda p: p.ratio)
    noise = sum(1 for p in pairs if p.noise)
    return (f"median {ratios[len(ratios) // 2]:.2f}x over {len(pairs)} configurations, from {lo.text()} "
            f"to {hi.text()}; {noise} within noise")


def _runtimes(found: list[Found]) -> list[Finding]:
    """Each non-eager runtime against the eager run of the same workload and placement, per configuration
    (never pooled over batch sizes): listed when few, else the median with the best and worst named."""
    return [Finding(f"{rt} speed-up", None, f"{FRONT_ENDS.get(rt, rt)}, runtime {rt} vs eager (throughput "
                    f"ratio, same workload and placement): {_speedup_body(pairs)}.")
            for rt, pairs in sorted(_speedups(found).items())]


def _by_work(rs: Rows) -> dict[tuple, list[Found]]:
    """Each work's configurations, each spread computed once."""
    out: dict[tuple, list[Found]] = {}
    for keys, g in groups(rs, CONFIGURATION):
        out.setdefault(tuple(keys[x] for x in WORK), []).append(Found.of(keys, g))
    return out


def _against_baseline(k: dict, normalised: Rows, baseline_text: str | None) -> Finding | None:
    """The work's configuration that takes the least of the baseline's time."""
    mine = Rows(r for r in normalised if all(r.get(x) == k[x] for x in WORK) and not r.get("is_baseline"))
    cs = sorted((r for r in mine if r.get("normalised_time")), key=lambda r: r["normalised_time"])
    if not cs:
        return None
    b = cs[0]
    cost = f" and {b['normalised_cost']:.3g}x its cost" if b.get("normalised_cost") else ""
    return Finding("against the baseline", _work(k), f"Against the baseline ({baseline_text}): "
                   f"{_label(b, label_keys(mine))} takes {b['normalised_time']:.3g}x its time{cost} "
                   f"({len(cs)} configurations compared; the baseline table has each).")


def _work_findings(k: dict, by_work: dict, cheap: dict, cur: str | None, normalised: Rows | None,
                   baseline_text: str | None) -> list[Finding]:
    """Each question of QUESTIONS answered for one work (those in money only with a currency), then where the
    baseline stands (with a baseline)."""
    w, wk = _work(k), tuple(k[x] for x in WORK)
    out = []
    for q in (q for q in QUESTIONS if cur or not q.priced):
        found = (cheap if q.repriced else by_work).get(wk, [])
        out.append(_best(found, _names(found), q, cur, w))
    if normalised is not None:
        out.append(_against_baseline(k, normalised, baseline_text))
    return [f for f in out if f is not None]


def _contention(contended: Rows) -> list[Finding]:
    if not contended:
        return []
    worst = max(contended.nums("other_cpu_cores_during"), default=None)
    # every mode meters it (bench/meters/contention.py)
    modes = [r.get("bench_mode") or "throughput" for r in contended]
    by_mode = ", ".join(f"{modes.count(m)} {m}" for m in sorted(set(modes)))
    cores = f", up to {worst:.2g} cores" if worst else ""
    return [Finding("contention", None, f"{len(contended)} ok runs were contended ({by_mode}: other "
                    f"processes used the machine while they measured{cores}): they measured the load, so no "
                    "finding above uses them; the tables flag them.")]


def _unfinished(rows: Rows) -> list[Finding]:
    bad = [r.get("status") for r in rows if r.get("status") != "ok"]
    if not bad:
        return []
    counts = ", ".join(f"{bad.count(s)} {s}" for s in sorted(set(bad), key=str))
    return [Finding("runs that did not finish", None, f"{len(bad)} of {len(rows)} runs did not finish ok "
                    f"({counts}): they stay in the tables with their reasons, outside every median.")]


def _noisy(ok: Rows) -> list[Finding]:
    noisy = sum(1 for r in ok if r.get("noisy"))
    if not noisy:
        return []
    return [Finding("noise", None, f"{noisy} of {len(ok)} ok runs flagged themselves noisy (spread above "
                    "bench.noisy_cv): their figures are less certain than their medians look.")]


def _left_out(works: int, more_scaling: int) -> str:
    """A sentence about what the findings do not describe (empty: nothing)."""
    left = ([f"{works - MAX_WORKS} more works are in the tables (narrow the report with --filter model=... "
             "to read their findings)"] if works > MAX_WORKS else [])
    left += [f"{more_scaling} more scaled workloads are in the scaling table"] if more_scaling else []
    return ("; ".join(left) + ".") if left else ""


def _contended_apart(rows: Rows) -> tuple[Rows, Rows]:
    """(the contended ok runs, the other ok runs). A run that saw other processes on its cores measured the
    machine's load, not its configuration: it is not stated as a result (the tables keep it, flagged). Every
    mode meters it: throughput over its timed windows, train-to-target over its epochs, a batch search over
    each trial's window."""
    ok = rows.ok(None)
    return Rows(r for r in ok if r.get("contended")), Rows(r for r in ok if not r.get("contended"))


def findings(rows, cur: str | None = None, normalised: Rows | None = None, baseline_text: str | None = None
             ) -> tuple[list[Finding], str]:
    """(the findings, a sentence about what was left out)."""
    rows = Rows.of(rows)
    contended, ok = _contended_apart(rows)
    works = sorted(groups(ok, WORK), key=lambda x: -len(x[1]))
    speed_rows, _ = one_machine(ok)  # one machine priced two ways is one configuration for its speed
    by_work = _by_work(speed_rows)
    cheap_rows, same_machine = repriced(ok, cur)  # one machine priced two ways: its runs re-priced as one set
    cheap = _by_work(cheap_rows) if cur else {}
    out = [f for k, _ in works[:MAX_WORKS]
           for f in _work_findings(k, by_work, cheap, cur, normalised, baseline_text)]
    scaled, more_scaling = _scaling(ok)
    out += scaled + _runtimes([f for fs in by_work.values() for f in fs if f.rows.ok()])
    out += [Finding("one machine, several prices", None, n) for n in same_machine]
    out += _contention(contended) + _unfinished(rows) + _noisy(ok)
    return out, _left_out(len(works), more_scaling)
