"""Analysis over stored run records: the one place that compares runs. Never imports torch.

frame.py (records -> tidy frame, filters and queries), workload.py (what "the same workload" and "a
configuration" are), rows.py (the frame as row dicts, grouping, currency), spread.py (spread and
noise of repeated runs), scaling.py (scaling efficiency), baseline.py (time and cost normalised to
a baseline), overhead.py (compiled vs eager). The report, `xbench.cost` and the W&B report all use it.
"""
