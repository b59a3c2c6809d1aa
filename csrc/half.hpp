// The two 16-bit storage formats, bt::bfloat16 and bt::float16, as small class types.
//
// The compilers this builds with (g++ 12, clang 16) have no C++23 std::bfloat16_t / float16_t, so
// each format is a uint16 with conversions: to float exactly, from float rounded to nearest, ties
// to even, with NaN kept (quiet, sign and top payload bits) and overflow going to infinity. The
// class converts implicitly to float, so every operation on it is done in float: templated code
// written for float/double instantiates for it, and `T x = a * b` rounds once, on the store.
//
//   bfloat16: 1 sign, 8 exponent, 7 fraction bits (float's upper half; epsilon 2^-7)
//   float16:  1 sign, 5 exponent, 10 fraction bits (IEEE binary16; epsilon 2^-10, subnormals
//             down to 2^-24, largest finite 65504)
//
// Sums and dot products over many elements are kept in acc_t<T> (float for both) by whatever
// loops over them; a half-typed accumulator would lose the small terms of a long sum.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace bt {

namespace half_detail {

inline uint32_t bits_of(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline float float_of(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// d rounded to float "to odd": the odd one of the two floats around d when d is not a float. A
// float made so and then rounded to nearest-even into a format with fewer than 23 fraction bits
// gives that format's correctly rounded d, which double -> float -> half (twice to nearest) would
// not always (a tie made by the first rounding).
inline float to_float_odd(double d) {
    float f = static_cast<float>(d);
    if (static_cast<double>(f) == d || std::isnan(d) || std::isinf(f)) return f;
    if ((bits_of(f) & 1u) == 0)
        f = std::nextafter(f, static_cast<float>(d > static_cast<double>(f) ? INFINITY : -INFINITY));
    return f;
}

struct BF16 {
    static constexpr const char* name = "bfloat16";
    static uint16_t from_float(float f) {
        const uint32_t u = bits_of(f);
        if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN: quiet
        const uint32_t bias = 0x7fffu + ((u >> 16) & 1u);                                        // ties to even
        return static_cast<uint16_t>((u + bias) >> 16);  // a carry into the exponent is right, to inf too
    }
    static float to_float(uint16_t h) { return float_of(uint32_t(h) << 16); }
};

struct F16 {
    static constexpr const char* name = "float16";
    static uint16_t from_float(float f) {
        const uint32_t u = bits_of(f);
        const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
        const uint32_t x = u & 0x7fffffffu;
        if (x >= 0x7f800000u)  // inf, or NaN kept quiet with its top payload bits
            return sign | (x == 0x7f800000u ? 0x7c00u : static_cast<uint16_t>(0x7e00u | ((x >> 13) & 0x3ffu)));
        if (x >= 0x477ff000u) return sign | 0x7c00u;  // 65520 and above round to inf
        if (x >= 0x38800000u) {                       // normal: 2^-14 and above
            uint32_t h = (x >> 13) - (112u << 10);    // rebias the exponent 127 -> 15
            const uint32_t rem = x & 0x1fffu;
            if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
            return sign | static_cast<uint16_t>(h);
        }
        if (x < 0x33000000u) return sign;  // below 2^-25 (2^-25 itself ties to even, 0)
        // Subnormal: round(|f| / 2^-24), which may carry into the smallest normal.
        const uint32_t e = x >> 23, m = (x & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126u - e;  // 14 ... 24
        uint32_t h = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
        if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
        return sign | static_cast<uint16_t>(h);
    }
    static float to_float(uint16_t h) {
        const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
        if (e == 0) {  // zero or subnormal: m * 2^-24, exact in float
            const float v = static_cast<float>(m) * 5.9604644775390625e-08f;
            return sign ? -v : v;
        }
        if (e == 31) return float_of(sign | 0x7f800000u | (m << 13));
        return float_of(sign | ((e + 112u) << 23) | (m << 13));
    }
};

}  // namespace half_detail

template <class Format>
struct Half {
    uint16_t bits;

    Half() = default;  // trivial, like float: arena columns are filled explicitly
    Half(float f) : bits(Format::from_float(f)) {}
    Half(double d) : bits(Format::from_float(half_detail::to_float_odd(d))) {}
    template <class I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
    Half(I i) : Half(static_cast<double>(i)) {}
    static Half from_bits(uint16_t b) {
        Half h;
        h.bits = b;
        return h;
    }
    operator float() const { return Format::to_float(bits); }

    // Compound assignment computes in float and rounds once into the format.
    Half& operator+=(float x) { return *this = Half(float(*this) + x); }
    Half& operator-=(float x) { return *this = Half(float(*this) - x); }
    Half& operator*=(float x) { return *this = Half(float(*this) * x); }
    Half& operator/=(float x) { return *this = Half(float(*this) / x); }
};

using bfloat16 = Half<half_detail::BF16>;
using float16 = Half<half_detail::F16>;
static_assert(sizeof(bfloat16) == 2 && sizeof(float16) == 2 && std::is_trivially_copyable_v<bfloat16>);

template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;

// What sums and dot products over values of type T accumulate in.
template <class T>
using acc_t = std::conditional_t<is_half_v<T>, float, T>;

}  // namespace bt

// The generic code asks numeric_limits for infinity and the like; the half formats answer with
// their own values (what a float would answer, rounded, for the ones that exist in both).
template <class F>
struct std::numeric_limits<bt::Half<F>> : std::numeric_limits<float> {
    static bt::Half<F> infinity() { return bt::Half<F>(std::numeric_limits<float>::infinity()); }
    static bt::Half<F> quiet_NaN() { return bt::Half<F>(std::numeric_limits<float>::quiet_NaN()); }
    static bt::Half<F> lowest() {
        return bt::Half<F>::from_bits(std::is_same_v<F, bt::half_detail::F16> ? 0xfbffu : 0xff7fu);
    }
    static bt::Half<F> max() {
        return bt::Half<F>::from_bits(std::is_same_v<F, bt::half_detail::F16> ? 0x7bffu : 0x7f7fu);
    }
    static bt::Half<F> epsilon() { return bt::Half<F>(std::is_same_v<F, bt::half_detail::F16> ? 0x1p-10f : 0x1p-7f); }
    static constexpr int digits = std::is_same_v<F, bt::half_detail::F16> ? 11 : 8;
};
