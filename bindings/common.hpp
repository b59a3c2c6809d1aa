// Shared declarations of the binding layer: the Value handle, the Arena box, the one guard that
// turns core errors into Python exceptions, and the one dtype dispatch.
//
// Every entry point follows the same order, so Python code run by an argument's __float__ or
// __index__ can never act between a check and the write it guards:
//   1. convert every argument (this may run Python code: numbers, ids, sequences),
//   2. check liveness and arenas (no Python code from here on),
//   3. call the core inside guarded() / a nanobind function (core errors become exceptions).
#pragma once
#include <Python.h>
#include <nanobind/nanobind.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "../csrc/burtorch.hpp"

namespace nb = nanobind;

namespace btpy {

// ---------------------------------------------------------------- arenas and handles
// The payload of a Python `Arena` object.
struct ArenaBox {
    std::unique_ptr<bt::ArenaBase> core;
    // The thread whose private default arena this is (PyThread_get_thread_ident), 0 for an arena
    // made by the user: another thread may not rewind or clear it (check_owner, arena_scope.cpp).
    unsigned long owner_thread = 0;
    explicit ArenaBox(bt::DType dt, const bt::Capacity& cap) {
        switch (dt) {
            case bt::DType::float64: core = std::make_unique<bt::Arena<double>>(cap); break;
            case bt::DType::bfloat16: core = std::make_unique<bt::Arena<bt::bfloat16>>(cap); break;
            case bt::DType::float16: core = std::make_unique<bt::Arena<bt::float16>>(cap); break;
            default: core = std::make_unique<bt::Arena<float>>(cap);
        }
    }
};

// A scalar handle: (arena, slot index, generation tag). The dtype is the arena's.
struct PyValue {
    PyObject_HEAD bt::ArenaBase* arena;
    PyObject* owner;  // the Python Arena object that owns `arena` (strong reference)
    uint32_t idx;
    uint64_t gen;
};

extern PyTypeObject ValueType;
extern PyObject* StaleValueError;
extern PyObject* AnomalyError;
inline constexpr int kDTypes = 4;  // bt::DType's values
extern PyObject* g_dtype_objects[kDTypes];
extern bt::DType g_default_dtype;  // set_default_dtype (read it through default_dtype())
extern bool g_labels_on;           // bt.labels(): automatic labels only; a label= given is always stored

inline bool is_value(PyObject* o) { return Py_TYPE(o) == &ValueType; }

// Drops a pin on (idx, gen) and, when that was the top slot's last pin, reclaims the arena's
// unpinned top (value.cpp). Only from the arena's reclaiming thread and never while it is traced.
void release_pin(bt::ArenaBase* arena, uint32_t idx, uint64_t gen);
// The same for a pin a compaction cannot retarget (a Vector's, a checkpoint's).
void release_fixed_pin(bt::ArenaBase* arena, uint32_t idx, uint64_t gen, bt::ArenaBase::Holder h);

// A pin on one slot held for the lifetime of a C++ object (a Vector's highest slot, a checkpoint's
// position): each copy pins again, a move hands the pin over. These holders keep raw positions,
// so their pins are counted apart: a compaction never moves what they show.
struct SlotPin {
    using Holder = bt::ArenaBase::Holder;
    bt::ArenaBase* arena = nullptr;
    uint32_t idx = 0;
    uint64_t gen = 0;
    Holder holder = Holder::vector;
    SlotPin() = default;
    SlotPin(bt::ArenaBase* a, uint32_t i, Holder h = Holder::vector) { take(a, i, h); }
    SlotPin(const SlotPin& o) { take_copy(o); }
    SlotPin(SlotPin&& o) noexcept : arena(o.arena), idx(o.idx), gen(o.gen), holder(o.holder) { o.arena = nullptr; }
    SlotPin& operator=(const SlotPin& o) {
        if (this != &o) {
            drop();
            take_copy(o);
        }
        return *this;
    }
    SlotPin& operator=(SlotPin&& o) noexcept {
        if (this != &o) {
            drop();
            arena = o.arena;
            idx = o.idx;
            gen = o.gen;
            holder = o.holder;
            o.arena = nullptr;
        }
        return *this;
    }
    ~SlotPin() { drop(); }
    void take(bt::ArenaBase* a, uint32_t i, Holder h = Holder::vector) {
        drop();
        if (!a || i >= a->num_slots()) return;
        arena = a;
        idx = i;
        gen = a->gen_of(i);
        holder = h;
        a->pin_fixed(i, h);
    }
    void drop() {
        if (arena) release_fixed_pin(arena, idx, gen, holder);
        arena = nullptr;
    }

private:
    void take_copy(const SlotPin& o) {
        arena = nullptr;
        holder = o.holder;
        if (o.arena && o.arena->alive(o.idx, o.gen)) {
            arena = o.arena;
            idx = o.idx;
            gen = o.gen;
            arena->pin_fixed(idx, holder);
        }
    }
};
// Retargets a Value handle that a compaction moved (arena.hpp), before anything reads its slot.
inline void resolve(PyValue* v) {
    if (v->arena->has_relocations() && !v->arena->alive(v->idx, v->gen)) [[unlikely]]
        v->arena->relocate(v->idx, v->gen);
}
// Whether v's node is still there (retargeting v first if it moved).
inline bool value_alive(PyValue* v) {
    resolve(v);
    return v->arena->alive(v->idx, v->gen);
}
// A safe point (no raw slot index held) before a sweep from `root`: closes a hole left right below
// root's graph by a graph whose last handle went, sliding what lies above it down (arena.hpp). A
// no-op from another thread than the arena's reclaiming one and while the arena is traced.
void compact_below(PyValue* root);  // value.cpp: the part past the first check
inline void compact_at_safe_point(PyValue* root) {
    if (root->arena->wants_compaction()) [[unlikely]]
        compact_below(root);
}
inline PyValue* as_pyvalue(PyObject* o) { return reinterpret_cast<PyValue*>(o); }

const char* dtype_name(bt::DType d);

template <typename T>
inline bt::Arena<T>& typed(bt::ArenaBase* a) {
    return *static_cast<bt::Arena<T>*>(a);
}

// The one dtype dispatch: f(bt::Arena<T>&) for the arena's T (float, double, bfloat16, float16).
template <typename F>
inline decltype(auto) dispatch(bt::ArenaBase* a, F&& f) {
    switch (a->dtype()) {
        case bt::DType::float64: return f(typed<double>(a));
        case bt::DType::bfloat16: return f(typed<bt::bfloat16>(a));
        case bt::DType::float16: return f(typed<bt::float16>(a));
        default: return f(typed<float>(a));
    }
}
// The same for the paths that exist for float and double only (recorded programs, the fused SGD
// step): a half arena raises TypeError naming `what`.
template <typename F>
inline decltype(auto) dispatch_wide(bt::ArenaBase* a, const char* what, F&& f) {
    if (a->dtype() == bt::DType::float64) return f(typed<double>(a));
    if (a->dtype() != bt::DType::float32)
        throw nb::type_error(
            (std::string(what) + " works on float32 and float64 arenas only, not " + dtype_name(a->dtype())).c_str());
    return f(typed<float>(a));
}

// Parses bt.float32 / bt.float64 / "float32" / "float64" / numpy-like objects with a name.
bool parse_dtype(PyObject* o, bt::DType* out);

// New handle to slot idx of arena (owner = its Python Arena object).
PyObject* make_value(bt::ArenaBase* arena, PyObject* owner, uint32_t idx);

// Appends a scalar op on live Values (checked here); a new reference, or nullptr with an error.
PyObject* emit_unary(PyValue* x, bt::Op op);
PyObject* emit_imm(PyValue* x, bt::Op op, double c);
PyObject* emit_binary(PyValue* a, PyValue* b, bt::Op op);

// Raises StaleValueError and returns false if v's slot was rewound away.
bool check_alive(PyValue* v);
// "Value 'w1' (slot 7)" when labelled, "Value (slot 7)" otherwise.
std::string describe(PyValue* v);

// The thread's current arena for a dtype (innermost `with arena:`, else the thread's default).
PyObject* current_arena(bt::DType dt);  // borrowed
// The dtype of what is made with no dtype or arena given: the innermost arena entered on this
// thread (`with arena:`, any dtype), else the one set by set_default_dtype (float64 at start).
bt::DType default_dtype();
ArenaBox* box_of(PyObject* arena_obj);  // nullptr with TypeError set if not an Arena

// Warns once per arena when a loop appends without ever rewinding (called after a sweep).
void check_unbounded_growth(bt::ArenaBase* arena);

// ---------------------------------------------------------------- errors
// Sets the Python exception for the C++ exception being handled: CapacityError and bad_alloc ->
// MemoryError, AnomalyError -> burtorch.AnomalyError (a FloatingPointError), nanobind's builtin
// exceptions -> theirs, anything else -> RuntimeError. Call inside a catch block.
void set_error_from_current_exception();

// Calls f() (which returns a new reference or nullptr with an error set), turning C++ exceptions
// into Python ones.
template <typename F>
inline PyObject* guarded(F&& f) {
    try {
        return f();
    } catch (...) {
        set_error_from_current_exception();
        return nullptr;
    }
}

// ---------------------------------------------------------------- converting arguments
// A Python number (not a Value) to double: 1 ok, 0 not a number (no error set), -1 error set.
// May run Python code (__float__ / __index__ of user types).
int number_to_double(PyObject* o, double* out);

// Index buffers for one call. Calls can nest (an argument's __float__ may call burtorch), so each
// call leases its own buffer from a per-thread pool instead of sharing one.
class IndexBuffer {
public:
    IndexBuffer();
    ~IndexBuffer();
    IndexBuffer(const IndexBuffer&) = delete;
    IndexBuffer& operator=(const IndexBuffer&) = delete;
    std::vector<uint32_t>& operator*() { return *buf_; }
    std::vector<uint32_t>* operator->() { return buf_; }

private:
    std::vector<uint32_t>* buf_;
};

// A sequence of Values and numbers, converted (phase 1) but not yet placed in an arena.
struct Collected {
    std::vector<PyObject*> items;  // borrowed from `keep`
    std::vector<double> numbers;   // per item: its number (items that are numbers)
    std::vector<bool> is_number;
    nb::object keep;  // keeps the items alive
};

// Numbers passed where Values are expected become constant leaves before an op has checked all
// else (its other operands, shapes, capacity). Every entry point that converts arguments holds a
// ConstantsGuard: if the call fails, the constants it created are taken back (they are on top of
// their arena and nothing refers to them), so a failed op leaves its arena unchanged. Constants
// of a nested call (Python code run by an argument calling burtorch) belong to that call's guard.
class ConstantsGuard {
public:
    ConstantsGuard();
    ~ConstantsGuard();
    ConstantsGuard(const ConstantsGuard&) = delete;
    ConstantsGuard& operator=(const ConstantsGuard&) = delete;
    // Notes constants [first, first + n) just created in the arena of `owner` by the innermost
    // guarded call (none: nothing to note).
    static void created(PyObject* owner, bt::ArenaBase* arena, uint32_t first, size_t n);

private:
    struct Block {
        nb::object owner;  // keeps the arena alive until the guard ends
        bt::ArenaBase* arena;
        uint32_t first, n;
        uint64_t gen;  // of the last constant: a rewind in between means they are gone already
    };
    ConstantsGuard* outer_;
    int exceptions_;
    std::vector<Block> blocks_;
};

// Phase 1: converts every item (numbers may run Python code). Errors name `what` and the item.
bool collect_sequence(PyObject* seq, const char* what, Collected& out, bool allow_empty);

// Phase 2 (no Python code): the slot of each item in `arena` (numbers become constant leaves of
// the arena); every Value must be alive and of that arena. arena == nullptr: the arena of the
// first Value, else the thread's current arena of the default dtype.
bool place_collected(const Collected& c, const char* what, std::vector<uint32_t>& out, bt::ArenaBase** arena,
                     PyObject** owner);

// Token ids / class targets: an int or an iterable of ints, each in [0, bound). May run Python
// code (__index__); raises TypeError / IndexError naming `what`.
std::vector<uint32_t> parse_ids(nb::handle h, uint32_t bound, const char* what, const char* noun);

// ---------------------------------------------------------------- areas
void init_errors(nb::module_& m);
void init_arena(nb::module_& m);
void init_arena_scope(nb::module_& m);
void init_value(nb::module_& m);
void init_functions(nb::module_& m);
void init_vector(nb::module_& m);
void init_vector_functions(nb::module_& m);
void init_range(nb::module_& m);
void init_range_layers(nb::module_& m);
void init_optim(nb::module_& m);
void init_compress(nb::module_& m);
void init_trace(nb::module_& m);
void init_batch(nb::module_& m);
void init_program(nb::module_& m);
void init_threads(nb::module_& m);
void init_quad(nb::module_& m);
void init_lanes(nb::module_& m);

// ---------------------------------------------------------------- tracing (trace.cpp)
extern PyObject* TraceError;
bool tracing();
// Returns true, or raises TraceError naming the user's line and returns false when `arena` is
// being traced: a number read out of a traced Value would be baked into the program.
bool refuse_while_tracing(bt::ArenaBase* arena, const char* what);
// The same for a write (values or grads, of any arena) made while tracing: a replay would not repeat it.
bool refuse_write_while_tracing(bt::ArenaBase* arena, const char* what);
// Notes a comparison made on traced Values (b == nullptr: against the number c; py_op
// Py_LT/LE/GT/GE, or -1 for bool(a)) and its outcome, re-checked by every replay.
void record_guard(PyValue* a, PyValue* b, double c, int py_op, bool result);
// Positions of traced ids in `ids` (-1 for plain ints); false when none is traced.
bool traced_id_positions(nb::handle ids, std::vector<int64_t>& pos);
// While one lives, traced ids may be read as ints (they are being parsed as ids, not used as numbers).
struct IdRead {
    IdRead();
    ~IdRead();
};
// Notes that the record just appended holds these ids at the end of its args.
void record_id_inputs(bt::ArenaBase* arena, const std::vector<int64_t>& pos, uint32_t bound);

}  // namespace btpy
