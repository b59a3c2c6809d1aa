"""The federated methods: their one home is burtorch.optim.methods (the update rules serve the
single-process research optimizers as well); burtorch.fl.methods hands on every name it exports, so
a new method needs no line here."""
from ..optim.methods import *  # noqa: F403
from ..optim.methods import __all__  # noqa: F401
