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
    // bfloat16 and float16 parameters: their float32 master copy (master_step in optim.cpp); it
    // follows the buffers in state() and load_state().
    std::vector<float> master;
    static bool has_master(bt::DType d) { return d == bt::DType::bfloat16 || d == bt::DType::float16; }
};

}  // namespace btpy
