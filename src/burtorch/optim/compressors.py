"""The compressors of burtorch.fl (native, O(d)), under their burtorch.optim names."""
from ..fl.compressors import (  # noqa: F401
                              Compressor,
                              Identity,
                              Message,
                              Natural,
                              RandK,
                              RandomDithering,
                              RandSeqK,
                              Scaled,
                              TopK,
                              make_compressor,
)
