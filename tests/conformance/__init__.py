"""The conformance suite: every op of the tensor API against PyTorch, on every device in `DEVICES`."""
