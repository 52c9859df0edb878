"""Where a finished record goes: the local store first (always), then W&B, then the console."""
