// An optimizer's buffers beside its parameter vector (optim.cpp), also counted by the steps that
// a replay takes itself (program.cpp's _sgd_chunks).
#pragma once
#include <cstdint>
#include <vector>

#include "../csrc/arena.hpp"

namespace btpy {

struct OptimState {
    bt::DType dtype;
    std::vector<double> buf;  // nbuf buffers of the parameters' size, one after another
    uint32_t nbuf;
    uint64_t steps = 0;
};

}  // namespace btpy
