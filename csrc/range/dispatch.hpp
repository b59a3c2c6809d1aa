// Range op code -> its family's forward and backward. Adding a range op: a row in ops.hpp's
// BT_RANGE_OPS, an append/forward/backward trio in a family header, a case in each switch here.
#pragma once
#include <algorithm>
#include <utility>
#include <vector>

#include "../half.hpp"
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

// The range records of the 16-bit formats run through the float kernels (whose sums and dot
// products then accumulate in float): the slots a record reads and writes are widened into a
// compact float frame, its spans renumbered into that frame, and what it wrote rounded back to
// the format once. The SIMD kernels are compiled for float and double only; this costs a copy of
// the record's operands, small next to its products, and no kernel code per half type.
template <typename T, bool Backward>
inline void widened_range(const Frame<T>& A, const Record& r, const uint32_t* rargs) {
    static_assert(is_half_v<T>);
    struct Widened {
        std::vector<uint32_t> args;
        std::vector<std::pair<uint32_t, uint32_t>> iv;  // distinct slot intervals [first, end)
        std::vector<uint32_t> base;                     // where each interval starts in the frame
        std::vector<float> v, g;
        HugeBuffer<float> scratch;
    };
    thread_local Widened w;  // reused: a record runs on one thread at a time
    w.args.assign(rargs, rargs + r.b);
    w.iv.clear();
    if (r.nout) w.iv.emplace_back(r.out, r.out + r.nout);
    const uint32_t k = w.args[0];
    size_t at = 1;
    for (uint32_t i = 0; i < k; ++i) {
        const uint32_t n = w.args[at++];
        for (uint32_t sp = 0; sp < n; ++sp, at += 2)
            if (w.args[at + 1]) w.iv.emplace_back(w.args[at], w.args[at] + w.args[at + 1]);
    }
    std::sort(w.iv.begin(), w.iv.end());
    size_t m = 0;  // merge overlapping and touching intervals: a slot gets one place in the frame
    for (const auto& x : w.iv) {
        if (m && x.first <= w.iv[m - 1].second)
            w.iv[m - 1].second = std::max(w.iv[m - 1].second, x.second);
        else
            w.iv[m++] = x;
    }
    w.iv.resize(m);
    w.base.resize(m);
    size_t total = 0;
    for (size_t j = 0; j < m; ++j) {
        w.base[j] = static_cast<uint32_t>(total);
        total += w.iv[j].second - w.iv[j].first;
    }
    auto local = [&](uint32_t slot) {
        const auto it = std::upper_bound(w.iv.begin(), w.iv.end(), std::make_pair(slot, UINT32_MAX));
        if (it == w.iv.begin()) return uint32_t(0);  // an empty span's first: never read
        const size_t j = size_t(it - w.iv.begin()) - 1;
        return slot < w.iv[j].second ? w.base[j] + (slot - w.iv[j].first) : uint32_t(0);
    };
    at = 1;
    for (uint32_t i = 0; i < k; ++i) {
        const uint32_t n = w.args[at++];
        for (uint32_t sp = 0; sp < n; ++sp, at += 2) w.args[at] = local(w.args[at]);
    }
    Record lr = r;
    lr.out = r.nout ? local(r.out) : 0;
    w.v.resize(total);
    w.g.resize(total);
    for (size_t j = 0; j < m; ++j)
        for (uint32_t s = w.iv[j].first, d = w.base[j]; s < w.iv[j].second; ++s, ++d) {
            w.v[d] = float(A.v[s]);
            w.g[d] = Backward ? float(A.g[s]) : 0.0f;
        }
    const Frame<float> f{w.v.data(), w.g.data(), &w.scratch};
    if constexpr (Backward) {
        range_backward<float>(f, lr, w.args.data());
        for (size_t j = 0; j < m; ++j)
            for (uint32_t s = w.iv[j].first, d = w.base[j]; s < w.iv[j].second; ++s, ++d) A.g[s] = T(w.g[d]);
    } else {
        range_forward<float>(f, lr, w.args.data());
        for (uint32_t i = 0; i < r.nout; ++i) A.v[r.out + i] = T(w.v[lr.out + i]);
    }
}

template <>
inline void range_forward<bfloat16>(const Frame<bfloat16>& A, const Record& r, const uint32_t* rargs) {
    widened_range<bfloat16, false>(A, r, rargs);
}
template <>
inline void range_forward<float16>(const Frame<float16>& A, const Record& r, const uint32_t* rargs) {
    widened_range<float16, false>(A, r, rargs);
}
template <>
inline void range_backward<bfloat16>(const Frame<bfloat16>& A, const Record& r, const uint32_t* rargs) {
    widened_range<bfloat16, true>(A, r, rargs);
}
template <>
inline void range_backward<float16>(const Frame<float16>& A, const Record& r, const uint32_t* rargs) {
    widened_range<float16, true>(A, r, rargs);
}

}  // namespace bt
