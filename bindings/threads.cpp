// The process's thread count: bt.set_num_threads / bt.get_num_threads over csrc/threads.hpp.
#include <nanobind/stl/string.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "../csrc/threads.hpp"

#include "common.hpp"

namespace btpy {

static void set_num_threads(nb::handle n_h) {
    if (PyBool_Check(n_h.ptr()) || !PyLong_Check(n_h.ptr()))
        throw nb::type_error(
            ("set_num_threads(): n must be an int, got " + std::string(Py_TYPE(n_h.ptr())->tp_name)).c_str());
    int overflow = 0;
    const long long n = PyLong_AsLongLongAndOverflow(n_h.ptr(), &overflow);
    const int cores = bt::threads::allowed_cores();
    if (const char* why = overflow ? "n is out of range" : bt::threads::thread_count_problem(n))
        throw nb::value_error(("set_num_threads(" + nb::cast<std::string>(nb::repr(n_h)) + "): " + why +
                               "; this process may use " + std::to_string(cores) + (cores == 1 ? " core" : " cores"))
                                  .c_str());
    bt::threads::set_num_threads(int(n));
}

// How long one cache line takes to go from CPU a to CPU b and back, in nanoseconds: two threads,
// each pinned to its CPU, hand a counter back and forth `rounds` times (the median of 9 batches).
// A diagnostic of the machine for the bench (burtorch_bench.capacity): a threaded step hands its
// work, and its data, between the cores many times.
static double line_round_trip_ns(int cpu_a, int cpu_b, int rounds) {
    if (rounds < 1) throw nb::value_error("rounds must be at least 1");
    // (one CPU for both would hand the line over once per time slice: milliseconds, not a transfer)
    if (cpu_a == cpu_b) throw nb::value_error("the two CPUs must differ");
    for (int c : {cpu_a, cpu_b})
        if (c < 0 || c >= bt::platform::kMaxCpu) throw nb::value_error("no such CPU");
    alignas(64) std::atomic<long> ball{0};
    std::atomic<bool> failed{false};
    auto pin = [&](std::thread& t, int cpu) {
        if (!bt::platform::pin_thread(t, cpu)) failed = true;
    };
    std::vector<double> batches;
    batches.reserve(9);  // thread a appends without allocating
    // A wait that outlasts thousands of round trips means the two threads share a CPU with other
    // work: it yields then, so the call ends (slowly) instead of spinning a whole time slice.
    auto wait = [](int& spins) {
        if (++spins % 4096 == 0)
            std::this_thread::yield();
        else
            BT_CPU_RELAX();
    };
    {
        nb::gil_scoped_release unlocked;
        std::atomic<int> ready{0};
        std::thread b([&] {
            while (ready.load() < 1) BT_CPU_RELAX();
            const long last = 2L * rounds * 9 - 1;
            for (long k = 1; k <= last; k += 2) {
                for (int spins = 0; ball.load(std::memory_order_acquire) != k;) {
                    if (failed.load(std::memory_order_relaxed)) return;
                    wait(spins);
                }
                ball.store(k + 1, std::memory_order_release);
            }
        });
        std::thread a;
        try {
            a = std::thread([&] {
                while (ready.load() < 1) BT_CPU_RELAX();
                if (failed.load()) return;
                long k = 0;
                for (int batch = 0; batch < 9; ++batch) {
                    const auto t0 = std::chrono::steady_clock::now();
                    for (int r = 0; r < rounds; ++r, k += 2) {
                        ball.store(k + 1, std::memory_order_release);
                        for (int spins = 0; ball.load(std::memory_order_acquire) != k + 2;) wait(spins);
                    }
                    batches.push_back(
                        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
                        rounds);
                }
            });
        } catch (...) {  // no second thread: release the first before the error goes up
            failed = true;
            ready = 1;
            b.join();
            throw;
        }
        pin(a, cpu_a);
        pin(b, cpu_b);
        ready = 1;
        a.join();
        b.join();
    }
    if (failed) throw nb::value_error("cannot pin a thread to those CPUs (os.sched_getaffinity)");
    std::sort(batches.begin(), batches.end());
    return batches[batches.size() / 2];
}

void init_threads(nb::module_& m) {
    m.def("_line_round_trip_ns", &line_round_trip_ns, nb::arg("cpu_a"), nb::arg("cpu_b"), nb::arg("rounds"));
    m.def("set_num_threads", &set_num_threads, nb::arg("n"),
          "Sets how many threads native work may use (large range ops, threaded gradient oracles):\n"
          "1 .. the cores this process may use (os.sched_getaffinity); anything else is a ValueError.");
    m.def(
        "get_num_threads", []() { return bt::threads::num_threads(); },
        "The threads native work may use; by default the cores this process may use when first asked.");
    m.def("_allowed_cores", []() { return bt::threads::allowed_cores(); });
    // The calling thread's cap for one call (grad_oracle(threads=n)): sets it, returns the old
    // one (0 = none) for the caller to restore.
    m.def(
        "_swap_call_threads",
        [](int n) {
            if (n != 0)
                if (const char* why = bt::threads::thread_count_problem(n)) throw nb::value_error(why);
            const int old = bt::threads::detail::t_call_threads;
            bt::threads::detail::t_call_threads = n;
            return old;
        },
        nb::arg("n"));
}

}  // namespace btpy
