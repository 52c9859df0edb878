"""Count the rank code's reads of the root config (issue 29 item 2):
`python scripts/rank_config_reads.py [-v] [--root DIR]` (DIR: another checkout's tree, e.g. an older commit's
`git archive <rev> xbench | tar -x -C DIR`; the field names come from this checkout's config.py).

A read is an attribute `X.<root field>` (a field of XBenchConfig: model, data, bench, ...) where X is a name
`cfg` or an attribute `.cfg` (`plan.cfg.bench`, `self.cfg.data`), plus every `plan.cfg` / `work.plan.cfg`
itself; a function takes the root config when a parameter is annotated XBenchConfig or is named `cfg` and
the function reads a root field from it. Rank code: xbench/bench, xbench/launch, xbench/training (the rank
wing and the launchers that start it). Compat's `rules(cls, cfg, facts, ...)` methods are the record
side's and are not counted; the functions in RECORD_SIDE live in these folders but run in the record
writer's process with the root config (before any rank starts) and are counted apart. `-v` lists every read
and function.
"""

from __future__ import annotations

import ast
import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RANK_CODE = ("xbench/bench", "xbench/launch", "xbench/training")
RECORD_SIDE = {  # (file, function): called by the runner, __main__ or a mode with the root config
    ("xbench/bench/profile.py", "environment"),  # XLA_FLAGS set by modes/throughput.py before the ranks start
    ("xbench/launch/__init__.py", "launcher"), ("xbench/launch/__init__.py", "writes_record"),  # runner.py
    ("xbench/launch/isolation.py", "isolated"), ("xbench/launch/isolation.py", "point_facts"),  # __main__, runner
}


def root_fields() -> set[str]:
    sys.path.insert(0, str(ROOT))
    from xbench.config import XBenchConfig

    return {f.name for f in dataclasses.fields(XBenchConfig)}


def _is_cfg(node) -> bool:
    return (isinstance(node, ast.Name) and node.id == "cfg") or (isinstance(node, ast.Attribute) and node.attr == "cfg")


def scan(path: Path, fields: set[str]):
    tree = ast.parse(path.read_text())
    reads, takers = [], []

    def visit(node, func: str | None, skip: bool):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            func, skip = node.name, skip or node.name == "rules"
            if not skip:
                a = node.args
                for arg in a.posonlyargs + a.args + a.kwonlyargs:
                    ann = ast.unparse(arg.annotation) if arg.annotation else ""
                    used = arg.arg == "cfg" and any(
                        isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "cfg"
                        and n.attr in fields for n in ast.walk(node))
                    if "XBenchConfig" in ann or used:
                        takers.append((node.lineno, node.name))
        if not skip and isinstance(node, ast.Attribute):
            root_field = node.attr in fields and _is_cfg(node.value)
            plan_cfg = node.attr == "cfg" and isinstance(node.value, (ast.Name, ast.Attribute)) and \
                ast.unparse(node.value).split(".")[-1] == "plan"
            if root_field or plan_cfg:
                reads.append((node.lineno, func, ast.unparse(node)))
        for child in ast.iter_child_nodes(node):
            visit(child, func, skip)

    visit(tree, None, False)
    return reads, takers


def main(verbose: bool, root: Path) -> None:
    fields = root_fields()
    totals = {"rank": [0, 0], "record side": [0, 0]}
    for folder in RANK_CODE:
        for path in sorted((root / folder).rglob("*.py")):
            rel = str(path.relative_to(root))
            reads, takers = scan(path, fields)
            for side in totals:
                mine = [r for r in reads if ((rel, r[1]) in RECORD_SIDE) == (side == "record side")]
                fns = [t for t in takers if ((rel, t[1]) in RECORD_SIDE) == (side == "record side")]
                totals[side][0] += len(mine)
                totals[side][1] += len(fns)
                if mine or fns:
                    print(f"{rel} ({side}): {len(mine)} read(s), {len(fns)} function(s) taking the root config")
                if verbose:
                    for line, func, text in mine:
                        print(f"    {rel}:{line} {func}: {text}")
                    for line, name in fns:
                        print(f"    {rel}:{line} def {name}(cfg)")
    for side, (reads, fns) in totals.items():
        print(f"{side}: {reads} reads of the root config, {fns} functions taking it")


if __name__ == "__main__":
    args = sys.argv[1:]
    main("-v" in args, Path(args[args.index("--root") + 1]).resolve() if "--root" in args else ROOT)
