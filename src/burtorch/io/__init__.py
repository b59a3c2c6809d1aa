"""Save and load the values and/or grads of nodes, and state dicts of models.

``save(path, values, what="values")`` / ``load(path, values, what="values")`` where ``values`` is a
Value, a list of Values, an ``(arena, first, last)`` range, a view with ``.arena`` and ``.spans``,
or a list of those; ``dumps`` / ``loads`` do the same with bytes. The file layout is documented
byte by byte in :mod:`burtorch.io.format`; every load checks everything before writing anything,
and raises :class:`FormatError` for a file that does not match.
"""
from .format import FormatError, Header, decode_header
from .ranges import MMAP_THRESHOLD, dumps, load, loads, save
from .state_dict import load_state_dict, save_state_dict

__all__ = ["FormatError", "Header", "MMAP_THRESHOLD", "decode_header", "dumps", "load", "loads",
           "save", "load_state_dict", "save_state_dict"]
