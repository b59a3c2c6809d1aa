"""The gradient compressors: their one home is burtorch.optim.compressors (the research optimizers
use them as well); burtorch.fl.compressors hands on every name it exports, so a new compressor needs
no line here."""
from ..optim.compressors import *  # noqa: F403
from ..optim.compressors import __all__  # noqa: F401
