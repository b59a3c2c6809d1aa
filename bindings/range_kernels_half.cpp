// The range records' forward and backward of bfloat16 and float16 arenas, instantiated once for
// the whole extension: each widens its operands and runs the float kernels (csrc/range/dispatch.hpp),
// so this file compiles no kernel of its own.
#include "range/dispatch.hpp"

namespace bt {
template void range_forward<bfloat16>(const Frame<bfloat16>&, const Record&, const uint32_t*);
template void range_backward<bfloat16>(const Frame<bfloat16>&, const Record&, const uint32_t*);
template void range_forward<float16>(const Frame<float16>&, const Record&, const uint32_t*);
template void range_backward<float16>(const Frame<float16>&, const Record&, const uint32_t*);
}  // namespace bt
