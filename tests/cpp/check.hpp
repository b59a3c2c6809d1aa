// The one assertion of the C++ tests: a failed CHECK prints where and why (the first 20 of them,
// so a broken kernel does not flood the log) and the test's main returns `failures != 0`.
#pragma once
#include <cstdio>

inline int failures = 0;
inline long checks = 0;

#define CHECK(cond, ...)                                              \
    do {                                                              \
        ++checks;                                                     \
        if (!(cond) && ++failures <= 20) {                            \
            std::fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            std::fprintf(stderr, __VA_ARGS__);                        \
            std::fprintf(stderr, "\n");                               \
        }                                                             \
    } while (0)
