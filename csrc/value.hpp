// The C++ user API: scalar Values with operators over an arena, for programs written in C++.
//
//   bt::Arena<double> arena;
//   bt::Value<double> a(arena, -41.0), b(arena, 2.0);
//   auto g = bt::sqr((a + b) - (a * b + bt::pow3(b))) * 0.5;
//   g.backward();                     // a.grad() == -35, b.grad() == 1050
//   arena.rewind(mark);               // discard an iteration's nodes (bt::Scope does it on exit)
//
// A Value is (arena, slot): 16 bytes, copied freely; every operator appends one record, exactly
// as the Python API does (the same core, the same numbers). Handles are not checked for
// staleness here (the Python layer does that); use them below the mark you rewind to.
#pragma once
#include <initializer_list>
#include <vector>

#include "burtorch.hpp"

namespace bt {

template <typename T>
class Value {
public:
    Value() = default;
    // A new leaf holding v.
    Value(Arena<T>& arena, T v) : arena_(&arena), idx_(arena.leaf(v)) {}
    // A handle to an existing node.
    static Value at(Arena<T>& arena, uint32_t idx) { return Value(&arena, idx); }

    T data() const { return arena_->values()[idx_]; }
    T grad() const { return arena_->grads()[idx_]; }
    void set_data(T v) const { arena_->values()[idx_] = v; }
    void zero_grad() const { arena_->grads()[idx_] = T(0); }
    uint32_t index() const { return idx_; }
    Arena<T>& arena() const { return *arena_; }

    // Reverse sweep from this node: interior grads hold d this / d node, leaf grads accumulate.
    void backward(T seed = T(1)) const { arena_->backward(idx_, seed, 0); }

    Value unary(Op op) const { return Value(arena_, arena_->unary(op, idx_)); }
    Value with_constant(Op op, double c) const { return Value(arena_, arena_->unary_imm(op, idx_, c)); }
    Value binary(Op op, const Value& o) const { return Value(arena_, arena_->binary(op, idx_, o.idx_)); }

private:
    Value(Arena<T>* a, uint32_t i) : arena_(a), idx_(i) {}
    Arena<T>* arena_ = nullptr;
    uint32_t idx_ = 0;
};

// ---- operators: Value op Value, Value op number, number op Value ----
template <typename T>
Value<T> operator+(const Value<T>& a, const Value<T>& b) {
    return a.binary(Op::add, b);
}
template <typename T>
Value<T> operator-(const Value<T>& a, const Value<T>& b) {
    return a.binary(Op::sub, b);
}
template <typename T>
Value<T> operator*(const Value<T>& a, const Value<T>& b) {
    return a.binary(Op::mul, b);
}
template <typename T>
Value<T> operator/(const Value<T>& a, const Value<T>& b) {
    return a.binary(Op::div, b);
}
template <typename T>
Value<T> operator-(const Value<T>& a) {
    return a.unary(Op::neg);
}
template <typename T>
Value<T> operator+(const Value<T>& a, double c) {
    return a.with_constant(Op::add_const, c);
}
template <typename T>
Value<T> operator+(double c, const Value<T>& a) {
    return a.with_constant(Op::add_const, c);
}
template <typename T>
Value<T> operator-(const Value<T>& a, double c) {
    return a.with_constant(Op::add_const, -c);
}
template <typename T>
Value<T> operator-(double c, const Value<T>& a) {
    return a.with_constant(Op::rsub_const, c);
}
template <typename T>
Value<T> operator*(const Value<T>& a, double c) {
    return a.with_constant(Op::mul_const, c);
}
template <typename T>
Value<T> operator*(double c, const Value<T>& a) {
    return a.with_constant(Op::mul_const, c);
}
template <typename T>
Value<T> operator/(const Value<T>& a, double c) {
    return a.with_constant(Op::div_const, c);
}
template <typename T>
Value<T> operator/(double c, const Value<T>& a) {
    return a.with_constant(Op::rdiv_const, c);
}
template <typename T>
Value<T>& operator+=(Value<T>& a, const Value<T>& b) {
    return a = a + b;
}
template <typename T>
Value<T>& operator-=(Value<T>& a, const Value<T>& b) {
    return a = a - b;
}
template <typename T>
Value<T>& operator*=(Value<T>& a, const Value<T>& b) {
    return a = a * b;
}
template <typename T>
Value<T>& operator+=(Value<T>& a, double c) {
    return a = a + c;
}
template <typename T>
Value<T>& operator*=(Value<T>& a, double c) {
    return a = a * c;
}

// ---- every unary op of the table as a function: bt::tanh(x), bt::sqr(x), ... ----
#define BT_VALUE_FN(name, ...)         \
    template <typename T>              \
    Value<T> name(const Value<T>& x) { \
        return x.unary(Op::name);      \
    }
BT_UNARY_OPS(BT_VALUE_FN)
#undef BT_VALUE_FN

template <typename T>
Value<T> pow(const Value<T>& x, double c) {
    return x.with_constant(Op::pow_const, c);
}
template <typename T>
Value<T> pow(double c, const Value<T>& x) {
    return x.with_constant(Op::rpow_const, c);
}
template <typename T>
Value<T> pow(const Value<T>& a, const Value<T>& b) {
    return a.binary(Op::pow, b);
}
template <typename T>
Value<T> leaky_relu(const Value<T>& x, double slope = 0.01) {
    return x.with_constant(Op::leaky_relu, slope);
}

// ---- the var-arity ops: one record over any number of Values ----
template <typename T>
Value<T> reduce(Op op, const std::vector<Value<T>>& xs) {
    std::vector<uint32_t> idx;
    idx.reserve(xs.size());
    for (const Value<T>& x : xs) idx.push_back(x.index());
    return Value<T>::at(xs.front().arena(), xs.front().arena().nary(op, idx.data(), idx.size()));
}
template <typename T>
Value<T> reduce_sum(const std::vector<Value<T>>& xs) {
    return reduce(Op::reduce_sum, xs);
}
template <typename T>
Value<T> reduce_mul(const std::vector<Value<T>>& xs) {
    return reduce(Op::reduce_mul, xs);
}
template <typename T>
Value<T> reduce_mean(const std::vector<Value<T>>& xs) {
    return reduce(Op::reduce_mean, xs);
}
template <typename T>
Value<T> variance(const std::vector<Value<T>>& xs) {
    return reduce(Op::variance, xs);
}
// sum_i x[i] * w[i] (+ bias): one record, the paper's neuron.
template <typename T>
Value<T> inner_product(const std::vector<Value<T>>& x, const std::vector<Value<T>>& w) {
    std::vector<Value<T>> both(x);
    both.insert(both.end(), w.begin(), w.end());
    return reduce(Op::inner_product, both);
}
template <typename T>
Value<T> inner_product_with_bias(const std::vector<Value<T>>& x, const std::vector<Value<T>>& w, const Value<T>& b) {
    std::vector<Value<T>> all(x);
    all.insert(all.end(), w.begin(), w.end());
    all.push_back(b);
    return reduce(Op::inner_product_with_bias, all);
}

// Rewinds the arena to where it was at construction when it goes out of scope: everything
// built inside (one sample's graph) is discarded, parameters created before survive.
template <typename T>
class Scope {
public:
    explicit Scope(Arena<T>& arena) : arena_(arena), mark_(arena.checkpoint()) {}
    ~Scope() { arena_.rewind(mark_); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

private:
    Arena<T>& arena_;
    Mark mark_;
};

}  // namespace bt
