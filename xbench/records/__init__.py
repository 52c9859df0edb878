"""Run records and the store of run folders. Never imports torch: reports run without it."""
