// Compressors over contiguous float32/float64 numpy buffers (csrc/compress.hpp), GIL released.
// The Python classes of burtorch.fl.compressors allocate the outputs and keep the accounting;
// these functions only check shapes and run the O(d) loops.
#include <nanobind/ndarray.h>

#include "../csrc/compress.hpp"
#include "common.hpp"

namespace btpy {
namespace {

template <typename T>
using In = nb::ndarray<const T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
template <typename T>
using Out = nb::ndarray<T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Indices = nb::ndarray<int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

void need(bool ok, const char* what) {
    if (!ok) throw nb::value_error(what);
}

void check_k(size_t d, size_t k) {
    if (d == 0) throw nb::value_error("compress: empty input");
    if (k < 1 || k > d)
        throw nb::value_error(
            ("compress: k must be in [1, " + std::to_string(d) + "], got " + std::to_string(k)).c_str());
}

template <typename T>
void define(nb::module_& m) {
    m.def(
        "rand_k",
        [](In<T> x, size_t k, uint64_t seed, Indices idx, Out<T> val) {
            const size_t d = x.shape(0);
            check_k(d, k);
            need(idx.shape(0) == k && val.shape(0) == k, "rand_k: idx and val must have k elements");
            nb::gil_scoped_release unlocked;
            bt::compress::rand_k(x.data(), d, k, seed, idx.data(), val.data());
        },
        nb::arg("x"), nb::arg("k"), nb::arg("seed"), nb::arg("idx"), nb::arg("val"));

    m.def(
        "top_k",
        [](In<T> x, size_t k, Indices idx, Out<T> val) {
            const size_t d = x.shape(0);
            check_k(d, k);
            need(d <= UINT32_MAX, "top_k: more than 2^32 coordinates");
            need(idx.shape(0) == k && val.shape(0) == k, "top_k: idx and val must have k elements");
            nb::gil_scoped_release unlocked;
            bt::compress::top_k(x.data(), d, k, idx.data(), val.data());
        },
        nb::arg("x"), nb::arg("k"), nb::arg("idx"), nb::arg("val"));

    m.def(
        "top_k_diff",
        [](In<T> a, In<T> b, size_t k, Indices idx, Out<T> val) {
            const size_t d = a.shape(0);
            need(b.shape(0) == d, "top_k_diff: a and b must have the same length");
            check_k(d, k);
            need(d <= UINT32_MAX, "top_k_diff: more than 2^32 coordinates");
            need(idx.shape(0) == k && val.shape(0) == k, "top_k_diff: idx and val must have k elements");
            nb::gil_scoped_release unlocked;
            bt::compress::top_k_diff(a.data(), b.data(), d, k, idx.data(), val.data());
        },
        nb::arg("a"), nb::arg("b"), nb::arg("k"), nb::arg("idx"), nb::arg("val"));

    m.def(
        "rand_seq_k",
        [](In<T> x, size_t k, uint64_t seed, Out<T> val) {
            const size_t d = x.shape(0);
            check_k(d, k);
            need(val.shape(0) == k, "rand_seq_k: val must have k elements");
            nb::gil_scoped_release unlocked;
            return bt::compress::rand_seq_k(x.data(), d, k, seed, val.data());
        },
        nb::arg("x"), nb::arg("k"), nb::arg("seed"), nb::arg("val"));

    m.def(
        "natural",
        [](In<T> x, uint64_t seed, Out<T> out) {
            need(out.shape(0) == x.shape(0), "natural: out must have the input's length");
            nb::gil_scoped_release unlocked;
            bt::compress::natural(x.data(), x.shape(0), seed, out.data());
        },
        nb::arg("x"), nb::arg("seed"), nb::arg("out"));

    m.def(
        "dither",
        [](In<T> x, unsigned s, uint64_t seed, Out<T> out) {
            need(s >= 1, "dither: s must be >= 1");
            need(out.shape(0) == x.shape(0), "dither: out must have the input's length");
            nb::gil_scoped_release unlocked;
            return bt::compress::dither(x.data(), x.shape(0), s, seed, out.data());
        },
        nb::arg("x"), nb::arg("s"), nb::arg("seed"), nb::arg("out"));
}

}  // namespace

void init_compress(nb::module_& m) {
    nb::module_ c =
        m.def_submodule("compress", "Gradient compressors over contiguous float buffers (O(d), GIL released).");
    define<double>(c);
    define<float>(c);
}

}  // namespace btpy
