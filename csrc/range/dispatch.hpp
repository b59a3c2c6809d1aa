// Range op code -> its family's forward and backward. Adding a range op: a row in ops.hpp's
// BT_RANGE_OPS, an append/forward/backward trio in a family header, a case in each switch here.
#pragma once
#include "../record_timer.hpp"
#include "attention.hpp"
#include "gather.hpp"
#include "linear.hpp"
#include "lookup_linear.hpp"
#include "map.hpp"
#include "norm.hpp"
#include "reduce.hpp"
#include "softmax.hpp"

namespace bt {

// rargs: the record's own args (A.args() + r.a, or the scratch args of an unrecorded op).
// Not inline: a build that defines BT_SEPARATE_RANGE_KERNELS instantiates both functions (and
// every kernel below them) once, in bindings/range_kernels_{float,double}.cpp, instead of in
// each one that appends, replays or sweeps records (see the declarations at the end).
template <typename T>
void range_forward(const Frame<T>& A, const Record& r, const uint32_t* rargs) {
    const Operands o = decode_operands(rargs);
    const record_timer::Scope timed(0, record_timer::kind_of(r.op));
    switch (r.op) {
        case Op::copy: return copy_forward(A, r, o);
        case Op::map_unary:
        case Op::map_imm: return map_unary_forward(A, r, o);
        case Op::map_binary: return map_binary_forward(A, r, o);
        case Op::sum_range: return sum_forward(A, r, o);
        case Op::dot_range: return dot_forward(A, r, o);
        case Op::linear: return linear_forward(A, r, o);
        case Op::softmax: return softmax_forward(A, r, o);
        case Op::cross_entropy: return cross_entropy_forward(A, r, o);
        case Op::layer_norm: return layer_norm_forward(A, r, o);
        case Op::attention: return attention_forward(A, r, o);
        case Op::multi_head_attention: return mha_forward(A, r, o);
        case Op::gather: return gather_forward(A, r, o);
        case Op::lookup_linear: return lookup_linear_forward(A, r, o);
        default: return;
    }
}

template <typename T>
void range_backward(const Frame<T>& A, const Record& r, const uint32_t* rargs) {
    const Operands o = decode_operands(rargs);
    const record_timer::Scope timed(1, record_timer::kind_of(r.op));
    switch (r.op) {
        case Op::copy: return copy_backward(A, r, o);
        case Op::map_unary:
        case Op::map_imm: return map_unary_backward(A, r, o);
        case Op::map_binary: return map_binary_backward(A, r, o);
        case Op::sum_range: return sum_backward(A, r, o);
        case Op::dot_range: return dot_backward(A, r, o);
        case Op::linear: return linear_backward(A, r, o);
        case Op::softmax: return softmax_backward(A, r, o);
        case Op::cross_entropy: return cross_entropy_backward(A, r, o);
        case Op::layer_norm: return layer_norm_backward(A, r, o);
        case Op::attention: return attention_backward(A, r, o);
        case Op::multi_head_attention: return mha_backward(A, r, o);
        case Op::gather: return gather_backward(A, r, o);
        case Op::lookup_linear: return lookup_linear_backward(A, r, o);
        default: return;
    }
}

#ifdef BT_SEPARATE_RANGE_KERNELS
extern template void range_forward<float>(const Frame<float>&, const Record&, const uint32_t*);
extern template void range_forward<double>(const Frame<double>&, const Record&, const uint32_t*);
extern template void range_backward<float>(const Frame<float>&, const Record&, const uint32_t*);
extern template void range_backward<double>(const Frame<double>&, const Record&, const uint32_t*);
#endif

}  // namespace bt
