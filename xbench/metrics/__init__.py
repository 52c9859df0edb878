"""Measured values and what is derived from them. stats.py and derived.py never import torch."""
