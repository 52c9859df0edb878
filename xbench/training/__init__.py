"""What one training step is, independent of how it is executed: loss per task, the step (`step.py`), the
optimizers of the recipes (`optim.py`: SGD, AdamW, LARS, LAMB) and the learning-rate schedule (`schedule.py`).

Runtimes (eager, compiled, XLA, Accelerate) wrap `step.make_train_step` instead of rewriting it, so
the step being compared is the same code everywhere. Below runtimes in the layer order.
"""
