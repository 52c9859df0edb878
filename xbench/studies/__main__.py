"""`python -m xbench.studies [ID ...] [--published] [--print small|report] [--write]`: the studies' commands
(no torch).

Without arguments: every study's small, full-scale and report commands. `--published`: the published figures
as rows. `--print`: the small (or its report) command alone, as scripts/study_walkthrough.sh runs it.
`--write` (maintainers): rewrite the command blocks of conf/experiment/<preset>.yaml and docs/studies.md
from xbench/studies/studies.yaml (tests/test_studies.py checks they match).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from xbench import studies
from xbench.tools import prog

REPO = Path(__file__).resolve().parents[2]


def _print(study: dict) -> None:
    print("\n".join(line[2:] if line.startswith("# ") else line[1:] for line in studies.header_lines(study)))
    print()


def write_header(path: Path, study: dict) -> bool:
    """Replace the comment block after `# @package _global_` with the study's header; True if changed."""
    lines = path.read_text().splitlines()
    body = [i for i, line in enumerate(lines) if i > 0 and not line.startswith("#")]
    new = [lines[0], *studies.header_lines(study), *lines[body[0]:]] if body else lines
    text = "\n".join(new) + "\n"
    if text == path.read_text():
        return False
    path.write_text(text)
    return True


def write_docs(path: Path) -> bool:
    """Fill each `<!-- study:ID -->` ... `<!-- /study:ID -->` block of docs/studies.md."""
    text = path.read_text()
    for s in studies.all_studies():
        pattern = re.compile(rf"(<!-- study:{s['id']} -->\n).*?(<!-- /study:{s['id']} -->)", re.S)
        if not pattern.search(text):
            raise SystemExit(f"{path}: no <!-- study:{s['id']} --> block")
        text = pattern.sub(lambda m, s=s: m.group(1) + studies.docs_section(s) + m.group(2), text)
    if text == path.read_text():
        return False
    path.write_text(text)
    return True


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog("xbench.studies"),
                                description="The studies' commands (a small run, the full-scale runs, their "
                                            "report) and their published figures, from "
                                            "xbench/studies/studies.yaml (no torch).")
    p.add_argument("ids", nargs="*", help="study ids (default: all)")
    p.add_argument("--published", action="store_true", help="the published figures, one row a line")
    p.add_argument("--write", action="store_true", help="rewrite the preset headers and docs/studies.md")
    p.add_argument("--check-report", metavar="DIR",
                   help="exit 1 unless the report in DIR draws every figure kind the study's small command "
                        "promises")
    p.add_argument("--full", action="store_true",
                   help="with --check-report: DIR is a full report; exit 1 unless it holds the article's "
                        "headline comparisons that report command promises (report.headlines: x times one "
                        "V100, cost against the 8-V100 VM, ...)")
    p.add_argument("--print", dest="which", choices=("small", "report"),
                   help="only the small commands (one a line), or the small report command (scripts)")
    return p


def _write(args, chosen: list[dict]) -> int:
    """--write: every study's preset header and docs/studies.md, from studies.yaml."""
    for s in studies.all_studies():
        path = REPO / "conf" / "experiment" / f"{s['preset']}.yaml"
        if write_header(path, s):
            print(f"wrote {path}")
    if write_docs(REPO / "docs" / "studies.md"):
        print(f"wrote {REPO / 'docs' / 'studies.md'}")
    return 0


def _not_a_report(args, chosen: list[dict]) -> str | None:
    """Why --check-report's folder cannot be the report asked for (None: it can)."""
    if not Path(args.check_report).is_dir():
        return f"--check-report {args.check_report}: no such folder (give the report's --out folder)"
    if not args.full:
        return None
    outs = {Path(h["out"]).name for s in chosen for h in s["report"].get("headlines") or []}
    if Path(args.check_report).name not in outs:
        return (f"--check-report {args.check_report} --full: not the --out folder of a full report with "
                f"headlines ({', '.join(sorted(outs)) or 'none'})")
    return None


def _check_report(args, chosen: list[dict]) -> int:
    """--check-report: 1 unless the report draws every figure (--full: holds every headline) promised."""
    if why := _not_a_report(args, chosen):
        print(f"xbench.studies: {why}", file=sys.stderr)
        return 1
    check = studies.missing_headlines if args.full else studies.missing_figures
    missing = [f"{s['id']}: {f}" for s in chosen for f in check(s, args.check_report)]
    for m in missing:
        print(f"xbench.studies: the report in {args.check_report} lacks {m}", file=sys.stderr)
    return 1 if missing else 0


def _commands(args, chosen: list[dict]) -> int:
    """--print small|report: the small commands, or the small report command."""
    for s in chosen:
        print("\n".join(studies.small_commands(s)) if args.which == "small" else s["report"]["small"])
    return 0


def _published(args, chosen: list[dict]) -> int:
    """--published: each published figure, one a line."""
    for r in (r for s in chosen for r in studies.published_rows(s["id"])):
        print(f"{r['study']}/{r['figure']} [{r['kind']}]: {r['value']} {r['unit']} ({r['conditions']}; "
              f"{r['source']})")
    return 0


def _headers(args, chosen: list[dict]) -> int:
    """Each study's small, full-scale and report commands."""
    for s in chosen:
        _print(s)
    return 0


# What the command does: the first of these its options ask for, else every study's commands.
ACTIONS = (("write", _write), ("check_report", _check_report), ("which", _commands),
           ("published", _published))


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    chosen = [studies.get(i) for i in args.ids] if args.ids else studies.all_studies()
    action = next((act for option, act in ACTIONS if getattr(args, option)), _headers)
    return action(args, chosen)


if __name__ == "__main__":
    sys.exit(main())
