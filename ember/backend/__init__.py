"""Backends: the protocol (`base`), the NumPy reference backend (`numpy`), and decorators over them."""
