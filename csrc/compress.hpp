// Gradient compressors of distributed optimization: O(d) loops over contiguous float buffers.
//
// Every random compressor draws from the core's Rng built from an explicit 64-bit seed, so the
// numbers a message carries depend on (input, seed) only: not on the thread, process or machine
// that computes it. Callers derive the seed from (run seed, client, round).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "rng.hpp"

namespace bt::compress {

// A non-finite coordinate would make TopK's order and dithering's norm meaningless: refuse it.
template <typename T>
void check_finite(const T* x, size_t d) {
    for (size_t i = 0; i < d; ++i)
        if (!std::isfinite(x[i]))
            throw std::invalid_argument("compress: coordinate " + std::to_string(i) + " is not finite (" +
                                        std::to_string(double(x[i])) + ")");
}

// RandK: k distinct coordinates uniformly at random (selection sampling, indices ascending),
// values scaled by d/k so that the message is unbiased.
template <typename T>
void rand_k(const T* x, size_t d, size_t k, uint64_t seed, int64_t* idx, T* val) {
    check_finite(x, d);
    Rng rng = Rng::seeded(seed);
    const T scale = T(double(d) / double(k));
    size_t taken = 0;
    for (size_t i = 0; i < d && taken < k; ++i) {
        // coordinate i is kept with probability (still needed) / (still available)
        if (rng.uniform() * double(d - i) < double(k - taken)) {
            idx[taken] = int64_t(i);
            val[taken] = x[i] * scale;
            ++taken;
        }
    }
}

// The k largest magnitudes of v(0), ..., v(d-1) (ties: the lower index), written in ascending
// index order. For k small against d, one pass: a min-heap holds the k best so far, its root the
// worst of them (smallest magnitude, then highest index), so a coordinate enters only if its
// magnitude beats the root's (on a tie the later index loses). Most coordinates cost one
// comparison against a threshold held in a register, and nothing of length d is allocated. A
// non-finite value fails that comparison's "not above" test too, so the refusal costs the common
// path nothing. Where many coordinates would go through the heap (O(d log k)): k a large share of
// d, or magnitudes that keep growing along the vector (each one enters), a partition of the d
// indices by magnitude (nth_element, O(d)) selects instead, starting over. The order is total,
// so both ways keep the same k.
template <typename T, typename Value>
void select_top_k(size_t d, size_t k, Value v, int64_t* idx, T* val, const char* what) {
    struct Entry {
        T mag;
        uint32_t at;
    };
    // a ranks above b; std's heaps keep the last in this order, the worst kept, at the root
    auto ranks_above = [](const Entry& a, const Entry& b) { return a.mag > b.mag || (a.mag == b.mag && a.at < b.at); };
    auto refuse = [what](size_t i, T value) {
        throw std::invalid_argument(std::string("compress: ") + what + std::to_string(i) + " is not finite (" +
                                    std::to_string(double(value)) + ")");
    };
    auto by_partition = [&]() {
        for (size_t i = 0; i < d; ++i)
            if (!std::isfinite(v(i))) refuse(i, v(i));
        std::vector<uint32_t> order(d);
        for (size_t i = 0; i < d; ++i) order[i] = uint32_t(i);
        auto before = [&v](uint32_t a, uint32_t b) {
            const T fa = std::fabs(v(a)), fb = std::fabs(v(b));
            return fa > fb || (fa == fb && a < b);
        };
        if (k < d) std::nth_element(order.begin(), order.begin() + ptrdiff_t(k), order.end(), before);
        std::sort(order.begin(), order.begin() + ptrdiff_t(k));
        for (size_t j = 0; j < k; ++j) {
            idx[j] = int64_t(order[j]);
            val[j] = v(order[j]);
        }
    };
    if (k * 64 > d) return by_partition();
    // entries past the first k: beyond this many, the partition is the cheaper way
    size_t budget = d / 16;
    std::vector<Entry> heap;
    heap.reserve(k);
    // -1 is below every magnitude: the heap's first k entries go in unconditionally
    T threshold = T(-1);
    for (size_t i = 0; i < d; ++i) {
        const T value = v(i);
        const T mag = std::fabs(value);
        if (!(mag <= threshold)) {
            if (!std::isfinite(value)) refuse(i, value);
            if (mag == threshold) continue;  // a tie with the root: the root's lower index wins
            if (heap.size() < k) {
                heap.push_back({mag, uint32_t(i)});
                std::push_heap(heap.begin(), heap.end(), ranks_above);
                if (heap.size() == k) threshold = heap.front().mag;
            } else {
                if (budget-- == 0) return by_partition();
                std::pop_heap(heap.begin(), heap.end(), ranks_above);
                heap.back() = {mag, uint32_t(i)};
                std::push_heap(heap.begin(), heap.end(), ranks_above);
                threshold = heap.front().mag;
            }
        }
    }
    std::sort(heap.begin(), heap.end(), [](const Entry& a, const Entry& b) { return a.at < b.at; });
    for (size_t j = 0; j < k; ++j) {
        idx[j] = int64_t(heap[j].at);
        val[j] = v(heap[j].at);
    }
}

// TopK: the k largest magnitudes; ties go to the lower index, so the result is a function of x.
template <typename T>
void top_k(const T* x, size_t d, size_t k, int64_t* idx, T* val) {
    select_top_k<T>(d, k, [x](size_t i) { return x[i]; }, idx, val, "coordinate ");
}

// TopK of a - b without the difference written out (EF21's message C(grad - g_i)): the same
// selection and the same values, each a[i] - b[i] rounded once as numpy's subtraction rounds it,
// in one pass over a and b instead of a pass writing a - b and another reading it.
template <typename T>
void top_k_diff(const T* a, const T* b, size_t d, size_t k, int64_t* idx, T* val) {
    select_top_k<T>(d, k, [a, b](size_t i) { return a[i] - b[i]; }, idx, val, "coordinate of the difference ");
}

// RandSeqK (the BurTorch paper's): k consecutive coordinates from a uniform random start,
// wrapping around, scaled by d/k. Unbiased like RandK, but the message needs one index and the
// coordinates are read as one contiguous run (cache-friendly). Returns the start.
template <typename T>
size_t rand_seq_k(const T* x, size_t d, size_t k, uint64_t seed, T* val) {
    check_finite(x, d);
    Rng rng = Rng::seeded(seed);
    const size_t start = size_t(rng.below(d));
    const T scale = T(double(d) / double(k));
    for (size_t j = 0; j < k; ++j) {
        size_t i = start + j;
        if (i >= d) i -= d;
        val[j] = x[i] * scale;
    }
    return start;
}

// Natural compression (Horvath et al. 2019): each |x_i| in [2^e, 2^(e+1)) becomes 2^e or
// 2^(e+1) with the probabilities that keep its mean, so only sign and exponent are sent.
// One uniform per coordinate (zeros included) keeps the stream independent of the values.
template <typename T>
void natural(const T* x, size_t d, uint64_t seed, T* out) {
    check_finite(x, d);
    // Above the largest power of two of T, the upper neighbour 2^(e+1) is inf in T: such a value
    // has no unbiased rounding in T, so it is refused before anything is written.
    const double top = std::ldexp(1.0, std::numeric_limits<T>::max_exponent - 1);
    for (size_t i = 0; i < d; ++i)
        if (std::fabs(double(x[i])) > top)
            throw std::invalid_argument("natural compression: coordinate " + std::to_string(i) + " (" +
                                        std::to_string(double(x[i])) +
                                        ") lies above the largest power of two of its type, so it would round to inf");
    Rng rng = Rng::seeded(seed);
    for (size_t i = 0; i < d; ++i) {
        const double u = rng.uniform();
        const double v = double(x[i]);
        if (v == 0.0) {
            out[i] = T(0);
            continue;
        }
        int e;
        const double m = std::frexp(std::fabs(v), &e);  // |v| = m 2^e, m in [0.5, 1)
        const double low = std::ldexp(1.0, e - 1);
        const double up_probability = 2.0 * m - 1.0;  // (|v| - low) / low
        const double q = u < up_probability ? 2.0 * low : low;
        out[i] = T(std::copysign(q, v));
    }
}

// Random dithering with s levels on the l2 norm (QSGD): |x_i| / ||x|| rounded at random to one
// of its two neighbouring levels l/s, (l+1)/s, keeping the mean. Returns ||x||.
template <typename T>
double dither(const T* x, size_t d, unsigned s, uint64_t seed, T* out) {
    check_finite(x, d);
    double sq = 0.0;
    for (size_t i = 0; i < d; ++i) sq += double(x[i]) * double(x[i]);
    double norm = std::sqrt(sq);
    if (!std::isfinite(norm)) {  // the squares overflow (double inputs near the maximum): scaled by the largest
        double top = 0.0;
        for (size_t i = 0; i < d; ++i) top = std::max(top, std::fabs(double(x[i])));
        double scaled = 0.0;
        for (size_t i = 0; i < d; ++i) scaled += (double(x[i]) / top) * (double(x[i]) / top);
        norm = top * std::sqrt(scaled);
        if (!std::isfinite(norm))
            throw std::invalid_argument("dithering: the norm of these values overflows the type; scale them down");
    }
    Rng rng = Rng::seeded(seed);
    for (size_t i = 0; i < d; ++i) {
        const double u = rng.uniform();
        if (norm == 0.0) {
            out[i] = T(0);
            continue;
        }
        const double level = std::fabs(double(x[i])) / norm * s;
        const double low = std::floor(level);
        const double q = u < level - low ? low + 1.0 : low;
        out[i] = q == 0.0 ? T(0) : T(std::copysign(norm * q / s, double(x[i])));
    }
    return norm;
}

}  // namespace bt::compress
