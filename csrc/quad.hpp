// Quadruple precision (IEEE binary128) scalar autodiff: bt.float128, the scalar path only.
//
// A graph of its own, apart from the arenas: each node is reference-counted and holds its operands,
// as micrograd's Value does, so a float128 graph lives exactly as long as Python holds one of its
// nodes. It serves the research check the arenas' FP32/FP64 cannot: that a method's behaviour is
// not rounding (binary128 carries 113 significand bits; FP64, 53). Only the rational operations
// (+, -, *, /, integer powers, relu) are provided, which keeps every value an exact function of
// the inputs up to one rounding per operation and needs no quadmath library.
#pragma once

#if defined(__SIZEOF_FLOAT128__) && !defined(BT_NO_FLOAT128)
#define BT_HAS_FLOAT128 1

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace bt::quad {

using f128 = __float128;

enum class Op : uint8_t { leaf, add, sub, mul, div, neg, pow, relu };

struct Node;
using NodePtr = std::shared_ptr<Node>;

struct Node {
    f128 value = 0;
    f128 grad = 0;
    Op op = Op::leaf;
    int exponent = 0;  // Op::pow
    NodePtr a, b;

    Node(f128 v, Op o, NodePtr x = nullptr, NodePtr y = nullptr, int e = 0)
        : value(v), op(o), exponent(e), a(std::move(x)), b(std::move(y)) {}
    Node(const Node&) = delete;
    Node& operator=(const Node&) = delete;

    // Releases a long chain of operands without recursion: a node whose last owner is this one has
    // its own operands moved to the stack before it is destroyed, so no destructor nests.
    ~Node() {
        std::vector<NodePtr> stack;
        auto take = [&stack](NodePtr& p) {
            if (p) stack.push_back(std::move(p));
        };
        take(a);
        take(b);
        while (!stack.empty()) {
            NodePtr n = std::move(stack.back());
            stack.pop_back();
            if (n.use_count() == 1) {
                take(n->a);
                take(n->b);
            }
        }
    }
};

inline NodePtr leaf(f128 v) { return std::make_shared<Node>(v, Op::leaf); }
inline NodePtr add(const NodePtr& x, const NodePtr& y) {
    return std::make_shared<Node>(x->value + y->value, Op::add, x, y);
}
inline NodePtr sub(const NodePtr& x, const NodePtr& y) {
    return std::make_shared<Node>(x->value - y->value, Op::sub, x, y);
}
inline NodePtr mul(const NodePtr& x, const NodePtr& y) {
    return std::make_shared<Node>(x->value * y->value, Op::mul, x, y);
}
inline NodePtr div(const NodePtr& x, const NodePtr& y) {
    return std::make_shared<Node>(x->value / y->value, Op::div, x, y);
}
inline NodePtr neg(const NodePtr& x) { return std::make_shared<Node>(-x->value, Op::neg, x); }
inline NodePtr relu(const NodePtr& x) { return std::make_shared<Node>(x->value > 0 ? x->value : f128(0), Op::relu, x); }

// x**n by repeated multiplication (n - 1 roundings at most; exact for the integers of W1/W2).
inline f128 ipow(f128 x, int n) {
    const bool inverse = n < 0;
    unsigned m = inverse ? 0u - static_cast<unsigned>(n) : static_cast<unsigned>(n);
    f128 r = 1, base = x;
    while (m) {
        if (m & 1u) r *= base;
        base *= base;
        m >>= 1;
    }
    return inverse ? 1 / r : r;
}

inline NodePtr pow(const NodePtr& x, int n) {
    return std::make_shared<Node>(ipow(x->value, n), Op::pow, x, nullptr, n);
}

// Every node reachable from root, operands before their results (iterative: any depth).
inline std::vector<Node*> topological(Node* root) {
    std::vector<Node*> order;
    std::vector<std::pair<Node*, int>> stack{{root, 0}};
    std::unordered_set<Node*> seen{root};
    while (!stack.empty()) {
        auto& [n, state] = stack.back();
        Node* next = nullptr;
        if (state == 0) {
            state = 1;
            next = n->a.get();
        } else if (state == 1) {
            state = 2;
            next = n->b.get();
        } else {
            order.push_back(n);
            stack.pop_back();
            continue;
        }
        if (next && seen.insert(next).second) stack.push_back({next, 0});
    }
    return order;
}

// d root / d node for every node of root's graph: grads are set (not accumulated) on each call.
inline void backward(const NodePtr& root) {
    std::vector<Node*> order = topological(root.get());
    for (Node* n : order) n->grad = 0;
    root->grad = 1;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
        Node* n = *it;
        const f128 g = n->grad;
        switch (n->op) {
            case Op::leaf: break;
            case Op::add:
                n->a->grad += g;
                n->b->grad += g;
                break;
            case Op::sub:
                n->a->grad += g;
                n->b->grad -= g;
                break;
            case Op::mul:
                n->a->grad += g * n->b->value;
                n->b->grad += g * n->a->value;
                break;
            case Op::div:
                n->a->grad += g / n->b->value;
                n->b->grad -= g * n->a->value / (n->b->value * n->b->value);
                break;
            case Op::neg: n->a->grad -= g; break;
            case Op::pow: n->a->grad += g * n->exponent * ipow(n->a->value, n->exponent - 1); break;
            case Op::relu:
                if (n->a->value > 0) n->a->grad += g;
                break;
        }
    }
}

// x exactly as (negative, significand, binary exponent): x = +-significand * 2**exponent, the
// significand an integer below 2**113 (the conversion to __int128 is exact once it is one).
struct Exact {
    bool negative = false;
    unsigned __int128 significand = 0;
    int exponent = 0;
};

inline bool finite(f128 x) { return x == x && x - x == x - x; }

inline Exact exact(f128 x) {
    if (!finite(x)) throw std::domain_error("float128: not a finite number");
    Exact r;
    r.negative = x < 0;
    if (r.negative) x = -x;
    if (x == 0) return r;
    int e = 0;
    const f128 two112 = ipow(2, 112);
    while (x >= two112 * 2) {  // too large for an integer significand: scale down (exactly)
        x /= 2;
        ++e;
    }
    // Scale up by 2 until x is an integer; both are exact in binary.
    while (x < two112 && static_cast<f128>(static_cast<unsigned __int128>(x)) != x) {
        x *= 2;
        --e;
    }
    r.significand = static_cast<unsigned __int128>(x);
    r.exponent = e;
    return r;
}

inline std::string to_decimal(unsigned __int128 v) {
    if (v == 0) return "0";
    std::string s;
    while (v) {
        s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(v % 10)));
        v /= 10;
    }
    return s;
}

}  // namespace bt::quad

#endif
