"""Module: parameters as contiguous leaf blocks, discovered in definition order, PyTorch's names."""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .. import _core
from ..seeding import next_seed


class Module:
    """Base class of layers and models.

    Parameters are Vectors of leaf nodes created with :meth:`param`; submodules are Module
    attributes (or lists of them). Parameters created one after another in one arena are adjacent
    slots, so a model's whole parameter set is usually a single span: zero_grad and optimizer steps
    are one native loop each.
    """

    # set per instance by __init__; a subclass may fix its own with a class attribute
    dtype: _core.DType
    training: bool
    _params: OrderedDict[str, _core.Vector]  # set in __init__ past __setattr__

    def __init__(self, dtype: _core.DType | None = None) -> None:
        """Args:
            dtype: ``bt.float32``, ``bt.float64``, ``bt.bfloat16`` or ``bt.float16``: the dtype of
                the parameters this module creates with :meth:`param`. Default: the subclass's own
                ``dtype`` class attribute if it sets one, else ``bt.get_default_dtype()`` read now (float64 unless
                ``bt.set_default_dtype`` changed it, the dtype ``bt.Value(1.0)`` gets), so a
                module and the Values fed to it share an arena.
        """
        object.__setattr__(self, "_params", OrderedDict())
        object.__setattr__(self, "training", True)
        if dtype is None:
            own = getattr(type(self), "dtype", None)
            dtype = _core.get_default_dtype() if own is None else own
        if not isinstance(dtype, _core.DType):
            raise TypeError(f"dtype must be bt.float32, bt.float64, bt.bfloat16 or bt.float16, got {dtype!r}")
        object.__setattr__(self, "dtype", dtype)

    # ---- creating parameters ----
    def param(self, name: str, shape: int | Sequence[int], init: str = "zeros", a: float = 0.0, b: float = 1.0,
              seed: int | None = None, dtype: _core.DType | None = None) -> _core.Vector:
        """Creates a parameter block of `shape` and registers it as `name`.

        init: 'zeros', 'ones', 'constant' (value a), 'uniform' on [a, b), 'normal' (mean a, std b).
        """
        if "_params" not in self.__dict__:
            raise RuntimeError(f"{type(self).__name__}.__init__ must call super().__init__() first")
        # checked before anything is created or registered: a bad name once left a half-registered
        # parameter that broke state_dict() much later
        if not isinstance(name, str) or not name.isidentifier():
            raise TypeError(f"param(): name must be a Python identifier (a str), got {name!r}")
        if init not in ("zeros", "ones", "uniform", "normal", "constant"):
            raise ValueError(f"unknown init {init!r}")
        dims = (shape,) if isinstance(shape, int) else tuple(shape)
        v = _core.leaves(shape=dims, dtype=dtype or self.dtype)  # a shape of other rank raises there
        if init == "ones":
            _core.init_(v, "constant", 1.0, 0.0, 0)
        elif init in ("uniform", "normal", "constant"):
            _core.init_(v, init, a, b, next_seed() if seed is None else seed)
        self._params[name] = v
        object.__setattr__(self, name, v)
        _STRUCTURE[0] += 1
        return v

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, _core.Vector) and name in self.__dict__.get("_params", {}):
            raise AttributeError(f"parameter {name!r} is a view of arena nodes; use load_state_dict or "
                                 f"{name}.set_data(...) to change its values")
        if isinstance(value, (Module, list, tuple)) or isinstance(self.__dict__.get(name), (Module, list, tuple)):
            _STRUCTURE[0] += 1  # a submodule added, replaced or removed: caches of parameters look again
        object.__setattr__(self, name, value)

    # ---- walking the tree ----
    def children(self) -> Iterator[tuple[str, Module]]:
        for name, value in self.__dict__.items():
            if isinstance(value, Module):
                yield name, value
            elif isinstance(value, (list, tuple)) and value and all(isinstance(m, Module) for m in value):
                for i, m in enumerate(value):
                    yield f"{name}.{i}", m

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, _core.Vector]]:
        for name, p in self._params.items():
            yield prefix + name, p
        for cname, child in self.children():
            yield from child.named_parameters(prefix + cname + ".")

    def parameters(self) -> list[_core.Vector]:
        return [p for _, p in self.named_parameters()]

    def parameter_vector(self) -> _core.Vector:
        """All parameters as one view (a single span when they were created in one go)."""
        return _core.cat(self.parameters())

    def num_parameters(self) -> int:
        return sum(p.size for p in self.parameters())

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.zero_grad()

    def state_dict(self) -> OrderedDict[str, _core.Vector]:
        """name -> Vector view of the parameter (like PyTorch, views, not copies)."""
        return OrderedDict(self.named_parameters())

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """Copies values into the parameters: all of them, or none if any entry is bad.

        Args:
            state: a mapping name -> Vector, numpy array or sequence of numbers (e.g. what
                ``state_dict()`` or ``burtorch.io.load_state_dict(path)`` returns).
            strict: every parameter must be in ``state`` and every entry of ``state`` must be a
                parameter.

        Raises:
            KeyError: with ``strict``, missing or unexpected names.
            ValueError: an entry's element count differs from its parameter's, or it holds
                something that is not a number.
            TypeError: an entry is not a sequence of numbers.
            StaleValueError: a Vector entry was discarded by a rewind.
        """
        if not hasattr(state, "keys") or not hasattr(state, "__getitem__"):
            # (`name in state` on a range would scan it in C, beyond Ctrl-C's reach)
            raise TypeError(f"load_state_dict() expects a mapping name -> values, got {type(state).__name__}")
        own = self.state_dict()
        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own]
        if strict and (missing or unexpected):
            raise KeyError(f"state_dict mismatch: missing {missing}, unexpected {unexpected}")
        # every entry is converted and checked before any parameter changes
        checked: list[tuple[_core.Vector, list[float]]] = []
        for name, p in own.items():
            if name in state:
                checked.append((p, _as_floats(name, state[name], p)))
        for p, values in checked:
            p.set_data(values)

    def train(self, mode: bool = True) -> Module:
        if not isinstance(mode, bool):  # a module stored as `training` would be walked as a child
            raise TypeError(f"train(mode): mode must be a bool, got {type(mode).__name__}")
        object.__setattr__(self, "training", mode)
        for _, c in self.children():
            c.train(mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, child in self.children():
            lines.append(f"  ({name}): " + repr(child).replace("\n", "\n  "))
        return "\n".join(lines) + (")" if len(lines) == 1 else "\n)")

    def extra_repr(self) -> str:
        return ""


# How many times any module's structure changed (a parameter created, a submodule or a list of them
# assigned): what the compiled oracle's per-model cache of parameters compares, one int per step,
# instead of walking the modules every step. A list of modules changed in place (append, item
# assignment) is not seen; assign the list again.
_STRUCTURE = [0]


def structure_epoch() -> int:
    """A number that changes whenever any module's parameters or submodules may have changed."""
    return _STRUCTURE[0]


def _as_floats(name: str, src: Any, p: _core.Vector) -> list[float]:
    """``src`` as a list of floats for parameter ``p`` (checked: count and type)."""
    if isinstance(src, _core.Vector):
        src = src.data
    elif hasattr(src, "reshape") and hasattr(src, "tolist"):
        src = src.reshape(-1).tolist()
    try:
        values = [float(x) for x in src]
    except TypeError:
        raise TypeError(f"{name}: expected a sequence of numbers, got {type(src).__name__}") from None
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None
    if len(values) != p.size:
        raise ValueError(f"{name}: {len(values)} values for a parameter of shape {p.shape}")
    return values
