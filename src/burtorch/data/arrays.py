"""A batch of samples held as integer arrays, one per id part, which compiled steps read without
a Python object per id."""
from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from typing import Any, overload


class ArrayBatch(Sequence):
    """b samples held as integer arrays, one array per id part of a sample.

    Part q of sample i is ``parts[q][i]``: an int from a 1-D array, the row of ids from a 2-D
    one. For the makemore MLP, ``ArrayBatch(X, Y)`` with X of shape (b, block) and Y of shape
    (b,) is the batch ``[(X[i].tolist(), int(Y[i])) for i in range(b)]``; for the GPT, X and Y
    are both (b, block).

    Compiled steps (``grad_oracle(compile=True)``, ``SGD.fused_step(compile=True)``,
    ``per_sample_grads``) read the ids straight from the arrays; a list of samples costs them a
    Python object read per id. Everything else sees the sequence of samples above, so any
    code that takes a batch takes an ArrayBatch. Indexing with a slice or an integer array gives
    an ArrayBatch of those samples (``full[idx]`` draws a minibatch).

    The arrays are kept, not copied, unless one is not C-contiguous (or not in the machine's byte
    order): a step reads them when it runs, so filling the same arrays anew before each step is
    the way to reuse them. Any integer dtype; numpy is needed to build one.

    Raises:
        TypeError: a part that does not hold integers.
        ValueError: no parts, a part that is not 1-D or 2-D (or has rows of no ids), or parts
            of different lengths.
    """

    __slots__ = ("parts", "shape")

    def __init__(self, *parts: Any) -> None:
        import numpy as np

        if not parts:
            raise ValueError("an ArrayBatch needs at least one id part")
        arrays = []
        for q, part in enumerate(parts):
            a = np.asarray(part)
            if a.dtype.kind not in "iu":
                raise TypeError(f"part {q} of an ArrayBatch must hold integers, got dtype {a.dtype}")
            if a.ndim not in (1, 2) or (a.ndim == 2 and a.shape[1] == 0):
                raise ValueError(f"part {q} of an ArrayBatch must be 1-D (an id per sample) or 2-D (a row of ids "
                                 f"per sample), got shape {a.shape}")
            if not a.flags.c_contiguous or not a.dtype.isnative:  # the replays read native C order
                a = np.ascontiguousarray(a, dtype=a.dtype if a.dtype.isnative else a.dtype.newbyteorder("S"))
            arrays.append(a)
        if any(len(a) != len(arrays[0]) for a in arrays):
            raise ValueError(f"the parts of an ArrayBatch must have one row per sample, got lengths "
                             f"{[len(a) for a in arrays]}")
        self.parts = tuple(arrays)
        # each part's shape as the compiled oracle keys its programs: 0 for an id, L for L ids
        self.shape = tuple(0 if a.ndim == 1 else int(a.shape[1]) for a in arrays)

    @classmethod
    def from_samples(cls, samples: Iterable[Sequence[Any]]) -> ArrayBatch:
        """The samples (each a tuple of id parts, ints or equal-length lists of ints) as arrays."""
        import numpy as np

        rows = list(samples)
        if not rows:
            raise ValueError("ArrayBatch.from_samples(): no samples")
        return cls(*(np.asarray([s[q] for s in rows], dtype=np.int64) for q in range(len(rows[0]))))

    def __len__(self) -> int:
        return len(self.parts[0])

    @overload
    def __getitem__(self, i: int) -> tuple: ...

    @overload
    def __getitem__(self, i: Any) -> ArrayBatch: ...

    def __getitem__(self, i):
        if not isinstance(i, slice):
            try:
                j = operator.index(i)
            except TypeError:  # an integer or boolean array: those samples
                pass
            else:
                return tuple(a[j].tolist() for a in self.parts)
        return ArrayBatch(*(a[i] for a in self.parts))

    def __repr__(self) -> str:
        return f"ArrayBatch({len(self)} samples, shape={self.shape})"
