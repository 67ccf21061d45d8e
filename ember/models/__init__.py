"""Complete models with their pretrained-weight import, and the tokenizers they need.

Example:
    >>> from ember.models import WordPieceTokenizer
    >>> WordPieceTokenizer.from_dir(model_dir).encode("hello world")
    [101, 7592, 2088, 102]
"""

from .wordpiece import Encoding, WordPieceTokenizer

__all__ = ["Encoding", "WordPieceTokenizer"]
