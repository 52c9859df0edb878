"""The benchmark itself: worker.py builds one rank's workload, loop.py measures it."""
