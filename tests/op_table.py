"""One row per op: how to call it, its reference in plain Python math, and where to sample it.

A new op = one row here; test_ops.py checks value, gradient (central differences, FP64) and
float32 agreement for every row.
"""
import math

import burtorch as bt


def pos(rng):
    return rng.uniform(0.2, 3.0)


def any_(rng):
    return rng.uniform(-3.0, 3.0)


def away0(rng):
    return rng.choice([-1, 1]) * rng.uniform(0.3, 3.0)


def _sig(x):
    return 1.0 / (1.0 + math.exp(-x))


# name: (arity, burtorch function taking Values, reference on floats, sampler per argument)
UNARY = {
    "neg": (lambda x: -x, lambda x: -x, any_),
    "relu": (bt.relu, lambda x: max(x, 0.0), away0),
    "tanh": (bt.tanh, math.tanh, any_),
    "exp": (bt.exp, math.exp, any_),
    "log": (bt.log, math.log, pos),
    "neg_log": (bt.neg_log, lambda x: -math.log(x), pos),
    "sigmoid": (bt.sigmoid, _sig, any_),
    "inv": (bt.inv, lambda x: 1.0 / x, away0),
    "sqr": (bt.sqr, lambda x: x * x, any_),
    "pow3": (bt.pow3, lambda x: x ** 3, any_),
    "sqrt": (bt.sqrt, math.sqrt, pos),
    "inv_sqrt": (bt.inv_sqrt, lambda x: 1.0 / math.sqrt(x), pos),
    "abs": (bt.abs, abs, away0),
    "sin": (bt.sin, math.sin, any_),
    "cos": (bt.cos, math.cos, any_),
    "softplus": (bt.softplus, lambda x: math.log1p(math.exp(x)), any_),
    "leaky_relu": (lambda x: bt.leaky_relu(x, 0.1), lambda x: x if x > 0 else 0.1 * x, away0),
    # ops with a Python constant (immediates)
    "add_const": (lambda x: x + 1.5, lambda x: x + 1.5, any_),
    "radd_const": (lambda x: 1.5 + x, lambda x: 1.5 + x, any_),
    "sub_const": (lambda x: x - 0.7, lambda x: x - 0.7, any_),
    "rsub_const": (lambda x: 0.7 - x, lambda x: 0.7 - x, any_),
    "mul_const": (lambda x: x * -2.5, lambda x: x * -2.5, any_),
    "rmul_const": (lambda x: 3 * x, lambda x: 3 * x, any_),
    "mul_by_constant": (lambda x: bt.mul_by_constant(x, 0.25), lambda x: x * 0.25, any_),
    "div_const": (lambda x: x / 3.0, lambda x: x / 3.0, any_),
    "rdiv_const": (lambda x: 3.0 / x, lambda x: 3.0 / x, away0),
    "pow_const2": (lambda x: x ** 2, lambda x: x ** 2, any_),
    "pow_const3": (lambda x: x ** 3, lambda x: x ** 3, any_),
    "pow_const_frac": (lambda x: x ** 1.7, lambda x: x ** 1.7, pos),
    "pow_const_neg": (lambda x: x ** -2, lambda x: x ** -2, away0),
    "pow_const_half": (lambda x: x ** 0.5, lambda x: x ** 0.5, pos),
    "rpow_const": (lambda x: 2.0 ** x, lambda x: 2.0 ** x, any_),
}

BINARY = {
    "add": (lambda a, b: a + b, lambda a, b: a + b, (any_, any_)),
    "sub": (lambda a, b: a - b, lambda a, b: a - b, (any_, any_)),
    "mul": (lambda a, b: a * b, lambda a, b: a * b, (any_, any_)),
    "div": (lambda a, b: a / b, lambda a, b: a / b, (any_, away0)),
    "pow": (lambda a, b: a ** b, lambda a, b: a ** b, (pos, any_)),
    "f_add": (bt.add, lambda a, b: a + b, (any_, any_)),
    "f_sub": (bt.sub, lambda a, b: a - b, (any_, any_)),
    "f_mul": (bt.mul, lambda a, b: a * b, (any_, any_)),
    "f_div": (bt.div, lambda a, b: a / b, (any_, away0)),
    "f_pow": (bt.pow, lambda a, b: a ** b, (pos, any_)),
    "mean": (bt.mean, lambda a, b: (a + b) / 2, (any_, any_)),
    "add_squares": (bt.add_squares, lambda a, b: a * a + b * b, (any_, any_)),
    "mean_squares": (bt.mean_squares, lambda a, b: (a * a + b * b) / 2, (any_, any_)),
    "negative_mean": (bt.negative_mean, lambda a, b: -(a + b) / 2, (any_, any_)),
}


def _var(xs, ddof):
    m = sum(xs) / len(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - ddof)


# name: (burtorch function of a list, reference, minimum length)
NARY = {
    "reduce_sum": (bt.reduce_sum, sum, 1),
    "reduce_sub": (bt.reduce_sub, lambda xs: xs[0] - sum(xs[1:]), 1),
    "reduce_mul": (bt.reduce_mul, math.prod, 1),
    "reduce_mean": (bt.reduce_mean, lambda xs: sum(xs) / len(xs), 1),
    "reduce_sum_of_squares": (bt.reduce_sum_of_squares, lambda xs: sum(x * x for x in xs), 1),
    "reduce_mean_squares": (bt.reduce_mean_squares, lambda xs: sum(x * x for x in xs) / len(xs), 1),
    "reduce_negative_mean": (bt.reduce_negative_mean, lambda xs: -sum(xs) / len(xs), 1),
    "variance": (bt.variance, lambda xs: _var(xs, 1), 2),
    "variance_biased": (bt.variance_biased, lambda xs: _var(xs, 0), 1),
    "mean_of_mean_and_mean_squares": (lambda xs: bt.reduce_mean_and_mean_squares(xs)[0],
                                      lambda xs: sum(xs) / len(xs), 1),
    "meansq_of_mean_and_mean_squares": (lambda xs: bt.reduce_mean_and_mean_squares(xs)[1],
                                        lambda xs: sum(x * x for x in xs) / len(xs), 1),
    "inner_product": (lambda xs: bt.inner_product(xs[: len(xs) // 2], xs[len(xs) // 2:]),
                      lambda xs: sum(a * b for a, b in zip(xs[: len(xs) // 2], xs[len(xs) // 2:])), 2),
    "inner_product_with_bias": (
        lambda xs: bt.inner_product_with_bias(xs[: (len(xs) - 1) // 2], xs[(len(xs) - 1) // 2: -1], xs[-1]),
        lambda xs: sum(a * b for a, b in zip(xs[: (len(xs) - 1) // 2], xs[(len(xs) - 1) // 2: -1])) + xs[-1],
        3),
}
