// Lane replay (csrc/lanes/): whether replays over many samples may run them in blocks of SIMD
// lanes, the vector width this build's lanes use per dtype, and whether a program's per-sample
// rows are written by its records (csrc/lanes/rows.hpp).
#include <nanobind/ndarray.h>

#include "../csrc/lanes/native.hpp"
#include "../csrc/lanes/replay.hpp"
#include "../csrc/lanes/rows.hpp"

#include "common.hpp"
#include "program.hpp"

namespace btpy {

void init_lanes(nb::module_& m) {
    m.def("lanes_enabled", &bt::lanes::enabled, "Whether replays over many samples run them in SIMD lanes.");
    m.def("set_lanes_enabled", &bt::lanes::set_enabled, nb::arg("on"),
          "Lets replays over many samples run them in SIMD lanes (True, the default) or one at a time.");
    m.def(
        "lane_width",
        [](nb::handle dtype) {
            bt::DType d;
            if (!parse_dtype(dtype.ptr(), &d)) throw nb::python_error();
            // Half arenas record no programs, so they have no lanes to report.
            if (d != bt::DType::float64 && d != bt::DType::float32)
                throw nb::type_error("lane_width: lanes replay float32 and float64 programs only");
            return d == bt::DType::float64 ? bt::lanes::vector_width<double>() : bt::lanes::vector_width<float>();
        },
        nb::arg("dtype"), "Samples one vector register holds in this build's lanes, for dtype.");
    m.def(
        "_rows_by_records",
        [](ProgramBox& box) { return box.visit([](auto& R) { return bt::lanes::rows_usable(R.prog, R.rows_plan); }); },
        nb::arg("program"),
        "Whether per_sample_grads over this program has the records that reach the parameters write their parts\n"
        "of each row (lanes enabled), rather than replaying each sample into its frame.");
    m.def(
        "_set_rows_store",
        [](const std::string& how) {
            using bt::lanes::RowsStore;
            static const char* names[] = {"auto", "plain", "stream", "discard"};
            const int old = int(bt::lanes::rows_store());
            int i = 0;
            while (i < 4 && how != names[i]) ++i;
            if (i == 4) throw nb::value_error("_set_rows_store: how must be 'auto', 'plain', 'stream' or 'discard'");
            bt::lanes::set_rows_store(RowsStore(i));
            return std::string(names[old]);
        },
        nb::arg("how"),
        "How per-sample rows written by their records are stored (returns the previous setting): 'auto' (by\n"
        "the output's size against the last-level cache), 'plain' (ordinary stores) or 'stream' (non-temporal\n"
        "stores). The bits are the same; for tests and benchmarks. 'discard': each row made and not stored, the\n"
        "output left as it was (for benchmarks: the compute alone).");
    m.def(
        "_stream_fill",
        [](nb::ndarray<nb::c_contig, nb::device::cpu> out, double value) {
            if (out.dtype() == nb::dtype<float>())
                bt::lanes::stream_fill(static_cast<float*>(out.data()), out.size(), float(value));
            else if (out.dtype() == nb::dtype<double>())
                bt::lanes::stream_fill(static_cast<double*>(out.data()), out.size(), value);
            else
                throw nb::type_error("_stream_fill: out must be a float32 or float64 array");
        },
        nb::arg("out").noconvert(), nb::arg("value"),
        "Sets every element of a C-contiguous float32/float64 array to value with non-temporal stores: the\n"
        "write floor of a streamed per_sample_grads output (benchmarks).");
    m.def(
        "_lanes_structure",
        [](ProgramBox& box) {
            return box.visit([](auto& R) {
                using T = typename std::decay_t<decltype(R.prog)>::value_type;
                const auto& P = R.prog;
                static const char* kinds[] = {"leaf", "unary", "unary_imm", "binary", "nary", "range"};
                nb::dict d;
                d["dtype"] = std::is_same_v<T, double> ? "float64" : "float32";
                d["eligible"] = bt::lanes::eligible(P) && P.num_ids == 0;
                d["n_ext"] = P.n_ext;
                d["frame_size"] = P.frame_size();
                d["root"] = P.root;
                d["inputs"] = P.inputs;
                nb::list wrt, guards, recs;
                for (const bt::Span& sp : P.wrt) wrt.append(nb::make_tuple(sp.first, sp.second));
                for (const bt::Guard& g : P.guards) guards.append(nb::make_tuple(g.a, g.rhs_const ? -1 : int64_t(g.b)));
                for (const bt::Record& r : P.recs) {
                    nb::list args;
                    if (bt::op_info(r.op).kind == bt::OpKind::nary)
                        for (uint32_t i = 0; i < r.b; ++i) args.append(P.args[r.a + i]);
                    recs.append(nb::make_tuple(bt::op_info(r.op).name, kinds[int(bt::op_info(r.op).kind)], r.out,
                                               r.nout, r.a, r.b, r.imm, args));
                }
                d["wrt"] = wrt;
                d["guards"] = guards;
                d["records"] = recs;
                d["sweep"] = P.sweep;
                return d;
            });
        },
        nb::arg("program"),
        "The program's records and frame as burtorch.native generates a block function from them: a dict of\n"
        "dtype, eligible (lane replay, no ids), n_ext, frame_size, root, inputs, wrt [(slot, count)], guards\n"
        "[(slot a, slot b or -1)], records [(op, kind, out, nout, a, b, immediate, var-arity args)], sweep.");
    m.def(
        "_set_lanes_native",
        [](ProgramBox& box, uintptr_t address, uintptr_t rows_address, nb::object state) {
            box.visit([&](auto& R) {
                using W = bt::lanes::LaneWorkspace<typename std::decay_t<decltype(R.prog)>::value_type>;
                R.lane_ws.native = reinterpret_cast<typename W::NativeBlock>(address);
                R.lane_ws.native_rows = address ? reinterpret_cast<typename W::NativeRows>(rows_address) : nullptr;
            });
            box.native_state = std::move(state);
        },
        nb::arg("program"), nb::arg("address"), nb::arg("rows_address"), nb::arg("state").none(),
        "Makes the program's lane replay call the block function at `address` (0: the record loops again)\n"
        "and its rows mode at `rows_address` (0: none), keeping `state` (what holds their library loaded) as\n"
        "long as the program. No checks: burtorch.native sets them only after comparing their bits with the\n"
        "record loops'.");
    m.def(
        "_lanes_native",
        [](ProgramBox& box) {
            const uintptr_t a = box.visit([](auto& R) { return reinterpret_cast<uintptr_t>(R.lane_ws.native); });
            return nb::make_tuple(a, box.native_state);
        },
        nb::arg("program"), "(address of the block function the lane replay calls or 0, the state kept with it).");
    m.def(
        "_lanes_native_abi", [] { return bt::native::kAbiVersion; },
        "The version of the block functions' calling convention (csrc/lanes/native.hpp).");
    m.def("_last_level_cache_bytes", &bt::lanes::last_level_cache_bytes,
          "The last-level data cache's size in bytes as the OS reports it (8 MiB when it reports none).");
}

}  // namespace btpy
