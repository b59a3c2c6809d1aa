// The Arena, DType and Checkpoint types. The thread's arenas and the modes are in arena_scope.cpp.
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>

#include "arena.hpp"
#include "vector.hpp"

namespace btpy {

PyObject* g_arena_type = nullptr;

ArenaBox* box_of(PyObject* o) {
    if (!o || !PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(g_arena_type))) {
        PyErr_Format(PyExc_TypeError, "expected a burtorch.Arena, got %s", o ? Py_TYPE(o)->tp_name : "nothing");
        return nullptr;
    }
    return nb::inst_ptr<ArenaBox>(o);
}

// What holds the pins of slot idx: the node (op, label) and the Python types of its holders.
static nb::dict pin_holder(const bt::ArenaBase& a, uint32_t idx) {
    nb::dict d;
    d["node"] = idx;
    const int64_t r = a.record_of(idx);
    d["op"] = r < 0 ? "leaf" : bt::op_info(a.record(size_t(r)).op).name;
    const std::string* lab = a.label(idx);
    d["label"] = lab ? nb::object(nb::str(lab->c_str())) : nb::none();
    const auto [vectors, checkpoints] = a.fixed_pins_of(idx);
    nb::dict holders;
    const uint32_t values = a.pins_of(idx) - vectors - checkpoints;
    if (values) holders["Value"] = values;
    if (vectors) holders["Vector"] = vectors;  // a numpy view holds a Vector over what it shows
    if (checkpoints) holders["Checkpoint"] = checkpoints;
    d["holders"] = holders;
    return d;
}

// "node 7 (tanh, label 'h1') held by 1 Value": how the growth warning names what pins the top.
static std::string describe_pin(const bt::ArenaBase& a) {
    const size_t top = a.pinned_top();
    if (!top) return "";
    const uint32_t idx = uint32_t(top - 1);
    const int64_t r = a.record_of(idx);
    std::string s = "node " + std::to_string(idx) + " (" + (r < 0 ? "leaf" : bt::op_info(a.record(size_t(r)).op).name);
    if (const std::string* lab = a.label(idx)) s += ", label '" + *lab + "'";
    s += ") held by";
    const auto [vectors, checkpoints] = a.fixed_pins_of(idx);
    const uint32_t values = a.pins_of(idx) - vectors - checkpoints;
    const char* sep = " ";
    auto add = [&](uint32_t n, const char* what) {
        if (!n) return;
        s += sep + std::to_string(n) + " " + what + (n > 1 ? "s" : "");
        sep = ", ";
    };
    add(values, "Value");
    add(vectors, "Vector");
    add(checkpoints, "Checkpoint");
    return s;
}

// ---------------------------------------------------------------- growth without rewinds
void check_unbounded_growth(bt::ArenaBase* a) {
    // A loop that builds a graph per step and never rewinds keeps every step's nodes: warn once,
    // with the fix, when many sweeps ran and millions of nodes piled up without a rewind.
    // Reclamation and compaction reset the count: the warning only fires where something really
    // keeps the graphs alive, and then names it.
    if (a->growth_warned || a->sweeps_since_rewind() < 16 || a->slots_since_rewind() < (size_t(1) << 21)) return;
    a->growth_warned = true;
    const std::string why = describe_pin(*a);
    if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                         "burtorch: %zu nodes and %llu backward passes since this arena last gave nodes back: "
                         "every step's graph stays in memory. The highest live node is %s (a list of losses "
                         "kept for plotting pins every graph: keep loss.item() instead). Or take cp = "
                         "bt.checkpoint() after creating the parameters and call bt.rewind(cp) after each step "
                         "(or wrap each step in `with bt.scope():`).",
                         a->slots_since_rewind(), (unsigned long long)a->sweeps_since_rewind(), why.c_str()) < 0)
        PyErr_Clear();  // warnings turned into errors are not worth failing a backward for
}

static nb::dict arena_stats(const ArenaBox& b) {
    const bt::ArenaBase& a = *b.core;
    nb::dict bytes;
    const size_t vs = a.value_size();
    bytes["values"] = a.num_slots() * vs;
    bytes["grads"] = a.num_slots() * vs;
    bytes["generations"] = a.bytes_gen();
    bytes["sweep_bounds"] = a.bytes_lo();
    bytes["records"] = a.bytes_records();
    bytes["args"] = a.bytes_args();
    bytes["labels"] = a.label_bytes();
    bytes["pins"] = a.bytes_pins();
    nb::dict d;
    d["dtype"] = dtype_name(a.dtype());
    d["nodes"] = a.num_slots();
    d["records"] = a.num_records();
    d["args"] = a.num_args();
    d["labels"] = a.num_labels();
    d["bytes"] = bytes;
    d["bytes_in_use"] = a.num_slots() * 2 * vs + a.bytes_gen() + a.bytes_lo() + a.bytes_records() + a.bytes_args() +
                        a.label_bytes() + a.bytes_pins();
    d["bytes_committed"] = a.committed_bytes();
    d["epoch"] = a.epoch();
    d["rewinds"] = a.rewinds();
    // What keeps the arena from shrinking: the highest slot a live handle pins (-1: none).
    const size_t top = a.pinned_top();
    d["pinned_top"] = int64_t(top) - 1;
    d["pins_at_top"] = top ? a.pins_of(uint32_t(top - 1)) : 0u;
    d["reclaims"] = a.reclaims();
    d["reclaimed_nodes"] = a.reclaimed_slots();
    d["compactions"] = a.compactions();
    d["relocations_pending"] = a.num_relocations();
    d["compaction_refused"] = a.compaction_refused();
    d["pinned_by"] = top ? pin_holder(a, uint32_t(top - 1)) : nb::dict();
    return d;
}

// Checks [first, last) against the arena and returns a pointer to the values or grads there.
static char* range_ptr(ArenaBox& b, int64_t first, int64_t last, const std::string& what) {
    const int64_t n = static_cast<int64_t>(b.core->num_slots());
    if (first < 0 || last < first || last > n)
        throw nb::index_error(("node range [" + std::to_string(first) + ", " + std::to_string(last) +
                               ") is outside the arena's " + std::to_string(n) + " nodes")
                                  .c_str());
    const bool grads = what == "grads";
    if (!grads && what != "values")
        throw nb::value_error(("what must be 'values' or 'grads', got '" + what + "'").c_str());
    char* base =
        dispatch(b.core.get(), [&](auto& A) { return reinterpret_cast<char*>(grads ? A.grads() : A.values()); });
    return base + first * static_cast<int64_t>(b.core->value_size());
}

void init_arena(nb::module_& m) {
    nb::enum_<bt::DType>(m, "DType", "Floating-point type of an arena's slots.")
        .value("float32", bt::DType::float32)
        .value("float64", bt::DType::float64)
        .value("bfloat16", bt::DType::bfloat16)
        .value("float16", bt::DType::float16);
    nb::object dt = m.attr("DType");
    for (int k = 0; k < kDTypes; ++k) {
        const char* name = dtype_name(static_cast<bt::DType>(k));
        m.attr(name) = dt.attr(name);
        g_dtype_objects[k] = m.attr(name).ptr();
        Py_INCREF(g_dtype_objects[k]);
    }

    nb::class_<Checkpoint>(m, "Checkpoint", "A position in one or two arenas; rewind(cp) truncates them back to it.")
        .def_prop_ro(
            "nodes",
            [](const Checkpoint& c) {
                size_t n = 0;
                for (int k = 0; k < 2; ++k)
                    if (c.arena[k].is_valid()) n += c.mark[k].slots;
                return n;
            },
            "Total nodes below this checkpoint.")
        .def("__repr__", [](const Checkpoint& c) {
            std::string s = "Checkpoint(";
            for (int k = 0; k < 2; ++k)
                if (c.arena[k].is_valid())
                    s += std::string(k ? " float64" : "float32") + ": " + std::to_string(c.mark[k].slots) + " nodes";
            return s + ")";
        });

    nb::class_<ArenaBox>(m, "Arena",
                         "Contiguous storage of nodes (values, grads) and records of one dtype.\n\n"
                         "`with arena:` makes it the thread's current arena for its dtype.")
        .def(
            "__init__",
            [](ArenaBox* self, nb::handle dtype, int64_t capacity) {
                bt::DType d = bt::DType::float64;
                if (!dtype.is_none() && !parse_dtype(dtype.ptr(), &d)) throw nb::python_error();
                if (capacity < 0) throw nb::value_error("Arena capacity must be >= 0 (0: the default, 2**28 nodes)");
                bt::Capacity cap;
                if (capacity) {
                    if (capacity > (int64_t(1) << 31))
                        throw nb::value_error("Arena capacity is limited to 2**31 nodes");
                    cap.slots = size_t(capacity);
                    cap.records = size_t(capacity);
                    cap.args = 2 * size_t(capacity);
                }
                new (self) ArenaBox(d, cap);
            },
            nb::arg("dtype") = nb::none(), nb::arg("capacity") = 0,
            nb::sig("def __init__(self, dtype: DType | str | None = None, capacity: int = 0) -> None"),
            "Arena(dtype=float64, capacity=0): capacity is the maximum number of nodes (address space\n"
            "is reserved for it, memory is committed as the arena grows); 0 means 2**28.")
        .def_prop_ro(
            "dtype", [](const ArenaBox& b) { return nb::borrow(g_dtype_objects[int(b.core->dtype())]); },
            nb::sig("def dtype(self) -> DType"))
        .def_prop_ro("num_nodes", [](const ArenaBox& b) { return b.core->num_slots(); })
        .def_prop_ro("num_records", [](const ArenaBox& b) { return b.core->num_records(); })
        .def_prop_ro("num_args", [](const ArenaBox& b) { return b.core->num_args(); })
        .def("__len__", [](const ArenaBox& b) { return b.core->num_slots(); })
        .def(
            "checkpoint", [](nb::handle self) { return take_checkpoint(self, nb::handle()); },
            "A checkpoint of this arena alone.")
        .def(
            "rewind",
            [](nb::handle self, const Checkpoint& cp) {
                // Only this arena's part of the checkpoint applies; a checkpoint without one is refused.
                for (int k = 0; k < 2; ++k)
                    if (cp.arena[k].is(self)) {
                        Checkpoint mine;
                        mine.arena[k] = cp.arena[k];
                        mine.mark[k] = cp.mark[k];
                        rewind_to(mine);
                        return;
                    }
                throw nb::value_error("cannot rewind: the checkpoint belongs to another arena");
            },
            nb::arg("checkpoint"), "Discards this arena's nodes created after the checkpoint.")
        .def(
            "clear",
            [](ArenaBox& b) {
                check_owner(b, "clear");
                bt::Mark mk;
                mk.arena_id = b.core->id();
                b.core->rewind(mk);
            },
            "Discards every node of the arena.")
        .def(
            "reserve",
            [](ArenaBox& b, int64_t nodes, int64_t records, int64_t args) {
                if (nodes < 0 || records < 0 || args < 0) throw nb::value_error("reserve(): counts must be >= 0");
                b.core->reserve(size_t(nodes), size_t(records ? records : nodes), size_t(args ? args : nodes));
            },
            nb::arg("nodes"), nb::arg("records") = 0, nb::arg("args") = 0,
            "Commits memory for this many nodes (and records, args) up front.")
        .def(
            "release_unused",
            [](ArenaBox& b) {
                check_owner(b, "release memory of");
                b.core->release_unused();
            },
            "Returns memory above the current size to the OS.")
        .def("stats", &arena_stats, nb::sig("def stats(self) -> dict[str, Any]"),
             "Nodes, records and bytes in use by category.")
        .def(
            "value",
            [](nb::handle self, int64_t index) {
                ArenaBox* b = box_of(self.ptr());
                if (index < 0 || size_t(index) >= b->core->num_slots())
                    throw nb::index_error(("node index " + std::to_string(index) + " is out of range for an arena of " +
                                           std::to_string(b->core->num_slots()) + " nodes")
                                              .c_str());
                PyObject* v = make_value(b->core.get(), self.ptr(), uint32_t(index));
                if (!v) throw nb::python_error();
                return nb::steal(v);
            },
            nb::arg("index"), nb::sig("def value(self, index: int) -> Value"), "A Value handle to node `index`.")
        .def(
            "reach",
            [](nb::handle self, nb::handle v) {
                if (!is_value(v.ptr()) || as_pyvalue(v.ptr())->owner != self.ptr())
                    throw nb::type_error("reach() expects a Value of this arena");
                if (!check_alive(as_pyvalue(v.ptr()))) throw nb::python_error();
                const bt::ArenaBase& a = *box_of(self.ptr())->core;
                int64_t r = a.record_of(as_pyvalue(v.ptr())->idx);
                return r < 0 ? int64_t(-1) : int64_t(a.record(size_t(r)).lo);
            },
            nb::arg("value"), nb::sig("def reach(self, value: Value) -> int"),
            "The lowest record a backward pass from `value` visits (-1 for a leaf): records below it\n"
            "cannot lead to `value`, so the sweep stops there.")
        .def(
            "record_of",
            [](const ArenaBox& b, int64_t index) {
                if (index < 0 || size_t(index) >= b.core->num_slots()) throw nb::index_error("node index out of range");
                return b.core->record_of(uint32_t(index));
            },
            nb::arg("index"), "Index of the record that wrote node `index`, or -1 for a leaf.")
        .def(
            "record",
            [](const ArenaBox& b, int64_t r) {
                if (r < 0 || size_t(r) >= b.core->num_records()) throw nb::index_error("record index out of range");
                const bt::Record& rec = b.core->record(size_t(r));
                std::string name = bt::op_info(rec.op).name;
                if (rec.op == bt::Op::map_unary || rec.op == bt::Op::map_imm || rec.op == bt::Op::map_binary)
                    name += std::string(":") + bt::op_info(static_cast<bt::Op>(rec.c)).name;  // e.g. map_unary:tanh
                return nb::make_tuple(name, rec.out, rec.nout, b.core->record_args(rec), rec.imm);
            },
            nb::arg("r"), nb::sig("def record(self, r: int) -> tuple[str, int, int, list[tuple[int, int]], float]"),
            "(op, first output, number of outputs, argument spans [(first, count)], immediate).")
        .def(
            "numpy",
            [](nb::handle self, int64_t first, int64_t last, const std::string& what, bool writable) {
                ArenaBox& b = *box_of(self.ptr());
                if (!refuse_while_tracing(b.core.get(), "a numpy view of the traced arena")) throw nb::python_error();
                char* p = range_ptr(b, first, last, what);
                if (writable && what == "grads") b.core->expose_grads();  // writes we cannot see
                size_t shape[1] = {static_cast<size_t>(last - first)};
                // The array's owner is a Vector over the range: it keeps the arena alive (whose
                // columns never move, so the array never dangles) and pins the nodes it shows, so
                // that reclamation never hands them to new nodes while the array lives.
                nb::object owner = last > first ? nb::cast(contiguous_vector(nb::borrow(self), b.core.get(),
                                                                             uint32_t(first), size_t(last - first)))
                                                : nb::borrow(self);
                // bfloat16 has no numpy dtype: its views show the raw uint16 bit patterns.
                nb::dlpack::dtype dt;
                switch (b.core->dtype()) {
                    case bt::DType::float64: dt = nb::dtype<double>(); break;
                    case bt::DType::float16:
                        dt = nb::dlpack::dtype{uint8_t(nb::dlpack::dtype_code::Float), 16, 1};
                        break;
                    case bt::DType::bfloat16: dt = nb::dtype<uint16_t>(); break;
                    default: dt = nb::dtype<float>();
                }
                auto arr = nb::ndarray<nb::numpy, nb::ndim<1>>(p, 1, shape, owner, nullptr, dt);
                nb::object o = nb::cast(arr, nb::rv_policy::reference);
                if (!writable) o.attr("flags").attr("writeable") = false;
                return o;
            },
            nb::arg("first"), nb::arg("last"), nb::arg("what") = "values", nb::arg("writable") = false,
            nb::sig("def numpy(self, first: int, last: int, what: str = 'values', writable: bool = False) -> Any"),
            "A zero-copy numpy array over the values (or grads) of nodes [first, last).\n\n"
            "Read-only unless writable=True. It shows whatever the slots hold: after a rewind\n"
            "below `last` the slots are reused by new nodes.")
        .def(
            "read_bytes",
            [](nb::handle self, int64_t first, int64_t last, const std::string& what) {
                ArenaBox& b = *box_of(self.ptr());
                if (!refuse_while_tracing(b.core.get(), "a numpy view of the traced arena")) throw nb::python_error();
                char* p = range_ptr(b, first, last, what);
                return nb::bytes(p, static_cast<size_t>(last - first) * b.core->value_size());
            },
            nb::arg("first"), nb::arg("last"), nb::arg("what") = "values",
            "The raw native-endian payload of nodes [first, last) as bytes.")
        .def(
            "write_bytes",
            [](nb::handle self, int64_t first, nb::handle data, const std::string& what) {
                ArenaBox& b = *box_of(self.ptr());
                if (!refuse_write_while_tracing(b.core.get(), "writing nodes (load_array, io.load)"))
                    throw nb::python_error();
                Py_buffer view;
                if (PyObject_GetBuffer(data.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) throw nb::python_error();
                const size_t vs = b.core->value_size();
                const size_t nbytes = static_cast<size_t>(view.len);
                try {
                    if (nbytes % vs != 0)
                        throw nb::value_error(("payload of " + std::to_string(nbytes) +
                                               " bytes is not a whole number of " + std::to_string(vs) + "-byte values")
                                                  .c_str());
                    range_ptr(b, first, first, what);  // first is in the arena before first + count is formed
                    char* p = range_ptr(b, first, first + static_cast<int64_t>(nbytes / vs), what);
                    if (what == "grads") b.core->mark_grads_written();
                    std::memmove(p, view.buf, nbytes);
                } catch (...) {
                    PyBuffer_Release(&view);
                    throw;
                }
                PyBuffer_Release(&view);
            },
            nb::arg("first"), nb::arg("data"), nb::arg("what") = "values",
            nb::sig("def write_bytes(self, first: int, data: bytes | bytearray | memoryview | ArrayLike, "
                    "what: str = 'values') -> None"),
            "Copies a raw native-endian payload (any contiguous buffer) into nodes starting at `first`.")
        .def(
            "__enter__",
            [](nb::handle self) {
                enter_arena(self);
                return nb::borrow(self);
            },
            nb::sig("def __enter__(self) -> Arena"))
        .def(
            "__exit__", [](nb::handle self, nb::args) { exit_arena(self); },
            nb::sig("def __exit__(self, *exc: object) -> None"))
        .def("__repr__", [](const ArenaBox& b) {
            return "Arena(dtype=" + std::string(dtype_name(b.core->dtype())) +
                   ", nodes=" + std::to_string(b.core->num_slots()) +
                   ", records=" + std::to_string(b.core->num_records()) + ")";
        });
    g_arena_type = m.attr("Arena").ptr();
}

}  // namespace btpy
