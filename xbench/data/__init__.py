"""Batches for the loop: synthetic (device-resident, no host I/O) or real loaders (xbench.data.loaders)."""
