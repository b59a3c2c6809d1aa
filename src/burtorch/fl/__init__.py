"""Federated optimization research: n clients with their own data and method state, a server that
aggregates, the EF21 / MARINA / PAGE / DIANA family with native compressors, run serially, on a
local process pool or on Ray (see docs/federated.md)."""
from .compressors import (COMPRESSORS, Compressor, Identity, Message, Natural, RandK, RandomDithering, RandSeqK,
                          Scaled, TopK, make_compressor)
from .federation import Federation
from .methods import DCGD, DIANA, EF21, GD, MARINA, METHODS, PAGE, FedAvg, Method, make_method
from .problem import ModelProblem, Problem, SampleProblem, Smoothness

__all__ = ["Federation", "Problem", "SampleProblem", "ModelProblem", "Smoothness",
           "Method", "GD", "DCGD", "EF21", "MARINA", "PAGE", "DIANA", "FedAvg", "METHODS", "make_method",
           "Compressor", "Message", "Identity", "RandK", "TopK", "RandSeqK", "Natural", "RandomDithering", "Scaled",
           "COMPRESSORS", "make_compressor"]
