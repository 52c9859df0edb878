"""`python -m xbench.report`: comparison tables and plots from stored run records.

Presentation only: the figures come from xbench.analysis (tidy frame, scaling, baseline, overhead).
rows.py (Context, Table, labels and captions shared by tables and plots), tables.py (TABLES
registry), plots.py (PLOTS registry), render.py (HTML / markdown / CSV), wandb_report.py (W&B
Report, lazy), fake.py (FAKE records for tests and the load benchmark). Nothing here imports torch.
"""
