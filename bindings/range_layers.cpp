// Layer ops (linear, lookup_linear, cross_entropy, layer_norm, attention): one native call and
// one record each, operands converted as for every range op (range.cpp).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "vector.hpp"

namespace btpy {

using bt::Op;

// ---------------------------------------------------------------- layers
// A layer's W: an (out x in) matrix in one block; its bias, if any: `out` contiguous elements.
// The message is built only on failure: linear() runs once a sample in an eager loop.
static void check_layer(const VectorBox& W, const std::optional<VectorBox>& b, const char* what) {
    if (!W.rows) throw nb::value_error((std::string(what) + ": W must be a matrix (out x in)").c_str());
    if (!W.contiguous())
        throw nb::value_error(
            (std::string(what) + ": W must be contiguous (a parameter block), not a view with gaps").c_str());
    if (b && (b->size != W.rows || !b->contiguous()))
        throw nb::value_error(
            (std::string(what) + ": the bias must be a contiguous vector of " + std::to_string(W.rows) + " elements")
                .c_str());
}

static VectorBox linear(nb::handle x_h, nb::handle W_h, nb::handle b_h) {
    ConstantsGuard guard;
    auto anchor = pick_anchor({W_h, x_h, b_h});
    VectorBox W = as_vector(W_h, anchor_ptr(anchor), "linear()");
    VectorBox x = as_vector(x_h, &W, "linear()");
    std::optional<VectorBox> b;
    if (!b_h.is_none()) b = as_vector(b_h, &W, "linear()");
    same_arena(x, W, "linear()");
    if (b) same_arena(x, *b, "linear()");
    x.check();
    W.check();
    if (b) b->check();
    check_layer(W, b, "linear()");
    const uint32_t in = W.cols, out = W.rows;
    const size_t rows = x.nrows();
    if (x.row_len() != in)
        throw nb::value_error(("linear(): x has shape " + shape_str(x) + " but W expects " + std::to_string(in) +
                               " inputs (W is " + shape_str(W) + ")")
                                  .c_str());
    const uint32_t r32 = bt::checked_u32(rows);
    return emit(x, rows * out, x.rows ? r32 : 0, out,
                [&](auto& A) { return bt::append_linear(A, x.spans, W.spans, b ? &b->spans : nullptr, r32, in, out); });
}

// A lookup feeding a linear layer as one record: row r of x is the table rows
// ids[r P .. r P + P) side by side, P = in / d (csrc/range/lookup_linear.hpp); activation: None or
// "tanh", applied inside the record.
static VectorBox lookup_linear(const VectorBox& table, nb::handle ids_h, const VectorBox& W, nb::handle b_h,
                               nb::handle act_h) {
    ConstantsGuard guard;
    bool tanh = false;
    if (!act_h.is_none()) {
        if (!nb::isinstance<nb::str>(act_h))
            throw nb::type_error(("lookup_linear(): activation must be None or 'tanh', got " +
                                  std::string(nb::type_name(act_h.type()).c_str()))
                                     .c_str());
        if (!act_h.equal(nb::str("tanh")))  // not through UTF-8: a lone surrogate has none
            throw nb::value_error(
                ("lookup_linear(): activation must be None or 'tanh', got " + std::string(nb::repr(act_h).c_str()))
                    .c_str());
        tanh = true;
    }
    std::optional<VectorBox> b;
    if (!b_h.is_none()) b = as_vector(b_h, &W, "lookup_linear()");
    same_arena(table, W, "lookup_linear()");
    if (b) same_arena(table, *b, "lookup_linear()");
    if (!table.rows || !table.contiguous())
        throw nb::value_error("lookup_linear(): the table must be a contiguous matrix (V x d)");
    check_layer(W, b, "lookup_linear()");
    const uint32_t d = table.cols, in = W.cols, out = W.rows;
    if (in % d != 0)
        throw nb::value_error(("lookup_linear(): W's " + std::to_string(in) + " inputs are not a whole number of " +
                               std::to_string(d) + "-wide table rows")
                                  .c_str());
    std::vector<uint32_t> ids;
    {
        IdRead reading;
        ids = parse_ids(ids_h, table.rows, "lookup_linear()", "token id");
    }
    const size_t per_row = in / d;
    if (ids.empty() || ids.size() % per_row != 0)
        throw nb::value_error(("lookup_linear(): " + std::to_string(ids.size()) + " ids do not make whole rows of " +
                               std::to_string(per_row) + " ids")
                                  .c_str());
    std::vector<int64_t> traced;
    traced_id_positions(ids_h, traced);
    table.check();
    W.check();
    if (b) b->check();
    const uint32_t rows = bt::checked_u32(ids.size() / per_row);
    VectorBox out_v = emit(W, size_t(rows) * out, rows, out, [&](auto& A) {
        return bt::append_lookup_linear(A, table.spans, W.spans, b ? &b->spans : nullptr, d, ids.data(), rows, in, out,
                                        tanh);
    });
    record_id_inputs(table.arena, traced, table.rows);
    return out_v;
}

static nb::object cross_entropy(nb::handle logits_h, nb::handle targets_h) {
    ConstantsGuard guard;
    VectorBox logits = as_vector(logits_h, nullptr, "cross_entropy()");
    const uint32_t rows = bt::checked_u32(logits.nrows()), V = bt::checked_u32(logits.row_len());
    std::vector<uint32_t> t;
    {
        IdRead reading;
        t = parse_ids(targets_h, V, "cross_entropy()", "target");
    }
    if (t.size() != rows)
        throw nb::value_error(("cross_entropy(): " + std::to_string(t.size()) + " targets for " + std::to_string(rows) +
                               " rows of logits")
                                  .c_str());
    std::vector<int64_t> traced;
    const bool traced_targets = traced_id_positions(targets_h, traced);
    logits.check();
    VectorBox out =
        emit(logits, 1, 0, 0, [&](auto& A) { return bt::append_cross_entropy(A, logits.spans, rows, V, t.data()); });
    if (traced_targets) record_id_inputs(logits.arena, traced, V);
    return value_at(logits, out.first());
}

static VectorBox layer_norm(nb::handle x_h, nb::handle g_h, nb::handle b_h, double eps) {
    ConstantsGuard guard;
    auto anchor = pick_anchor({x_h, g_h, b_h});
    VectorBox x = as_vector(x_h, anchor_ptr(anchor), "layer_norm()");
    VectorBox gamma = as_vector(g_h, &x, "layer_norm()");
    VectorBox beta = as_vector(b_h, &x, "layer_norm()");
    same_arena(x, gamma, "layer_norm()");
    same_arena(x, beta, "layer_norm()");
    x.check();
    gamma.check();
    beta.check();
    const size_t C = x.row_len();
    if (gamma.size != C || beta.size != C || !gamma.contiguous() || !beta.contiguous())
        throw nb::value_error(
            ("layer_norm(): gamma and beta must be contiguous vectors of " + std::to_string(C) + " elements").c_str());
    if (!(eps > 0) || !std::isfinite(eps)) throw nb::value_error("layer_norm(): eps must be a positive finite number");
    const uint32_t rows = bt::checked_u32(x.nrows()), c32 = bt::checked_u32(C);
    return emit(x, x.size, x.rows, x.cols,
                [&](auto& A) { return bt::append_layer_norm(A, x.spans, gamma.spans, beta.spans, rows, c32, eps); });
}

static double parse_scale(nb::handle scale_h, double dflt, const char* what) {
    if (scale_h.is_none()) return dflt;
    double s;
    int ok = is_value(scale_h.ptr()) ? 0 : number_to_double(scale_h.ptr(), &s);
    if (ok < 0) throw nb::python_error();
    if (ok == 0) throw nb::type_error((std::string(what) + ": scale must be a number").c_str());
    if (!std::isfinite(s)) throw nb::value_error((std::string(what) + ": scale must be finite").c_str());
    return s;
}

static nb::object attention(nb::handle q_h, nb::handle k_h, nb::handle v_h, bool causal, nb::handle scale_h,
                            bool return_weights) {
    ConstantsGuard guard;
    auto anchor = pick_anchor({q_h, k_h, v_h});
    VectorBox q = as_vector(q_h, anchor_ptr(anchor), "attention()");
    VectorBox k = as_vector(k_h, &q, "attention()");
    VectorBox v = as_vector(v_h, &q, "attention()");
    if (!q.rows || q.rows != k.rows || q.rows != v.rows || q.cols != k.cols || q.cols != v.cols)
        throw nb::value_error(("attention(): q, k, v must be matrices of one shape (T x head_size), got " +
                               shape_str(q) + ", " + shape_str(k) + ", " + shape_str(v))
                                  .c_str());
    const uint32_t Tn = q.rows, hs = q.cols;
    const double scale = parse_scale(scale_h, 1.0 / std::sqrt(double(hs)), "attention()");
    same_arena(q, k, "attention()");
    same_arena(q, v, "attention()");
    q.check();
    k.check();
    v.check();
    const size_t th = size_t(Tn) * hs, tt = size_t(Tn) * Tn;
    VectorBox all = emit(q, th + tt, 0, 0, [&](auto& A) {
        return bt::append_attention(A, q.spans, k.spans, v.spans, Tn, hs, causal, scale);
    });
    VectorBox out = contiguous_vector(q.owner, q.arena, all.first(), th, Tn, hs);
    if (!return_weights) return nb::cast(out);
    VectorBox w = contiguous_vector(q.owner, q.arena, all.first() + uint32_t(th), tt, Tn, Tn);
    return nb::make_tuple(out, w);
}

static nb::object multi_head_attention(nb::handle qkv_h, int64_t heads, bool causal, nb::handle scale_h,
                                       bool return_weights, int64_t sequences) {
    ConstantsGuard guard;
    VectorBox qkv = as_vector(qkv_h, nullptr, "multi_head_attention()");
    if (!qkv.rows || qkv.cols % 3 != 0)
        throw nb::value_error(("multi_head_attention(): qkv must be a (T x 3C) matrix, got " + shape_str(qkv)).c_str());
    if (sequences < 1 || qkv.rows % uint64_t(sequences) != 0)
        throw nb::value_error(("multi_head_attention(): " + std::to_string(qkv.rows) + " rows do not split into " +
                               std::to_string(sequences) + " sequences")
                                  .c_str());
    const uint32_t S = uint32_t(sequences), Tn = qkv.rows / S, C = qkv.cols / 3;
    if (heads < 1 || C % uint64_t(heads) != 0)
        throw nb::value_error(("multi_head_attention(): " + std::to_string(C) + " channels do not split into " +
                               std::to_string(heads) + " heads")
                                  .c_str());
    const uint32_t H = uint32_t(heads);
    const double scale = parse_scale(scale_h, 1.0 / std::sqrt(double(C / H)), "multi_head_attention()");
    qkv.check();
    const size_t tc = size_t(Tn) * C, tt = size_t(Tn) * Tn;
    VectorBox all = emit(qkv, S * (tc + H * tt), 0, 0,
                         [&](auto& A) { return bt::append_mha(A, qkv.spans, Tn, C, H, causal, scale, S); });
    VectorBox out = contiguous_vector(qkv.owner, qkv.arena, all.first(), S * tc, S * Tn, C);
    if (!return_weights) return nb::cast(out);
    nb::list ws;  // one (T x T) matrix per sequence and head, sequence-major
    for (size_t k = 0; k < size_t(S) * H; ++k)
        ws.append(contiguous_vector(qkv.owner, qkv.arena, all.first() + uint32_t(S * tc + k * tt), tt, Tn, Tn));
    return nb::make_tuple(out, ws);
}

void init_range_layers(nb::module_& m) {
    m.def("linear", &linear, nb::arg("x"), nb::arg("weight"), nb::arg("bias") = nb::none(),
          nb::sig("def linear(x: VectorLike, weight: VectorLike, bias: VectorLike | None = None) -> Vector"),
          R"doc(x W^T + b, for one vector or row by row for a matrix: one record, whatever the sizes.

Args:
    x: a vector of ``in`` elements, or a (rows x in) matrix; lists and arrays become constant
        leaves of the weight's arena.
    weight: the (out x in) weight matrix, contiguous (a parameter block).
    bias: a contiguous vector of ``out`` elements, or None.

Returns:
    A Vector of ``out`` elements, or a (rows x out) matrix.

Raises:
    ValueError: shapes that do not match, or a weight or bias with gaps.
    TypeError: operands of different dtypes.
    StaleValueError: an operand was rewound away.)doc");
    m.def("lookup_linear", &lookup_linear, nb::arg("table"), nb::arg("ids"), nb::arg("weight"),
          nb::arg("bias") = nb::none(), nb::arg("activation") = nb::none(),
          nb::sig("def lookup_linear(table: Vector, ids: Sequence[int] | ArrayLike, weight: Vector, "
                  "bias: Vector | None = None, activation: Literal['tanh'] | None = None) -> Vector"),
          R"doc(``linear(embedding(table, ids).reshape(rows, in), weight, bias)`` as one record.

With ``activation="tanh"``, ``tanh`` of that, in the same record: the outputs are the activations
(the same bits as ``.tanh()`` of the layer's outputs) and the pre-activations are never stored.

Row r of the layer's input is the table rows ``ids[r * P : (r + 1) * P]`` side by side, with
``P = in / d``. The looked-up rows are never stored. From ``rows >= 1.5 V`` the record computes
through one (V x out) product per position instead of the (rows x in) input, which is less
work when a chunk repeats the table's rows. The path depends on the shapes alone, so a replay
computes the same bits, and so does any thread count, but for the table's gradient through the
tables: on several threads it is a sum over output units added up in one part per task, in task
order (the same on every run for a given thread count). Ids may be traced program inputs.

Args:
    table: a contiguous (V x d) matrix.
    ids: ``rows * P`` ints, each in [0, V).
    weight: the (out x in) weight matrix, contiguous, with ``in`` a multiple of d.
    bias: a contiguous vector of ``out`` elements, or None.
    activation: None, or ``"tanh"``.

Returns:
    A (rows x out) matrix.

Raises:
    ValueError: shapes that do not match, ids that do not fill whole rows, or another
        activation.
    IndexError: an id outside [0, V).
    TypeError: operands of different dtypes, ids that are not ints, or an activation that is
        not a string.
    StaleValueError: an operand was rewound away.)doc");
    m.def("cross_entropy", &cross_entropy, nb::arg("logits"), nb::arg("targets"),
          nb::sig("def cross_entropy(logits: VectorLike, targets: int | Sequence[int] | ArrayLike) -> Value"),
          R"doc(Mean over rows of -log softmax(logits)[target]: log-softmax and NLL in one record.

Args:
    logits: a vector of V classes, or a (rows x V) matrix.
    targets: one class id per row (an int for a vector), each in [0, V).

Returns:
    The mean loss, a scalar Value.

Raises:
    IndexError: a target outside [0, V).
    ValueError: not one target per row.
    TypeError: targets that are not integers.)doc");
    m.def("layer_norm", &layer_norm, nb::arg("x"), nb::arg("gamma"), nb::arg("beta"), nb::arg("eps") = 1e-5,
          nb::sig("def layer_norm(x: VectorLike, gamma: VectorLike, beta: VectorLike, eps: float = 1e-05) -> Vector"),
          R"doc(Layer normalisation of each row (biased variance, as PyTorch's): one record.

Args:
    x: a vector of C elements, or a (rows x C) matrix.
    gamma: the scale, a contiguous vector of C elements.
    beta: the shift, a contiguous vector of C elements.
    eps: added to the variance; positive and finite.

Returns:
    A Vector of x's shape.)doc");
    m.def("attention", &attention, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("causal") = true,
          nb::arg("scale") = nb::none(), nb::arg("return_weights") = false,
          nb::sig("def attention(q: VectorLike, k: VectorLike, v: VectorLike, causal: bool = True, "
                  "scale: float | None = None, return_weights: bool = False) -> Vector | tuple[Vector, Vector]"),
          R"doc(Scaled dot-product attention of one head: one record.

Its outputs are the (T x head_size) result followed by the (T x T) attention weights, which are
nodes too (they can be drawn, and their grads flow).

Args:
    q, k, v: (T x head_size) matrices of one shape (views such as columns of a fused block work).
    causal: position i attends to positions <= i only.
    scale: multiplies q k^T; default 1 / sqrt(head_size).
    return_weights: also return the weights.

Returns:
    The result, or (result, weights) with return_weights=True.)doc");
    m.def("multi_head_attention", &multi_head_attention, nb::arg("qkv"), nb::arg("heads"), nb::arg("causal") = true,
          nb::arg("scale") = nb::none(), nb::arg("return_weights") = false, nb::arg("sequences") = 1,
          nb::sig(
              "def multi_head_attention(qkv: VectorLike, heads: int, causal: bool = True, scale: float | None = None, "
              "return_weights: bool = False, sequences: int = 1) -> Vector | tuple[Vector, list[Vector]]"),
          R"doc(Every head of attention from a fused q/k/v matrix in one record.

Args:
    qkv: a (T x 3C) matrix: the queries of heads 0..H-1, then the keys, then the values.
    heads: H, dividing C.
    causal: position i attends to positions <= i only.
    scale: multiplies q k^T; default 1 / sqrt(C / H).
    return_weights: also return the (T x T) weight matrix of every sequence and head.
    sequences: S stacked sequences of T = rows / S rows each; attention stays within each.

Returns:
    The (S*T x C) result, the heads side by side; with return_weights=True, (result, weights) with
    the S*H weight matrices sequence-major.)doc");
}

}  // namespace btpy
