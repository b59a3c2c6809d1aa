from .makemore_mlp import MakemoreMLP
from .mini_gpt import Block, MiniGPT

__all__ = ["MakemoreMLP", "MiniGPT", "Block"]
