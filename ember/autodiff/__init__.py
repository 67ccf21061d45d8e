"""Reverse-mode autodiff: the decorator backend, its graph, grad mode and Gradients."""
