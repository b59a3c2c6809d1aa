"""The gradient-estimator methods (the update rules of the research optimizers and of the federated
runs) and their names, as make_method() and `burtorch fl --method` accept them."""
from __future__ import annotations

from ..compressors import Compressor
from .base import WIRES, Method, wire_bits
from .diana import DIANA
from .ef21 import EF21
from .ef21bc import EF21BC
from .fedavg import FedAvg
from .gd import DCGD, GD
from .marina import MARINA, PAGE

# The names make_method() and the command line accept.
# Those of them that take a compressor.
COMPRESSING = ("dcgd", "ef21", "ef21-sgd", "ef21-pp", "ef21-bc", "marina", "vr-marina", "diana")
METHODS = ("gd", "dcgd", "ef21", "ef21-sgd", "ef21-pp", "ef21-bc", "marina", "vr-marina", "page", "diana", "fedavg")


def make_method(name: str, lr: float | None = None, compressor: Compressor | None = None, batch: int | None = None,
                p: float | None = None, local_steps: int = 5, server_lr: float = 1.0, wire: str = "fp32",
                downlink: Compressor | None = None, local_optimizer: str = "sgd", schedule: str = "constant",
                period: int | None = None, decay: float = 0.5) -> Method:
    """A method by name, with the options that apply to it (the others must be left at None).
    ``wire`` ("fp32" or "fp64") is the width its messages' values travel at; a compressor must
    have been built for the same width (its ``float_bits``)."""
    bits = wire_bits(wire)
    for c in (compressor, downlink):
        if c is not None and c.float_bits != bits:
            raise ValueError(f"the compressor counts {c.float_bits}-bit values, the wire is {wire}; "
                             f"build it with float_bits={bits}")
    if name == "ef21-bc":
        method: Method = EF21BC(lr, compressor, downlink)
    elif name == "fedavg":
        method = FedAvg(lr, local_steps=local_steps, batch=batch, server_lr=server_lr,
                        local_optimizer=local_optimizer, schedule=schedule, period=period, decay=decay)
    elif (local_optimizer, schedule) != ("sgd", "constant"):
        raise ValueError(f"{name} takes no local optimizer or schedule (they are fedavg's)")
    elif downlink is not None:
        raise ValueError(f"{name} sends the point uncompressed; a downlink compressor is for ef21-bc")
    else:
        method = _make(name, lr, compressor, batch, p)
    method.float_bits = bits
    return method


def _make(name: str, lr: float | None, compressor: Compressor | None, batch: int | None, p: float | None) -> Method:
    if name == "gd":
        return GD(lr)
    if name == "dcgd":
        return DCGD(lr, compressor, batch=batch)
    if name in ("ef21", "ef21-pp"):
        return EF21(lr, compressor)
    if name == "ef21-sgd":
        if batch is None:
            raise ValueError("ef21-sgd needs a minibatch size (--batch)")
        return EF21(lr, compressor, batch=batch)
    if name == "marina":
        return MARINA(lr, compressor, p=p)
    if name == "vr-marina":
        if batch is None:
            raise ValueError("vr-marina needs a minibatch size (--batch)")
        return MARINA(lr, compressor, p=p, batch=batch)
    if name == "page":
        return PAGE(lr, batch=batch, p=p)
    if name == "diana":
        return DIANA(lr, compressor)
    raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHODS)}")


__all__ = ["WIRES", "Method", "GD", "DCGD", "EF21", "EF21BC", "MARINA", "PAGE", "DIANA", "FedAvg", "METHODS",
           "COMPRESSING", "make_method"]
