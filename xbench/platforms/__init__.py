"""Hardware facts: what is really here (detect.py), checked against what the platform config declares."""
