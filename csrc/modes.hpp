// Per-thread modes that change what appending an op does, as PyTorch's grad mode is per thread.
//
//  - gradients off (no_grad): ops compute values into fresh slots but append no records, so a
//    validation pass or sampling leaves nothing to sweep and needs no args;
//  - anomaly detection: the first record whose forward value or backward contribution is not
//    finite raises AnomalyError naming it. Off, it costs one predictable branch per append and
//    nothing per record of a sweep (the sweep is compiled twice).
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace bt {

struct ThreadModes {
    int no_grad = 0;  // nesting depth of no_grad scopes
    int anomaly = 0;  // nesting depth of detect_anomaly scopes
};

// initial-exec: one thread-pointer-relative load, not a __tls_get_addr call per op.
inline thread_local ThreadModes t_modes __attribute__((tls_model("initial-exec")));

inline bool grad_enabled() { return t_modes.no_grad == 0; }
inline bool anomaly_enabled() { return t_modes.anomaly != 0; }

// A non-finite value where anomaly detection was asked for. `record` is the record's index in
// its arena (or the index it would have had with gradients off); `in_backward` says which pass.
class AnomalyError : public std::runtime_error {
public:
    AnomalyError(const std::string& what, size_t record, uint32_t slot, bool in_backward)
        : std::runtime_error(what), record(record), slot(slot), in_backward(in_backward) {}
    size_t record;
    uint32_t slot;  // the non-finite node: an output (forward) or an argument (backward)
    bool in_backward;
};

}  // namespace bt
