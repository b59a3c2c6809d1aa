// Reading a batch's ids from Python: lists of samples (their parts read straight from the
// objects when they are exact ints, lists and tuples) and ArrayBatch buffers.
#include "program.hpp"

namespace btpy {

// One id read from a Python object (an int or anything with __index__).
int64_t id_of(PyObject* o) {
    long long v;
    if (PyLong_Check(o)) {
        v = PyLong_AsLongLong(o);
    } else {
        PyObject* i = PyNumber_Index(o);
        if (!i) {
            PyErr_Clear();
            throw nb::type_error((std::string("ids must be ints, got ") + Py_TYPE(o)->tp_name).c_str());
        }
        v = PyLong_AsLongLong(i);
        Py_DECREF(i);
    }
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;  // beyond int64: out of range for any table
    }
    return v;
}

// The usual sample, a tuple or list of exact ints and of lists (or tuples) of exact ints, read
// straight from the objects' item arrays: no new references, no protocol calls (nothing here runs
// Python code, so the batch cannot change meanwhile). 1: read; 0: not of `shape`; -1: a part of
// another kind (a numpy int, a range, ...), which the general path below reads.
// An exact int's value, read inline when it fits one digit (every id of a real vocabulary): the
// call into libpython per id was a sizeable part of a small model's step. Beyond int64: -1,
// out of range for any table.
static inline int64_t exact_int_value(PyObject* o) {
#if PY_VERSION_HEX >= 0x030C0000
    if (PyUnstable_Long_IsCompact(reinterpret_cast<PyLongObject*>(o)))
        return int64_t(PyUnstable_Long_CompactValue(reinterpret_cast<PyLongObject*>(o)));
#else
    const Py_ssize_t size = Py_SIZE(o);  // the digit count, negative for a negative int
    if (size == 0) return 0;
    if (size == 1) return int64_t(reinterpret_cast<PyLongObject*>(o)->ob_digit[0]);
    if (size == -1) return -int64_t(reinterpret_cast<PyLongObject*>(o)->ob_digit[0]);
#endif
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    return overflow ? -1 : v;
}

static int read_plain_sample_ids(PyObject* sample, const std::vector<int64_t>& shape, std::vector<int64_t>& out) {
    if (!PyList_CheckExact(sample) && !PyTuple_CheckExact(sample)) return -1;
    if (size_t(PySequence_Fast_GET_SIZE(sample)) != shape.size()) return 0;
    PyObject** parts = PySequence_Fast_ITEMS(sample);
    auto plain_id = [&out](PyObject* o) {
        if (!PyLong_CheckExact(o)) return false;
        out.push_back(exact_int_value(o));
        return true;
    };
    for (size_t q = 0; q < shape.size(); ++q) {
        PyObject* part = parts[q];
        if (shape[q] == 0) {
            if (!plain_id(part)) return -1;
            continue;
        }
        if (!PyList_CheckExact(part) && !PyTuple_CheckExact(part)) return -1;
        if (PySequence_Fast_GET_SIZE(part) != shape[q]) return 0;
        PyObject** items = PySequence_Fast_ITEMS(part);
        for (int64_t t = 0; t < shape[q]; ++t)
            if (!plain_id(items[t])) return -1;
    }
    return 1;
}

// Whether an id part is one id (an int, or anything with __index__ that is not a sequence) rather
// than a sequence of ids. The one rule for a part's kind: sample_shape and the reads below use it.
static bool is_single_id(PyObject* part) { return !PySequence_Check(part) && PyIndex_Check(part); }

// One sample's ids, read into `out` part by part (an int part as one id, a sequence part as its
// shape[q] ids), when the sample has `shape` (per part: 0 for an int, L for a sequence of L
// ints); false, with `out` unspecified, when it has another shape. A part that is neither an
// int nor a sequence of ints raises TypeError.
// An id's __index__ may run Python code that changes the very lists being read (a sample list
// and its parts stay the same objects through PySequence_Fast): every item is read after
// checking the length again, and a change is a ValueError, never a read past the end.
static bool read_sample_ids(PyObject* sample, const std::vector<int64_t>& shape, std::vector<int64_t>& out) {
    out.clear();
    if (const int plain = read_plain_sample_ids(sample, shape, out); plain >= 0) return plain == 1;
    out.clear();  // a part of another kind: read the whole sample again
    nb::object parts = nb::steal(PySequence_Fast(sample, "a sample must be a sequence of id parts"));
    if (!parts.is_valid()) throw nb::python_error();
    if (size_t(PySequence_Fast_GET_SIZE(parts.ptr())) != shape.size()) return false;
    auto changed = [] { return nb::value_error("the batch changed during the replay"); };
    for (size_t q = 0; q < shape.size(); ++q) {
        if (size_t(PySequence_Fast_GET_SIZE(parts.ptr())) != shape.size()) throw changed();
        nb::object part = nb::borrow(PySequence_Fast_GET_ITEM(parts.ptr(), Py_ssize_t(q)));
        const bool scalar = is_single_id(part.ptr());
        if (shape[q] == 0) {
            if (!scalar) return false;
            out.push_back(id_of(part.ptr()));
            continue;
        }
        if (scalar || !PySequence_Check(part.ptr())) return false;
        nb::object seq = nb::steal(PySequence_Fast(part.ptr(), "an id part must be an int or a sequence of ints"));
        if (!seq.is_valid()) throw nb::python_error();
        if (PySequence_Fast_GET_SIZE(seq.ptr()) != shape[q]) return false;
        for (Py_ssize_t t = 0; t < shape[q]; ++t) {
            if (PySequence_Fast_GET_SIZE(seq.ptr()) != shape[q]) throw changed();
            nb::object id = nb::borrow(PySequence_Fast_GET_ITEM(seq.ptr(), t));
            out.push_back(id_of(id.ptr()));
        }
    }
    return true;
}

BatchIds::BatchIds(nb::handle batch, const std::vector<int64_t>& shape) : batch_(batch), shape_(shape) {
    if (PyList_Check(batch.ptr())) {
        n_ = size_t(PyList_GET_SIZE(batch.ptr()));
        return;
    }
    if (!PyTuple_Check(batch.ptr())) throw nb::type_error("batch must be a list of samples or an ArrayBatch");
    if (size_t(PyTuple_GET_SIZE(batch.ptr())) != shape.size())
        throw nb::value_error("an ArrayBatch must have one array per id part of the program's samples");
    for (size_t q = 0; q < shape.size(); ++q) {
        const Buffer& b = *parts_.emplace_back(
            std::make_unique<Buffer>(PyTuple_GET_ITEM(batch.ptr(), Py_ssize_t(q)), false, "an ArrayBatch part"));
        if (!b.is_integer()) throw nb::type_error("an ArrayBatch part must hold integers");
        if (shape[q] == 0 ? b.ndim() != 1 : b.ndim() != 2 || b.cols() != size_t(shape[q]))
            throw nb::value_error("an ArrayBatch part does not have the shape of the program's samples");
        if (q > 0 && b.rows() != n_) throw nb::value_error("the parts of an ArrayBatch must have one row per sample");
        n_ = b.rows();
    }
}

bool BatchIds::read(size_t s, std::vector<int64_t>& out) const {
    if (parts_.empty()) {
        if (s >= size_t(PyList_GET_SIZE(batch_.ptr()))) throw nb::value_error("the batch changed during the replay");
        nb::object sample = nb::borrow(PyList_GET_ITEM(batch_.ptr(), Py_ssize_t(s)));
        return read_sample_ids(sample.ptr(), shape_, out);
    }
    out.clear();
    for (size_t q = 0; q < parts_.size(); ++q) {
        const size_t w = shape_[q] > 0 ? size_t(shape_[q]) : 1;
        for (size_t t = 0; t < w; ++t) out.push_back(parts_[q]->integer(s * w + t));
    }
    return true;
}

void BatchIds::read_block(size_t q, size_t s, size_t k, const uint32_t* bound, uint32_t* dst, size_t pos0) const {
    const size_t w = shape_[q] > 0 ? size_t(shape_[q]) : 1, n = k * w;
    parts_[q]->with_integers([&](const auto* p) {
        p += s * w;
        bool ok = true;
        for (size_t i = 0; i < n; ++i) {
            const int64_t id = int64_t(p[i]);  // unsigned past INT64_MAX: negative, out of range
            ok &= id >= 0 && uint64_t(id) < bound[i];
            dst[i] = uint32_t(id);
        }
        if (!ok)
            for (size_t i = 0; i < n; ++i) bt::check_sample_id(int64_t(p[i]), bound[i], s + i / w, pos0 + i);
    });
}

// A sample's shape, the key of its program: per id part, 0 for one id, L for a sequence of L ids.
// The replays read samples of a given shape only, checking each against it (read_sample_ids).
static nb::tuple sample_shape(nb::handle sample) {
    nb::object parts = nb::steal(PySequence_Fast(sample.ptr(), "a sample must be a sequence of id parts"));
    if (!parts.is_valid()) throw nb::python_error();
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(parts.ptr());
    nb::object out = nb::steal(PyTuple_New(n));
    if (!out.is_valid()) throw nb::python_error();
    for (Py_ssize_t q = 0; q < n; ++q) {
        PyObject* part = PySequence_Fast_GET_ITEM(parts.ptr(), q);
        Py_ssize_t width = 0;
        if (PyList_CheckExact(part) || PyTuple_CheckExact(part))
            width = PySequence_Fast_GET_SIZE(part);
        else if (!PyLong_CheckExact(part) && !is_single_id(part)) {
            width = PyObject_Length(part);  // a sequence; anything else raises TypeError here
            if (width < 0) throw nb::python_error();
        }
        PyObject* w = PyLong_FromSsize_t(width);
        if (!w) throw nb::python_error();
        PyTuple_SET_ITEM(out.ptr(), q, w);
    }
    return nb::borrow<nb::tuple>(out);
}

void init_batch(nb::module_& m) {
    m.def("_sample_shape", &sample_shape, nb::arg("sample"),
          "The shape of a sample of id parts, as the replays read it: per part, 0 for one id (an int),\n"
          "L for a sequence of L ids.");
}

}  // namespace btpy
