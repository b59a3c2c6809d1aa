// The range records' forward and backward (and a lookup run with its linear layer) in double, instantiated once for the
// whole extension (csrc/range/dispatch.hpp declares them extern elsewhere): compiled in every binding file that
// appends, replays or sweeps records, they were more than half of each translation unit's code.
// One file per dtype, so that the two compile side by side.
#include "range/dispatch.hpp"
#include "range/gather_linear.hpp"

namespace bt {
template void range_forward<double>(const Frame<double>&, const Record&, const uint32_t*);
template void range_backward<double>(const Frame<double>&, const Record&, const uint32_t*);
template void gather_linear_forward<double>(const Frame<double>&, const Record&, const Record&, const uint32_t*, size_t,
                                            double*);
template void gather_linear_backward<double>(const Frame<double>&, const Record&, const Record&, const uint32_t*,
                                             size_t, double*);
}  // namespace bt
