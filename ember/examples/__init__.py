"""Runnable examples: `python -m ember.examples.mnist`."""
