"""Module: parameters as contiguous leaf blocks, discovered in definition order, PyTorch's names."""
from __future__ import annotations

from collections import OrderedDict

from .. import _core
from ..seeding import next_seed


class Module:
    """Base class of layers and models.

    Parameters are Vectors of leaf nodes created with :meth:`param`; submodules are Module
    attributes (or lists of them). Parameters created one after another in one arena are adjacent
    slots, so a model's whole parameter set is usually a single span: zero_grad and optimizer steps
    are one native loop each.
    """

    dtype = _core.float32

    def __init__(self):
        object.__setattr__(self, "_params", OrderedDict())
        object.__setattr__(self, "training", True)

    # ---- creating parameters ----
    def param(self, name: str, shape, init: str = "zeros", a: float = 0.0, b: float = 1.0,
              seed: int | None = None, dtype=None) -> _core.Vector:
        """Creates a parameter block of `shape` and registers it as `name`.

        init: 'zeros', 'ones', 'constant' (value a), 'uniform' on [a, b), 'normal' (mean a, std b).
        """
        if "_params" not in self.__dict__:
            raise RuntimeError(f"{type(self).__name__}.__init__ must call super().__init__() first")
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        v = _core.leaves(shape=shape, dtype=dtype or self.dtype)
        if init == "ones":
            _core.init_(v, "constant", 1.0, 0.0, 0)
        elif init in ("uniform", "normal", "constant"):
            _core.init_(v, init, a, b, next_seed() if seed is None else seed)
        elif init != "zeros":
            raise ValueError(f"unknown init {init!r}")
        self._params[name] = v
        object.__setattr__(self, name, v)
        return v

    def __setattr__(self, name, value):
        if isinstance(value, _core.Vector) and name in self.__dict__.get("_params", {}):
            raise AttributeError(f"parameter {name!r} is a view of arena nodes; use load_state_dict or "
                                 f"{name}.set_data(...) to change its values")
        object.__setattr__(self, name, value)

    # ---- walking the tree ----
    def children(self):
        for name, value in self.__dict__.items():
            if isinstance(value, Module):
                yield name, value
            elif isinstance(value, (list, tuple)) and value and all(isinstance(m, Module) for m in value):
                for i, m in enumerate(value):
                    yield f"{name}.{i}", m

    def named_parameters(self, prefix: str = ""):
        for name, p in self._params.items():
            yield prefix + name, p
        for cname, child in self.children():
            yield from child.named_parameters(prefix + cname + ".")

    def parameters(self) -> list:
        return [p for _, p in self.named_parameters()]

    def parameter_vector(self) -> _core.Vector:
        """All parameters as one view (a single span when they were created in one go)."""
        return _core.cat(self.parameters())

    def num_parameters(self) -> int:
        return sum(p.size for p in self.parameters())

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.zero_grad()

    def state_dict(self) -> "OrderedDict[str, _core.Vector]":
        """name -> Vector view of the parameter (like PyTorch, views, not copies)."""
        return OrderedDict(self.named_parameters())

    def load_state_dict(self, state, strict: bool = True) -> None:
        """Copies values into the parameters. Values: Vectors, numpy arrays or sequences of numbers."""
        if not hasattr(state, "keys") or not hasattr(state, "__getitem__"):
            # (`name in state` on a range would scan it in C, beyond Ctrl-C's reach)
            raise TypeError(f"load_state_dict() expects a mapping name -> values, got {type(state).__name__}")
        own = self.state_dict()
        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own]
        if strict and (missing or unexpected):
            raise KeyError(f"state_dict mismatch: missing {missing}, unexpected {unexpected}")
        for name, p in own.items():
            if name not in state:
                continue
            src = state[name]
            if isinstance(src, _core.Vector):
                src = src.data
            elif hasattr(src, "reshape") and hasattr(src, "tolist"):
                src = src.reshape(-1).tolist()
            src = list(src)
            if len(src) != p.size:
                raise ValueError(f"{name}: {len(src)} values for a parameter of shape {p.shape}")
            p.set_data(src)

    def train(self, mode: bool = True) -> "Module":
        if not isinstance(mode, bool):  # a module stored as `training` would be walked as a child
            raise TypeError(f"train(mode): mode must be a bool, got {type(mode).__name__}")
        object.__setattr__(self, "training", mode)
        for _, c in self.children():
            c.train(mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        raise NotImplementedError

    def __repr__(self):
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, child in self.children():
            lines.append(f"  ({name}): " + repr(child).replace("\n", "\n  "))
        return "\n".join(lines) + (")" if len(lines) == 1 else "\n)")

    def extra_repr(self) -> str:
        return ""
