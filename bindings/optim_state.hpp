// An optimizer's buffers beside its parameter vector (optim.cpp), also counted by the steps that
// a replay takes itself (program.cpp's _sgd_chunks).
#pragma once
#include <cstdint>
#include <vector>

#include "../csrc/arena.hpp"

namespace btpy {

struct OptimState {
    bt::DType dtype;
    // nbuf buffers of the parameters' size, one after another; for bfloat16 and float16 parameters
    // one more at the end: their master copy (see master_step in optim.cpp).
    std::vector<double> buf;
    uint32_t nbuf;
    uint64_t steps = 0;
    static bool has_master(bt::DType d) { return d == bt::DType::bfloat16 || d == bt::DType::float16; }
    uint32_t buffers() const { return nbuf + (has_master(dtype) ? 1 : 0); }
};

}  // namespace btpy
