"""What one training step is, independent of how it is executed: loss per task, optimizer, the step.

Runtimes (eager, compiled, XLA, Accelerate) wrap `step.make_train_step` instead of rewriting it, so
the step being compared is the same code everywhere. Below runtimes in the layer order.
"""
