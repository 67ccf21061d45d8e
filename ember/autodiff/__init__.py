"""Reverse-mode autodiff: the decorator backend (`backend`), its graph (`graph`), grad mode and `Gradients`."""

CHECKPOINTING = (None, "balanced")
"""The strategies of `Device.autodiff(checkpointing=)`: keep what the rules read, or recompute cheap ops."""
