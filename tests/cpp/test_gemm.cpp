// The linear layer's three products (csrc/kernels/gemm.hpp) against a naive double-precision
// reference over many shapes, for float and double, and every sub-range split against the
// whole, bit for bit. Built by scripts/sanitize.sh with ASan + UBSan, once for the portable
// kernels and once for the build machine's SIMD (-march=native).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "../../csrc/kernels/gemm.hpp"
#include "../../csrc/optim.hpp"
#include "check.hpp"

namespace gemm = bt::gemm;
static std::mt19937_64 rng(12345);

template <typename T>
static std::vector<T> random_vec(size_t n) {
    std::uniform_real_distribution<double> d(-1.0, 1.0);
    std::vector<T> v(n);
    for (T& e : v) e = T(d(rng));
    return v;
}

// Sum order differs from the reference, so compare against the size of the terms: each result
// is a sum of n products of magnitude <= |a||b|; float keeps ~1e-7 relative per term.
template <typename T>
static double tolerance(size_t n) {
    const double eps = std::is_same_v<T, float> ? 1.2e-7 : 2.3e-16;
    return 4.0 * eps * (double(n) + 2.0);
}

template <typename T>
static bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
    // (empty vectors may hold null, which memcmp must not be given even for zero bytes)
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

template <typename T>
static void check_shape(size_t rows, size_t in, size_t out, bool bias) {
    const char* tn = std::is_same_v<T, float> ? "float" : "double";
    auto x = random_vec<T>(rows * in), W = random_vec<T>(out * in), b = random_vec<T>(out);
    auto gy = random_vec<T>(rows * out);
    // Accumulating outputs start from non-zero values, as gradients of a second use would.
    auto gx0 = random_vec<T>(rows * in), gW0 = random_vec<T>(out * in), gb0 = random_vec<T>(out);
    const T* bp = bias ? b.data() : nullptr;

    // ---- the whole product against the double reference
    std::vector<T> scratch(gemm::forward_scratch(rows, in, out, 0, out) + 1);
    std::vector<T> y(rows * out, T(-7));
    gemm::forward(x.data(), W.data(), bp, y.data(), rows, in, out, 0, out, scratch.data());
    double worst = 0;
    for (size_t r = 0; r < rows; ++r)
        for (size_t o = 0; o < out; ++o) {
            double s = bias ? double(b[o]) : 0.0;
            for (size_t i = 0; i < in; ++i) s += double(x[r * in + i]) * double(W[o * in + i]);
            worst = std::max(worst, std::fabs(double(y[r * out + o]) - s));
        }
    CHECK(worst <= tolerance<T>(in), "%s forward %zux%zux%zu bias=%d: error %g", tn, rows, in, out, int(bias), worst);

    std::vector<T> gx = gx0;
    gemm::grad_input(gy.data(), W.data(), gx.data(), rows, in, out, 0, rows);
    worst = 0;
    for (size_t r = 0; r < rows; ++r)
        for (size_t i = 0; i < in; ++i) {
            double s = gx0[r * in + i];
            for (size_t o = 0; o < out; ++o) s += double(gy[r * out + o]) * double(W[o * in + i]);
            worst = std::max(worst, std::fabs(double(gx[r * in + i]) - s));
        }
    CHECK(worst <= tolerance<T>(out), "%s grad_input %zux%zux%zu: error %g", tn, rows, in, out, worst);

    std::vector<T> gW = gW0, gb = gb0;
    gemm::grad_weight(gy.data(), x.data(), gW.data(), bias ? gb.data() : nullptr, rows, in, out, 0, out);
    worst = 0;
    double worst_b = 0;
    for (size_t o = 0; o < out; ++o) {
        for (size_t i = 0; i < in; ++i) {
            double s = gW0[o * in + i];
            for (size_t r = 0; r < rows; ++r) s += double(gy[r * out + o]) * double(x[r * in + i]);
            worst = std::max(worst, std::fabs(double(gW[o * in + i]) - s));
        }
        double sb = gb0[o];
        for (size_t r = 0; r < rows; ++r) sb += double(gy[r * out + o]);
        worst_b = std::max(worst_b, std::fabs(double(gb[o]) - sb));
        if (!bias) CHECK(gb[o] == gb0[o], "%s grad_weight touched gb without a bias", tn);
    }
    CHECK(worst <= tolerance<T>(rows), "%s grad_weight %zux%zux%zu: error %g", tn, rows, in, out, worst);
    if (bias) CHECK(worst_b <= tolerance<T>(rows), "%s grad bias %zux%zux%zu: error %g", tn, rows, in, out, worst_b);

    // ---- sub-range splits give the same bits as the whole
    std::uniform_int_distribution<size_t> cut_o(0, out), cut_r(0, rows);
    for (int trial = 0; trial < 3; ++trial) {
        size_t c1 = cut_o(rng), c2 = cut_o(rng);
        if (c1 > c2) std::swap(c1, c2);
        const size_t ocuts[4] = {0, c1, c2, out};
        std::vector<T> ys(rows * out, T(-7)), gWs = gW0, gbs = gb0;
        for (int p = 0; p < 3; ++p) {
            std::vector<T> s(gemm::forward_scratch(rows, in, out, ocuts[p], ocuts[p + 1]) + 1);
            gemm::forward(x.data(), W.data(), bp, ys.data(), rows, in, out, ocuts[p], ocuts[p + 1], s.data());
            gemm::grad_weight(gy.data(), x.data(), gWs.data(), bias ? gbs.data() : nullptr, rows, in, out, ocuts[p],
                              ocuts[p + 1]);
        }
        CHECK(same_bits(ys, y), "%s forward split at %zu,%zu of %zux%zux%zu differs", tn, c1, c2, rows, in, out);
        CHECK(same_bits(gWs, gW), "%s grad_weight split at %zu,%zu of %zux%zux%zu differs", tn, c1, c2, rows, in, out);
        CHECK(same_bits(gbs, gb), "%s grad bias split differs", tn);

        size_t r1 = cut_r(rng), r2 = cut_r(rng);
        if (r1 > r2) std::swap(r1, r2);
        const size_t rcuts[4] = {0, r1, r2, rows};
        std::vector<T> gxs = gx0;
        for (int p = 0; p < 3; ++p)
            gemm::grad_input(gy.data(), W.data(), gxs.data(), rows, in, out, rcuts[p], rcuts[p + 1]);
        CHECK(same_bits(gxs, gx), "%s grad_input split at %zu,%zu of %zux%zux%zu differs", tn, r1, r2, rows, in, out);

        std::uniform_int_distribution<size_t> cut_i(0, in);
        size_t i1 = cut_i(rng), i2 = cut_i(rng);
        if (i1 > i2) std::swap(i1, i2);
        const size_t icuts[4] = {0, i1, i2, in};
        std::vector<T> gxc = gx0;
        for (int p = 0; p < 3; ++p)
            gemm::grad_input(gy.data(), W.data(), gxc.data(), rows, in, out, 0, rows, icuts[p], icuts[p + 1]);
        CHECK(same_bits(gxc, gx), "%s grad_input column split at %zu,%zu of %zux%zux%zu differs", tn, i1, i2, rows, in,
              out);

        // add = false over the same column blocks: garbage in gx is never read, and the result
        // has the bits of the sum into a zeroed gx
        std::vector<T> zeroed(rows * in, T(0)), written(rows * in, T(-3.5));
        gemm::grad_input(gy.data(), W.data(), zeroed.data(), rows, in, out, 0, rows);
        for (int p = 0; p < 3; ++p)
            gemm::grad_input(gy.data(), W.data(), written.data(), rows, in, out, 0, rows, icuts[p], icuts[p + 1],
                             false);
        CHECK(same_bits(written, zeroed), "%s grad_input add=false split at %zu,%zu of %zux%zux%zu differs", tn, i1, i2,
              rows, in, out);
    }
}

// The kernels' promise beyond the split: grad_input and grad_weight are the chain of fused
// multiply-adds in index order (forward too, from the bias, unless it takes dot products), so one
// element does not depend on its neighbours or on the tile it fell in. Checked against
// std::fma where the build uses hardware FMA, else against the same chain without fusion.
using bt::simd::madd;

template <typename T>
static void check_chain_order(size_t rows, size_t in, size_t out) {
    const char* tn = std::is_same_v<T, float> ? "float" : "double";
    auto x = random_vec<T>(rows * in), W = random_vec<T>(out * in), b = random_vec<T>(out);
    auto gy = random_vec<T>(rows * out), gx = random_vec<T>(rows * in), gW = random_vec<T>(out * in);
    auto gx_ref = gx, gW_ref = gW;
    for (size_t r = 0; r < rows; ++r)
        for (size_t i = 0; i < in; ++i)
            for (size_t o = 0; o < out; ++o)
                gx_ref[r * in + i] = madd(gy[r * out + o], W[o * in + i], gx_ref[r * in + i]);
    for (size_t o = 0; o < out; ++o)
        for (size_t i = 0; i < in; ++i)
            for (size_t r = 0; r < rows; ++r)
                gW_ref[o * in + i] = madd(gy[r * out + o], x[r * in + i], gW_ref[o * in + i]);
    gemm::grad_input(gy.data(), W.data(), gx.data(), rows, in, out, 0, rows);
    gemm::grad_weight(gy.data(), x.data(), gW.data(), static_cast<T*>(nullptr), rows, in, out, 0, out);
    CHECK(same_bits(gx, gx_ref), "%s grad_input %zux%zux%zu is not the fma chain over o", tn, rows, in, out);
    CHECK(same_bits(gW, gW_ref), "%s grad_weight %zux%zux%zu is not the fma chain over r", tn, rows, in, out);
    if (!gemm::forward_by_dots(rows, in, out)) {
        std::vector<T> y(rows * out), y_ref(rows * out);
        for (size_t r = 0; r < rows; ++r)
            for (size_t o = 0; o < out; ++o) {
                T s = b[o];
                for (size_t i = 0; i < in; ++i) s = madd(x[r * in + i], W[o * in + i], s);
                y_ref[r * out + o] = s;
            }
        std::vector<T> scratch(gemm::forward_scratch(rows, in, out, 0, out));
        gemm::forward(x.data(), W.data(), b.data(), y.data(), rows, in, out, 0, out, scratch.data());
        CHECK(same_bits(y, y_ref), "%s forward %zux%zux%zu is not the fma chain over i", tn, rows, in, out);
    }
}

// The SGD step fused into the weight gradient (grad_weight with a sink, and grad_input_sgd for
// fewer than kAxpyRows rows, whole or split by columns) against "gradient into a zeroed gW,
// then sgd_update", and gx against grad_input: bit for bit.
template <typename T>
static void check_fused_sgd(size_t rows, size_t in, size_t out, T wd) {
    const char* tn = std::is_same_v<T, float> ? "float" : "double";
    const T lr = T(0.1);
    auto x = random_vec<T>(rows * in), W = random_vec<T>(out * in), gy = random_vec<T>(rows * out);
    auto gx0 = random_vec<T>(rows * in);
    std::vector<T> gW(out * in, T(0)), gx_ref = gx0, W_ref = W;
    gemm::grad_input(gy.data(), W.data(), gx_ref.data(), rows, in, out, 0, rows);
    gemm::grad_weight(gy.data(), x.data(), gW.data(), static_cast<T*>(nullptr), rows, in, out, 0, out);
    for (size_t k = 0; k < W.size(); ++k) W_ref[k] = bt::sgd_update(W[k], gW[k], lr, wd);
    // written rather than added (gw_add = false), over stale contents, in two row ranges: the
    // sums into a zeroed gW
    std::vector<T> gW_w(out * in, T(-3));
    const size_t cut = std::min(out, size_t(16));
    gemm::grad_weight(gy.data(), x.data(), gW_w.data(), static_cast<T*>(nullptr), rows, in, out, 0, cut,
                      static_cast<const bt::SgdSink<T>*>(nullptr), false);
    gemm::grad_weight(gy.data(), x.data(), gW_w.data(), static_cast<T*>(nullptr), rows, in, out, cut, out,
                      static_cast<const bt::SgdSink<T>*>(nullptr), false);
    CHECK(same_bits(gW_w, gW), "%s grad_weight written %zux%zux%zu differs from the sum into zeros", tn, rows, in, out);
    auto W_a = W;
    const bt::SgdSink<T> sink_a{W_a.data(), lr, wd};
    const size_t mid = std::min(out, size_t(16));
    gemm::grad_weight(gy.data(), x.data(), static_cast<T*>(nullptr), static_cast<T*>(nullptr), rows, in, out, 0, mid,
                      &sink_a);
    gemm::grad_weight(gy.data(), x.data(), static_cast<T*>(nullptr), static_cast<T*>(nullptr), rows, in, out, mid, out,
                      &sink_a);
    CHECK(same_bits(W_a, W_ref), "%s grad_weight+sgd %zux%zux%zu (wd %g) differs from gradient then step", tn, rows, in,
          out, double(wd));
    if (rows >= gemm::kAxpyRows) return;
    for (size_t cut : {in, std::min(in, size_t(16)), std::min(in, size_t(48))}) {
        auto W_b = W, gx = gx0;
        const bt::SgdSink<T> sink_b{W_b.data(), lr, wd};
        gemm::grad_input_sgd(gy.data(), x.data(), gx.data(), rows, in, out, 0, cut, sink_b);
        gemm::grad_input_sgd(gy.data(), x.data(), gx.data(), rows, in, out, cut, in, sink_b);
        CHECK(same_bits(W_b, W_ref), "%s grad_input_sgd %zux%zux%zu cut %zu: W differs", tn, rows, in, out, cut);
        CHECK(same_bits(gx, gx_ref), "%s grad_input_sgd %zux%zux%zu cut %zu: gx differs", tn, rows, in, out, cut);
    }
}

// The operand moves (the scratch transpose and the packing of B given transposed) against their
// definitions element by element, over ragged sizes and padded leading dimensions: every element
// lands where it belongs, and nothing outside the result is written.
template <typename T>
static void check_moves() {
    const T sentinel = T(-12345);
    constexpr size_t NR = gemm::kNV * bt::simd::Simd<T>::W;
    for (size_t rows : {1, 3, 15, 16, 17, 33, 64, 70})
        for (size_t cols : {1, 5, 16, 17, 40, 100}) {
            const size_t lds = cols + rows % 3, ld = rows + cols % 2;
            const std::vector<T> src = random_vec<T>(rows * lds);
            std::vector<T> dst(cols * ld, sentinel);
            gemm::transpose(src.data(), rows, cols, lds, dst.data(), ld);
            bool ok = true;
            for (size_t c = 0; c < cols; ++c)
                for (size_t r = 0; r < ld; ++r) ok &= dst[c * ld + r] == (r < rows ? src[r * lds + c] : sentinel);
            CHECK(ok, "transpose %zux%zu (lds %zu, ld %zu)", rows, cols, lds, ld);
            // B is K x N (K = cols, N = rows), given as bt (N x K, leading dimension lds)
            const size_t K = cols, N = rows, panels = (N + NR - 1) / NR, stride = gemm::panel_stride<T>(K);
            std::vector<T> packed(panels * stride, sentinel);
            gemm::pack_panels_transposed(src.data(), lds, K, N, packed.data());
            ok = true;
            for (size_t p = 0; p < panels; ++p)
                for (size_t k = 0; k < K; ++k)
                    for (size_t c = 0; c < NR; ++c) {
                        const size_t n = p * NR + c;
                        ok &= packed[p * stride + k * NR + c] == (n < N ? src[n * lds + k] : sentinel);
                    }
            CHECK(ok, "pack_panels_transposed K=%zu N=%zu (ldb %zu)", K, N, lds);
        }
}

// The optimizer steps with streaming stores (a step split across threads: write_blocks) against
// the same steps with plain ones, element by element, for every option: from every start
// offset within a cache line, over lengths around the vector width and the 1 KiB block; the
// buffers (momentum, moments) alike, and nothing outside the span written.
template <typename T>
static void check_streaming_steps() {
    const T sentinel = T(-12345);
    for (size_t off = 0; off < 17; ++off)
        for (size_t n : {0, 1, 7, 17, 100, 255, 256, 257, 600, 1100}) {
            const std::vector<T> w0 = random_vec<T>(n), g = random_vec<T>(n);
            const std::vector<double> m0 = random_vec<double>(n), v0 = [&] {
                std::vector<double> v = random_vec<double>(n);
                for (double& e : v) e = std::abs(e);
                return v;
            }();
            auto run = [&](bool stream, auto&& step) {
                std::vector<T> w(off + n + 20, sentinel);
                std::copy(w0.begin(), w0.end(), w.begin() + off);
                std::vector<double> m(m0), v(v0);
                step(w.data() + off, m.data(), v.data(), stream);
                return std::make_tuple(w, m, v);
            };
            auto same = [&](const char* what, auto&& step) {
                const auto [wa, ma, va] = run(false, step);
                const auto [wb, mb, vb] = run(true, step);
                CHECK(same_bits(wa, wb) && same_bits(ma, mb) && same_bits(va, vb), "%s streaming: offset %zu n %zu",
                      what, off, n);
            };
            for (double mu : {0.0, 0.9})
                for (double wd : {0.0, 0.01})
                    for (bool nesterov : {false, true})
                        for (bool first : {false, true}) {
                            if (nesterov && mu == 0.0) continue;
                            const bt::SgdConfig c{0.1, mu, wd, 0.0, nesterov};
                            same("sgd_step", [&](T* w, double* m, double*, bool s) {
                                bt::sgd_step(w, g.data(), m, n, c, first, s);
                            });
                        }
            for (bool decoupled : {false, true}) {
                const bt::AdamConfig c{0.01, 0.9, 0.999, 1e-8, 0.01, decoupled};
                same("adam_step",
                     [&](T* w, double* m, double* v, bool s) { bt::adam_step(w, g.data(), m, v, n, c, 3, s); });
            }
        }
}

template <typename T>
static void run_all() {
    check_moves<T>();
    check_streaming_steps<T>();
    // Every small shape exhaustively (tile tails in every dimension), then odd and wide ones
    // up to 1100 and the shapes of the workloads (W4: 1 or 64 rows, 1024 -> e -> 27; W5: rows
    // 8..512 over widths 24/72/96/65).
    for (size_t rows = 1; rows <= 19; ++rows)
        for (size_t in = 1; in <= 37; in += (in < 20 ? 1 : 5))
            for (size_t out = 1; out <= 37; out += (out < 20 ? 1 : 6))
                check_shape<T>(rows, in, out, (rows + in + out) % 2);
    const size_t big[][3] = {{1, 1024, 4},   {1, 1024, 1024}, {64, 1024, 1024}, {64, 1024, 128}, {64, 128, 27},
                             {2, 1100, 33},  {3, 1, 1100},    {64, 24, 72},     {8, 24, 72},     {512, 24, 96},
                             {512, 96, 24},  {17, 65, 24},    {8, 24, 65},      {100, 1100, 3},  {5, 3, 1100},
                             {33, 257, 129}, {64, 4, 27},     {64, 1024, 4},    {1, 4, 27},      {4, 1100, 1}};
    for (auto& s : big) {
        check_shape<T>(s[0], s[1], s[2], true);
        check_shape<T>(s[0], s[1], s[2], false);
    }
    for (auto& s : big)
        if (s[0] * s[1] * s[2] <= 5000000) check_chain_order<T>(s[0], s[1], s[2]);
    for (size_t rows = 1; rows <= 11; ++rows) check_chain_order<T>(rows, 7 + 3 * rows, 41 - 2 * rows);
    // A forward that reads W transposed, too large to pack its panels straight from W's rows:
    // it transposes W into scratch first (every smaller one above packs directly).
    check_chain_order<T>(200, 600, 240);
    for (size_t rows : {1, 2, 3, 4, 9, 64})
        for (auto [in, out] : {std::pair<size_t, size_t>{1, 1}, {5, 3}, {37, 17}, {100, 27}, {1024, 64}, {24, 65}})
            for (T wd : {T(0), T(0.01)}) check_fused_sgd<T>(rows, in, out, wd);
}

// `test_gemm float` or `test_gemm double` checks one element type (CMake registers the two as
// separate tests, so that ctest -j runs them side by side); no argument checks both.
int main(int argc, char** argv) {
    const std::string only = argc > 1 ? argv[1] : "";
    if (only != "" && only != "float" && only != "double") {
        std::fprintf(stderr, "usage: test_gemm [float|double]\n");
        return 2;
    }
    if (only != "double") run_all<float>();
    if (only != "float") run_all<double>();
    std::printf("test_gemm (%s kernels, %dx%d tile): %ld checks, %d failures\n", bt::simd::isa, bt::gemm::kMR,
                bt::gemm::kNV, checks, failures);
    return failures == 0 ? 0 : 1;
}
