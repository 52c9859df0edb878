"""Measured values and what is derived from them. stats.py and derived.py are torch-free (reports use
them)."""
