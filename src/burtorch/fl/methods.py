"""The federated methods: their one home is burtorch.optim.methods (the update rules serve the
single-process research optimizers as well); burtorch.fl.methods keeps the names fl users import."""
from ..optim.methods import COMPRESSING, DCGD, DIANA, EF21, GD, MARINA, METHODS, PAGE, FedAvg, Method, make_method

__all__ = ["Method", "GD", "DCGD", "EF21", "MARINA", "PAGE", "DIANA", "FedAvg", "METHODS", "COMPRESSING", "make_method"]
