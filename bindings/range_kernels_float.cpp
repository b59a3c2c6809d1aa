// The range records' forward and backward (and a lookup run with its linear layer) in float, instantiated once for the
// whole extension (csrc/range/dispatch.hpp declares them extern elsewhere): compiled in every binding file that
// appends, replays or sweeps records, they were more than half of each translation unit's code.
// One file per dtype, so that the two compile side by side.
#include "range/dispatch.hpp"
#include "range/gather_linear.hpp"

namespace bt {
template void range_forward<float>(const Frame<float>&, const Record&, const uint32_t*);
template void range_backward<float>(const Frame<float>&, const Record&, const uint32_t*);
template void gather_linear_forward<float>(const Frame<float>&, const Record&, const Record&, const uint32_t*, size_t,
                                           float*);
template void gather_linear_backward<float>(const Frame<float>&, const Record&, const Record&, const uint32_t*, size_t,
                                            float*);
}  // namespace bt
