"""Layers and models. Parameters are contiguous blocks of leaf nodes; forward passes emit range
records (one per layer) that mix freely with scalar ops."""
from .activations import activation
from .attention import CausalSelfAttention, MultiHeadAttention
from .embedding import Embedding
from .layer_norm import LayerNorm
from .linear import Linear
from .mlp import MLP
from .models import Block, MakemoreMLP, MiniGPT
from .module import Module
from .neuron import Layer, Neuron

__all__ = ["Module", "Neuron", "Layer", "Linear", "MLP", "Embedding", "LayerNorm", "MultiHeadAttention",
           "CausalSelfAttention", "Block", "MakemoreMLP", "MiniGPT", "activation"]
