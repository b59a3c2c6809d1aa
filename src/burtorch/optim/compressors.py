"""The compressors of burtorch.fl (native, O(d)), under their burtorch.optim names."""
from ..fl.compressors import (Compressor, Identity, Message, Natural, RandK, RandomDithering, RandSeqK,  # noqa: F401
                              Scaled, TopK, make_compressor)
