"""`python -m xbench.report`: comparison tables and plots from stored run records.

frame.py (records -> tidy table, filters), tables.py (TABLES registry), plots.py (PLOTS registry),
render.py (HTML / markdown / CSV), wandb_report.py (W&B Report, lazy). Nothing here imports torch.
"""
