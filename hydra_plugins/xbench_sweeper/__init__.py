"""xbench's Hydra sweeper plugin (`hydra/sweeper=xbench`, the default in conf/config.yaml): Hydra takes
sweepers only from the `hydra_plugins` namespace package, so it lives here. Importing it imports nothing of
xbench (Hydra imports every plugin module at start-up); the sweep itself uses xbench.hydra_guard."""
