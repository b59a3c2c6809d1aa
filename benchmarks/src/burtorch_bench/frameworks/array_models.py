"""W4's MLP and W5's GPT written once for the array frameworks whose API is numpy's (JAX, MLX).

Each loss takes `xp`, the framework's array module, plus the two functions whose names differ
between them (softmax and log-softmax), so the peers compute the very same expression.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from ..specs import GPT_DMODEL, GPT_HEAD_SIZE, GPT_HEADS, GPT_LAYERS, LN_EPS


def ops(xp: Any, softmax: Any, log_softmax: Any) -> SimpleNamespace:
    """The array operations a framework lends these models."""
    return SimpleNamespace(xp=xp, softmax=softmax, log_softmax=log_softmax)


def cross_entropy(o: SimpleNamespace, logits, y):
    logp = o.log_softmax(logits)
    return -o.xp.mean(o.xp.take_along_axis(logp, y[:, None], axis=-1))


def layer_norm(o: SimpleNamespace, x, w, b):
    mean = o.xp.mean(x, axis=-1, keepdims=True)
    var = o.xp.mean((x - mean) ** 2, axis=-1, keepdims=True)
    return (x - mean) / o.xp.sqrt(var + LN_EPS) * w + b


def mlp_loss(o: SimpleNamespace, p, x, y):
    emb = p["C"][x].reshape(x.shape[0], -1)
    h = o.xp.tanh(emb @ p["W1"] + p["b1"])
    return cross_entropy(o, h @ p["W2"] + p["b2"], y)


def gpt_loss(o: SimpleNamespace, p, x, y):
    xp = o.xp
    B, T = x.shape
    d, H, hs = GPT_DMODEL, GPT_HEADS, GPT_HEAD_SIZE
    mask = xp.tril(xp.ones((T, T))) > 0
    h = p["wte"][x] + p["wpe"][:T]

    def heads(t):
        return t.reshape(B, T, H, hs).transpose(0, 2, 1, 3)

    for i in range(GPT_LAYERS):
        a = layer_norm(o, h, p[f"{i}.ln1.w"], p[f"{i}.ln1.b"])
        q, k, v = heads(a @ p[f"{i}.q"]), heads(a @ p[f"{i}.k"]), heads(a @ p[f"{i}.v"])
        att = (q @ k.transpose(0, 1, 3, 2)) * hs ** -0.5
        att = o.softmax(xp.where(mask, att, -float("inf")))
        y_att = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, d)
        h = h + y_att @ p[f"{i}.proj.w"] + p[f"{i}.proj.b"]
        a = layer_norm(o, h, p[f"{i}.ln2.w"], p[f"{i}.ln2.b"])
        h = h + xp.maximum(a @ p[f"{i}.ff1.w"] + p[f"{i}.ff1.b"], 0.0) @ p[f"{i}.ff2.w"] + p[f"{i}.ff2.b"]
    if "lnf.w" in p:  # Karpathy's final norm; the paper's model has none
        h = layer_norm(o, h, p["lnf.w"], p["lnf.b"])
    logits = h @ p["head.w"] + p["head.b"]
    return cross_entropy(o, logits.reshape(B * T, -1), y.reshape(B * T))
