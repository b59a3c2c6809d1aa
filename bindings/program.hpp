// Recorded programs in the binding layer: the Program object's payload, and the replays'
// arguments as they arrive from Python (buffers, and batches of samples read id by id).
#pragma once
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "../csrc/replay_driver.hpp"
#include "common.hpp"

namespace btpy {

// The payload of a Python Program: the program with its workspaces (csrc/replay_driver.hpp),
// and the arena it was traced in.
struct ProgramBox {
    nb::object owner;  // the Python Arena
    bt::ArenaBase* arena;
    std::variant<bt::Replayer<float>, bt::Replayer<double>> run;
    // What keeps a block function compiled from this program loaded (burtorch.native's state for
    // it, which holds the library), as long as the program lives; None before any.
    nb::object native_state = nb::none();

    // f(bt::Replayer<T>&) by the arena's dtype.
    template <typename F>
    decltype(auto) visit(F&& f) {
        if (arena->dtype() == bt::DType::float64) return f(std::get<bt::Replayer<double>>(run));
        return f(std::get<bt::Replayer<float>>(run));
    }
    template <typename F>
    decltype(auto) visit_prog(F&& f) const {
        if (arena->dtype() == bt::DType::float64) return f(std::get<bt::Replayer<double>>(run).prog);
        return f(std::get<bt::Replayer<float>>(run).prog);
    }

    // Raises unless every node the program reads below its trace is still the one it traced.
    void check_alive() const {
        visit_prog([&](const auto& P) {
            for (const bt::ExternalSpan& e : P.ext)
                if (!arena->alive(e.first + e.len - 1, e.gen)) {
                    PyErr_Format(StaleValueError,
                                 "this program reads %s (and %u nodes after it), which a rewind discarded since it was "
                                 "traced; trace it again",
                                 arena->describe_node(e.first).c_str(), unsigned(e.len - 1));
                    throw nb::python_error();
                }
        });
    }
};

// ---- replay arguments: numbers arrive through the buffer protocol (numpy arrays, array.array,
// memoryview, bytes) or, for ids, as Python sequences, so the library needs numpy only where the
// user hands numpy in or asks for numpy out.

// A C-contiguous buffer exported by any object, released when it goes out of scope.
class Buffer {
public:
    enum class Kind { f32, f64, sint, uint };
    Buffer(nb::handle h, bool writable, const char* what) {
        const int flags = PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(h.ptr(), &view_, flags) < 0) {
            PyErr_Clear();
            throw nb::type_error((std::string(what) + " must be a C-contiguous " + (writable ? "writable " : "") +
                                  "buffer (a numpy array, array.array or memoryview), got " + Py_TYPE(h.ptr())->tp_name)
                                     .c_str());
        }
        held_ = true;
        const char* f = view_.format ? view_.format : "B";
        if (*f == '@' || *f == '=' || *f == '<') ++f;
        const char c = *f;
        const bool one_char = c != 0 && f[1] == 0;
        if (one_char && c == 'd' && view_.itemsize == 8)
            kind_ = Kind::f64;
        else if (one_char && c == 'f' && view_.itemsize == 4)
            kind_ = Kind::f32;
        else if (one_char && std::strchr("bhilqn", c))
            kind_ = Kind::sint;
        else if (one_char && std::strchr("BHILQN", c))
            kind_ = Kind::uint;
        else
            throw nb::type_error((std::string(what) + ": unsupported element format '" + f + "'").c_str());
    }
    ~Buffer() {
        if (held_) PyBuffer_Release(&view_);
    }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;

    Kind kind() const { return kind_; }
    int ndim() const { return view_.ndim; }
    size_t items() const { return size_t(view_.len / view_.itemsize); }
    // Rows and columns of a 2-D buffer; a 1-D buffer is one column.
    size_t rows() const { return view_.ndim >= 1 ? size_t(view_.shape[0]) : 1; }
    size_t cols() const { return view_.ndim == 2 ? size_t(view_.shape[1]) : 1; }
    void* data() const { return view_.buf; }
    bool is_integer() const { return kind_ == Kind::sint || kind_ == Kind::uint; }
    // f(p): p the elements as a pointer to their C type (integer buffers only).
    template <class F>
    void with_integers(F&& f) const {
        const bool s = kind_ == Kind::sint;
        switch (view_.itemsize) {
            case 1: return s ? f(static_cast<const int8_t*>(view_.buf)) : f(static_cast<const uint8_t*>(view_.buf));
            case 2: return s ? f(static_cast<const int16_t*>(view_.buf)) : f(static_cast<const uint16_t*>(view_.buf));
            case 4: return s ? f(static_cast<const int32_t*>(view_.buf)) : f(static_cast<const uint32_t*>(view_.buf));
            default: return s ? f(static_cast<const int64_t*>(view_.buf)) : f(static_cast<const uint64_t*>(view_.buf));
        }
    }
    // Element i as a signed 64-bit integer (integer buffers only; unsigned values past INT64_MAX
    // come out negative and fail the bound checks).
    int64_t integer(size_t i) const {
        const char* p = static_cast<const char*>(view_.buf) + i * view_.itemsize;
        const bool s = kind_ == Kind::sint;
        switch (view_.itemsize) {
            case 1:
                return s ? int64_t(*reinterpret_cast<const int8_t*>(p)) : int64_t(*reinterpret_cast<const uint8_t*>(p));
            case 2:
                return s ? int64_t(*reinterpret_cast<const int16_t*>(p))
                         : int64_t(*reinterpret_cast<const uint16_t*>(p));
            case 4:
                return s ? int64_t(*reinterpret_cast<const int32_t*>(p))
                         : int64_t(*reinterpret_cast<const uint32_t*>(p));
            default: return s ? *reinterpret_cast<const int64_t*>(p) : int64_t(*reinterpret_cast<const uint64_t*>(p));
        }
    }

private:
    Py_buffer view_{};
    bool held_ = false;
    Kind kind_ = Kind::uint;
};

template <typename T>
constexpr Buffer::Kind kind_of() {
    return std::is_same_v<T, double> ? Buffer::Kind::f64 : Buffer::Kind::f32;
}

// A writable buffer of `count` elements of T (or null for None).
template <typename T>
struct Output {
    std::unique_ptr<Buffer> buf;
    T* data = nullptr;
    Output(nb::handle h, size_t count, const char* what) {
        if (h.is_none()) return;
        buf = std::make_unique<Buffer>(h, true, what);
        if (buf->kind() != kind_of<T>())
            throw nb::type_error(
                (std::string(what) + " must hold " + (std::is_same_v<T, double> ? "float64" : "float32")).c_str());
        if (buf->items() != count)
            throw nb::value_error((std::string(what) + ": expected " + std::to_string(count) + " elements, got " +
                                   std::to_string(buf->items()))
                                      .c_str());
        data = static_cast<T*>(buf->data());
    }
};

// The ids of a batch of samples of `shape`: a list of samples (each a sequence of id parts: an
// int, or a sequence of shape[q] ints), or an ArrayBatch's parts, a tuple of C-contiguous integer
// buffers with one row per sample (a 1-D part holds an id per sample, a 2-D one a row of ids),
// read with no Python object per id. The batch source of bt::pack_chunks (batch.cpp).
class BatchIds {
public:
    BatchIds(nb::handle batch, const std::vector<int64_t>& shape);
    size_t size() const { return n_; }
    // Sample s's ids, part by part, into `out`; false when it has another shape (a list's only).
    bool read(size_t s, std::vector<int64_t>& out) const;
    bool arrays() const { return !parts_.empty(); }
    // An ArrayBatch's part q for samples [s, s + k): their k w ids, in order, into dst, each
    // checked against bound[i] (sample s + i / w, at position pos0 + i of its program's ids).
    // One pass over a block of the array, with no per-sample step.
    void read_block(size_t q, size_t s, size_t k, const uint32_t* bound, uint32_t* dst, size_t pos0) const;
    // Whether a list was resized meanwhile (an id's __index__ may run Python code).
    void check_unchanged() const {
        if (parts_.empty() && size_t(PyList_GET_SIZE(batch_.ptr())) != n_)
            throw nb::value_error("the batch changed during the replay");
    }

private:
    nb::handle batch_;
    const std::vector<int64_t>& shape_;
    std::vector<std::unique_ptr<Buffer>> parts_;
    size_t n_ = 0;
};

// One id read from a Python object (an int or anything with __index__).
int64_t id_of(PyObject* o);

}  // namespace btpy
