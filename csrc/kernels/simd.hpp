// One SIMD register of T, chosen at build time from the compiler's target macros (the extension
// builds once per ISA level, CMakeLists.txt): AVX-512, else AVX2 + FMA, else NEON on aarch64, else
// a portable array of lanes that the compiler may vectorize. The GEMM kernels are written once
// against this interface. BT_PORTABLE_SIMD forces the portable lanes (the reference the SIMD
// levels are checked against, scripts/aarch64_check.sh).
//
// Every multiply-add goes through madd(), which is one fused operation on the SIMD targets, so
// a kernel's result is a chain of fused multiply-adds whose order the kernel alone fixes.
#pragma once
#include <cmath>
#include <cstddef>

#if defined(BT_PORTABLE_SIMD)
#define BT_SIMD_PORTABLE 1
#elif defined(__AVX512F__)
#define BT_SIMD_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__)
#define BT_SIMD_AVX2 1
#elif defined(__aarch64__) && defined(__ARM_NEON)
#define BT_SIMD_NEON 1
#else
#define BT_SIMD_PORTABLE 1
#endif

#if defined(BT_SIMD_AVX512) || defined(BT_SIMD_AVX2)
#include <immintrin.h>
#elif defined(BT_SIMD_NEON)
#include <arm_neon.h>
#endif

#if defined(__GNUC__) || defined(__clang__)
#define BT_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define BT_ALWAYS_INLINE inline
#endif
// The same for a lambda's call operator (written after its parameter list). Not in sanitizer
// builds (BT_SANITIZED, set by CMake): there it only multiplied the instrumented code.
#if (defined(__GNUC__) || defined(__clang__)) && !defined(BT_SANITIZED)
#define BT_LAMBDA_INLINE __attribute__((always_inline))
#else
#define BT_LAMBDA_INLINE
#endif

namespace bt::simd {

template <typename T>
struct Simd;

#if defined(BT_SIMD_AVX512)
inline constexpr const char* isa = "avx512";

template <>
struct Simd<float> {
    using V = __m512;
    static constexpr int W = 16;
    static BT_ALWAYS_INLINE __mmask16 mask(int n) { return n >= W ? __mmask16(0xffff) : __mmask16((1u << n) - 1); }
    static BT_ALWAYS_INLINE V zero() { return _mm512_setzero_ps(); }
    static BT_ALWAYS_INLINE V set1(float a) { return _mm512_set1_ps(a); }
    static BT_ALWAYS_INLINE V load(const float* p) { return _mm512_loadu_ps(p); }
    static BT_ALWAYS_INLINE V load(const float* p, int n) { return _mm512_maskz_loadu_ps(mask(n), p); }
    static BT_ALWAYS_INLINE void store(float* p, V v) { _mm512_storeu_ps(p, v); }
    static BT_ALWAYS_INLINE void store(float* p, V v, int n) { _mm512_mask_storeu_ps(p, mask(n), v); }
    static BT_ALWAYS_INLINE void stream(float* p, V v) { _mm512_stream_ps(p, v); }
    static BT_ALWAYS_INLINE V madd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
    static BT_ALWAYS_INLINE V add(V a, V b) { return _mm512_add_ps(a, b); }
};

template <>
struct Simd<double> {
    using V = __m512d;
    static constexpr int W = 8;
    static BT_ALWAYS_INLINE __mmask8 mask(int n) { return n >= W ? __mmask8(0xff) : __mmask8((1u << n) - 1); }
    static BT_ALWAYS_INLINE V zero() { return _mm512_setzero_pd(); }
    static BT_ALWAYS_INLINE V set1(double a) { return _mm512_set1_pd(a); }
    static BT_ALWAYS_INLINE V load(const double* p) { return _mm512_loadu_pd(p); }
    static BT_ALWAYS_INLINE V load(const double* p, int n) { return _mm512_maskz_loadu_pd(mask(n), p); }
    static BT_ALWAYS_INLINE void store(double* p, V v) { _mm512_storeu_pd(p, v); }
    static BT_ALWAYS_INLINE void store(double* p, V v, int n) { _mm512_mask_storeu_pd(p, mask(n), v); }
    static BT_ALWAYS_INLINE void stream(double* p, V v) { _mm512_stream_pd(p, v); }
    static BT_ALWAYS_INLINE V madd(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
    static BT_ALWAYS_INLINE V add(V a, V b) { return _mm512_add_pd(a, b); }
};

#elif defined(BT_SIMD_AVX2)
inline constexpr const char* isa = "avx2";

template <>
struct Simd<float> {
    using V = __m256;
    static constexpr int W = 8;
    // Lane i is on when i < n; masked loads read nothing (and cannot fault) past the end.
    static BT_ALWAYS_INLINE __m256i mask(int n) {
        return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    }
    static BT_ALWAYS_INLINE V zero() { return _mm256_setzero_ps(); }
    static BT_ALWAYS_INLINE V set1(float a) { return _mm256_set1_ps(a); }
    static BT_ALWAYS_INLINE V load(const float* p) { return _mm256_loadu_ps(p); }
    static BT_ALWAYS_INLINE V load(const float* p, int n) { return _mm256_maskload_ps(p, mask(n)); }
    static BT_ALWAYS_INLINE void store(float* p, V v) { _mm256_storeu_ps(p, v); }
    static BT_ALWAYS_INLINE void store(float* p, V v, int n) { _mm256_maskstore_ps(p, mask(n), v); }
    static BT_ALWAYS_INLINE void stream(float* p, V v) { _mm256_stream_ps(p, v); }
    static BT_ALWAYS_INLINE V madd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
    static BT_ALWAYS_INLINE V add(V a, V b) { return _mm256_add_ps(a, b); }
};

template <>
struct Simd<double> {
    using V = __m256d;
    static constexpr int W = 4;
    static BT_ALWAYS_INLINE __m256i mask(int n) {
        return _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3));
    }
    static BT_ALWAYS_INLINE V zero() { return _mm256_setzero_pd(); }
    static BT_ALWAYS_INLINE V set1(double a) { return _mm256_set1_pd(a); }
    static BT_ALWAYS_INLINE V load(const double* p) { return _mm256_loadu_pd(p); }
    static BT_ALWAYS_INLINE V load(const double* p, int n) { return _mm256_maskload_pd(p, mask(n)); }
    static BT_ALWAYS_INLINE void store(double* p, V v) { _mm256_storeu_pd(p, v); }
    static BT_ALWAYS_INLINE void store(double* p, V v, int n) { _mm256_maskstore_pd(p, mask(n), v); }
    static BT_ALWAYS_INLINE void stream(double* p, V v) { _mm256_stream_pd(p, v); }
    static BT_ALWAYS_INLINE V madd(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
    static BT_ALWAYS_INLINE V add(V a, V b) { return _mm256_add_pd(a, b); }
};

#elif defined(BT_SIMD_NEON)
inline constexpr const char* isa = "neon";

// NEON has no masked loads or stores: a partial register goes through a small buffer on the
// stack, which reads and writes exactly the first n elements (nothing past the end).
template <>
struct Simd<float> {
    using V = float32x4_t;
    static constexpr int W = 4;
    static BT_ALWAYS_INLINE V zero() { return vdupq_n_f32(0.0f); }
    static BT_ALWAYS_INLINE V set1(float a) { return vdupq_n_f32(a); }
    static BT_ALWAYS_INLINE V load(const float* p) { return vld1q_f32(p); }
    static BT_ALWAYS_INLINE V load(const float* p, int n) {
        float t[W] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int i = 0; i < n && i < W; ++i) t[i] = p[i];
        return vld1q_f32(t);
    }
    static BT_ALWAYS_INLINE void store(float* p, V v) { vst1q_f32(p, v); }
    static BT_ALWAYS_INLINE void store(float* p, V v, int n) {
        float t[W];
        vst1q_f32(t, v);
        for (int i = 0; i < n && i < W; ++i) p[i] = t[i];
    }
    // A plain store: the non-temporal pair store (STNP) has no portable intrinsic.
    static BT_ALWAYS_INLINE void stream(float* p, V v) { vst1q_f32(p, v); }
    static BT_ALWAYS_INLINE V madd(V a, V b, V c) { return vfmaq_f32(c, a, b); }
    static BT_ALWAYS_INLINE V add(V a, V b) { return vaddq_f32(a, b); }
};

template <>
struct Simd<double> {
    using V = float64x2_t;
    static constexpr int W = 2;
    static BT_ALWAYS_INLINE V zero() { return vdupq_n_f64(0.0); }
    static BT_ALWAYS_INLINE V set1(double a) { return vdupq_n_f64(a); }
    static BT_ALWAYS_INLINE V load(const double* p) { return vld1q_f64(p); }
    static BT_ALWAYS_INLINE V load(const double* p, int n) {
        double t[W] = {0.0, 0.0};
        for (int i = 0; i < n && i < W; ++i) t[i] = p[i];
        return vld1q_f64(t);
    }
    static BT_ALWAYS_INLINE void store(double* p, V v) { vst1q_f64(p, v); }
    static BT_ALWAYS_INLINE void store(double* p, V v, int n) {
        double t[W];
        vst1q_f64(t, v);
        for (int i = 0; i < n && i < W; ++i) p[i] = t[i];
    }
    static BT_ALWAYS_INLINE void stream(double* p, V v) { vst1q_f64(p, v); }
    static BT_ALWAYS_INLINE V madd(V a, V b, V c) { return vfmaq_f64(c, a, b); }
    static BT_ALWAYS_INLINE V add(V a, V b) { return vaddq_f64(a, b); }
};

#else
inline constexpr const char* isa = "portable";

// Four lanes in a plain array. Without hardware FMA, std::fma is a slow library call, so the
// portable madd is a multiply then an add (still one fixed order per build).
template <typename T>
struct Simd {
    struct V {
        T v[4];
    };
    static constexpr int W = 4;
    static BT_ALWAYS_INLINE T madd1(T a, T b, T c) {
#if defined(FP_FAST_FMA) && defined(FP_FAST_FMAF)
        return std::fma(a, b, c);
#else
        T p = a * b;
        return p + c;
#endif
    }
    static BT_ALWAYS_INLINE V zero() { return V{{T(0), T(0), T(0), T(0)}}; }
    static BT_ALWAYS_INLINE V set1(T a) { return V{{a, a, a, a}}; }
    static BT_ALWAYS_INLINE V load(const T* p) { return V{{p[0], p[1], p[2], p[3]}}; }
    static BT_ALWAYS_INLINE V load(const T* p, int n) {
        V r = zero();
        for (int i = 0; i < n && i < W; ++i) r.v[i] = p[i];
        return r;
    }
    static BT_ALWAYS_INLINE void store(T* p, V a) {
        for (int i = 0; i < W; ++i) p[i] = a.v[i];
    }
    static BT_ALWAYS_INLINE void store(T* p, V a, int n) {
        for (int i = 0; i < n && i < W; ++i) p[i] = a.v[i];
    }
    static BT_ALWAYS_INLINE void stream(T* p, V a) { store(p, a); }
    static BT_ALWAYS_INLINE V madd(V a, V b, V c) {
        V r;
        for (int i = 0; i < W; ++i) r.v[i] = madd1(a.v[i], b.v[i], c.v[i]);
        return r;
    }
    static BT_ALWAYS_INLINE V add(V a, V b) {
        V r;
        for (int i = 0; i < W; ++i) r.v[i] = a.v[i] + b.v[i];
        return r;
    }
};
#endif

// stream(p, v) stores a whole register to p, aligned to the register's size, with a
// non-temporal store where the target has one: the line goes to memory without first being
// fetched for ownership. stream_fence() orders those stores before anything that follows (a
// thread that finishes a task after them, another that reads the values then).
#if defined(BT_SIMD_AVX512) || defined(BT_SIMD_AVX2)
inline void stream_fence() { _mm_sfence(); }
#else
inline void stream_fence() {}
#endif

// Whether this build's multiply-add rounds once (fused), as PyTorch's CPU kernels do with FMA.
#if defined(BT_SIMD_AVX512) || defined(BT_SIMD_AVX2) || defined(BT_SIMD_NEON) || \
    (defined(FP_FAST_FMA) && defined(FP_FAST_FMAF))
inline constexpr bool kFusedMadd = true;
#else
inline constexpr bool kFusedMadd = false;
#endif

// One multiply-add a * b + c, rounded as each lane of this build's Simd<T>::madd rounds it (fused
// where the build has FMA), for scalar code that must match vector code to the bit.
template <typename T>
BT_ALWAYS_INLINE T madd(T a, T b, T c) {
#if defined(BT_SIMD_AVX512) || defined(BT_SIMD_AVX2) || defined(BT_SIMD_NEON)
    return std::fma(a, b, c);
#else
    return Simd<T>::madd1(a, b, c);
#endif
}

}  // namespace bt::simd
