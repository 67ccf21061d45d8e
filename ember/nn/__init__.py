"""Neural-network building blocks: `Module`, `Param`, containers, layers, losses and initializers."""

from .param import Param, ParamGroup
from .module import Module, LoadReport, HookHandle
from .containers import Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict
from . import init
from .linear import Linear, Identity
from .loss import (
    Loss, MSELoss, L1Loss, HuberLoss, SmoothL1Loss, PoissonNLLLoss, GaussianNLLLoss, CrossEntropyLoss, NLLLoss,
    BCELoss, BCEWithLogitsLoss, KLDivLoss, CosineEmbeddingLoss, MarginRankingLoss, HingeEmbeddingLoss,
    TripletMarginLoss, CTCLoss,
)
from .distance import CosineSimilarity, PairwiseDistance
from .norm import (
    BatchNorm1d, BatchNorm2d, BatchNorm3d, InstanceNorm1d, InstanceNorm2d, LayerNorm, GroupNorm, RMSNorm,
)
from .linear import Bilinear
from .embedding import Embedding
from .dropout import Dropout
from .shuffle import PixelShuffle, PixelUnshuffle
from .activation import (
    ReLU, LeakyReLU, ELU, SELU, GELU, SiLU, Mish, Sigmoid, Tanh, Softplus, Softsign, HardSigmoid, HardSwish,
    Softmax, LogSoftmax, GLU, PReLU, SwiGLU,
)
from .conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from .pool import (
    MaxPool1d, MaxPool2d, AvgPool1d, AvgPool2d, AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveMaxPool1d,
    AdaptiveMaxPool2d,
)
from .upsample import Upsample
from .rnn import RNN, LSTM, GRU
from .attention import MultiHeadAttention, KVCache
from .positional import PositionalEncoding, RotaryEncoding
from .transformer import (
    PositionWiseFeedForward, TransformerEncoderLayer, TransformerDecoderLayer, TransformerEncoder, TransformerDecoder,
    DecoderCache,
)
from .wrap import FunctionModule
