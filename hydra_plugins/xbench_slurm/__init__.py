"""xbench's Hydra launcher plugin (`hydra/launcher=slurm`): Hydra takes launchers only from the
`hydra_plugins` namespace package, so it lives here rather than in xbench/launch/. It imports nothing of
xbench (Hydra imports every plugin module at start-up: this one stays as light as Hydra's own)."""
