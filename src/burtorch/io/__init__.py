"""Save and load the values and/or grads of nodes, and state dicts of models.

``save(path, values, what="values")`` / ``load(path, values, what="values")`` where ``values`` is a
Value, a list of Values, an ``(arena, first, last)`` range, a Vector, or a list of those;
``dumps`` / ``loads`` do the same with bytes. The file layout is documented byte by byte in
:mod:`burtorch.io.format`; every load reads no more than the header declares, checks everything
before writing anything, and raises :class:`FormatError` for a file that does not match. Every
save goes through the atomic writer of :mod:`burtorch.io.atomic`.
"""
from .format import FormatError, Header, decode_header
from .ranges import dumps, load, loads, save
from .regular_file import NotRegularFileError
from .state_dict import load_state_dict, load_state_dict_bytes, save_state_dict, state_dict_bytes

__all__ = ["FormatError", "Header", "NotRegularFileError", "decode_header", "dumps", "load", "loads",
           "save", "load_state_dict", "load_state_dict_bytes", "save_state_dict", "state_dict_bytes"]
