// The process's thread count: bt.set_num_threads / bt.get_num_threads over csrc/threads.hpp.
#include <nanobind/stl/string.h>

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

void init_threads(nb::module_& m) {
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
