"""Neural-network building blocks: `Module`, `Param`, layers, losses and initializers."""

from .param import Param, ParamGroup
from .module import Module, LoadReport
from . import init
from .linear import Linear, Identity
