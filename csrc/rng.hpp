// The core's one random stream (parameter initialisers, gradient compressors): splitmix64, so
// that a seed gives the same numbers on every platform and C++ library (std::mt19937's
// distributions are implementation-defined).
#pragma once
#include <cmath>
#include <cstdint>

namespace bt {

// splitmix64's output function: a bijection of 64-bit words in which every input bit reaches
// every output bit.
inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

class Rng {
public:
    // The state is the seed, spread by an affine map: parameter initialisers take their seeds
    // from bt.seeding's splitmix64 sequence, already mixed, and keep these exact streams.
    explicit Rng(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull) {}
    // For seeds a user picks (0, 1, 2, ...): the seed mixed twice into the starting state. With the
    // affine map alone seed t+1's stream is seed t's one draw later (the state advances by the
    // same golden-ratio step), so consecutive seeds would draw the same numbers, shifted.
    static Rng seeded(uint64_t seed) {
        Rng r(0);
        r.s_ = mix64(mix64(seed + 0x2545F4914F6CDD1Dull) ^ 0x9E3779B97F4A7C15ull);
        return r;
    }
    uint64_t next() { return mix64(s_ += 0x9E3779B97F4A7C15ull); }
    double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)
    // Uniform in [0, n) without modulo bias (Lemire's multiply-shift with rejection).
    uint64_t below(uint64_t n) {
        for (;;) {
            unsigned __int128 m = (unsigned __int128)next() * n;
            const uint64_t low = uint64_t(m);
            if (low >= n || low >= (0 - n) % n) return uint64_t(m >> 64);
        }
    }
    // Box-Muller, one draw per call (the second value is dropped to keep the stream simple).
    double normal(double mean, double std) {
        const double u1 = 1.0 - uniform(), u2 = uniform();
        return mean + std * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }

private:
    uint64_t s_;
};

}  // namespace bt
