// A small persistent thread pool and the process's thread count.
//
// parallel_tasks(n, f) runs f(0) .. f(n - 1) on up to num_threads() threads, the calling thread
// included (it always runs f(0)), and returns when all are done. Workers are created once (on first use) and then wait
// for work: a short spin, then a condition variable, so back-to-back records of one sweep reuse
// awake workers and an idle process costs nothing.
//
// Determinism is the callers' part, and they all follow one rule: a task owns whole outputs (or
// a whole buffer indexed by the task, never by the thread), so which thread runs which task
// cannot change a bit. Work submitted from inside a task (a range op inside a replay that is
// already parallel over samples) runs serially on that thread, as does work submitted while
// another thread holds the pool.
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "platform.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BT_CPU_RELAX() _mm_pause()
#else
#define BT_CPU_RELAX() std::this_thread::yield()
#endif

namespace bt::threads {

// The cores this process may run on now (its affinity mask), at least 1.
inline int allowed_cores() { return platform::allowed_cores(); }

namespace detail {
// 0: not chosen yet (the first query takes allowed_cores(), so a process pinned after import
// still gets its pinned count).
inline std::atomic<int> g_threads{0};
// Set on a thread while it runs a task: nested parallel regions run serially there.
inline thread_local bool t_in_task = false;
// A per-thread cap set for one call (grad_oracle(threads=n)); 0 = none.
inline thread_local int t_call_threads = 0;
// Set whenever a region is handed to helper threads (see shared_work_since()).
inline std::atomic<bool> g_helped{false};
}  // namespace detail

// Whether a parallel region has been handed to helper threads since the last call (each call
// clears the mark): then the data that work read is likely cached on more than one core, which
// is what an optimizer step's stores have to wait for (csrc/optim.hpp's write_blocks).
inline bool shared_work_since() { return detail::g_helped.exchange(false, std::memory_order_relaxed); }

inline int num_threads() {
    if (detail::t_call_threads > 0) return detail::t_call_threads;
    int n = detail::g_threads.load(std::memory_order_relaxed);
    if (n == 0) {
        n = allowed_cores();
        int expected = 0;
        detail::g_threads.compare_exchange_strong(expected, n);
        n = detail::g_threads.load(std::memory_order_relaxed);
    }
    return n;
}

// Why n cannot be a thread count, or nullptr: 1 .. allowed_cores() are accepted (more threads
// than cores only take turns on them, and a spinning worker would steal its core's time).
inline const char* thread_count_problem(long long n) {
    if (n < 1) return "the number of threads must be at least 1";
    if (n > allowed_cores()) return "more threads than the cores this process may use (os.sched_getaffinity)";
    return nullptr;
}

inline void set_num_threads(int n) {
    if (const char* why = thread_count_problem(n)) throw std::invalid_argument(why);
    detail::g_threads.store(n, std::memory_order_relaxed);
}

// Caps num_threads() on this thread for one scope (n = 0 leaves it as it is).
class CallThreads {
public:
    explicit CallThreads(int n) : saved_(detail::t_call_threads) {
        if (n > 0) detail::t_call_threads = n;
    }
    ~CallThreads() { detail::t_call_threads = saved_; }
    CallThreads(const CallThreads&) = delete;
    CallThreads& operator=(const CallThreads&) = delete;

private:
    int saved_;
};

// How long an idle helper spins (yielding now and then) before it sleeps. Waking a sleeping
// helper costs a futex wake, and on a virtual machine waking its idle vCPU can take far longer
// than a parallel region: a step whose parallel regions are more than the spin apart (Python and
// the optimizer between two replays) then ran them on one thread. The spin covers the gap
// between training steps; OpenMP runtimes spin for a similar time.
inline constexpr int kSpinMicroseconds = 2000;

class Pool {
public:
    // Never destroyed: workers may outlive static destructors. A child made by fork() has none
    // of the parent's workers and may hold a copy of a lock one of them held, so it starts
    // from a new pool (the old one is left as it is).
    static Pool& instance() {
        static const bool once = [] {
            platform::at_fork_child([] { current() = new Pool; });
            return true;
        }();
        (void)once;
        Pool*& p = current();
        if (!p) p = new Pool;
        return *p;
    }

    // f(task) for task in [0, ntasks) on up to nthreads threads, the caller included. The first
    // exception a task throws is rethrown here once every task has finished.
    template <class F>
    void run(size_t ntasks, int nthreads, F&& f) {
        if (ntasks == 0) return;
        std::unique_lock<std::mutex> own(submit_, std::try_to_lock);
        if (ntasks == 1 || nthreads <= 1 || detail::t_in_task || !own.owns_lock() || ntasks > kMaxTasks) {
            for (size_t t = 0; t < ntasks; ++t) f(t);
            return;
        }
        const int helpers = int(std::min<size_t>(size_t(nthreads), ntasks)) - 1;
        ensure_workers(helpers);
        detail::g_helped.store(true, std::memory_order_relaxed);
        using Fn = std::remove_reference_t<F>;
        uint64_t seq;
        {
            // The job is published under the lock a worker takes to read it.
            std::lock_guard<std::mutex> lk(wake_mu_);
            seq = ++seq_;
            call_ = [](void* ctx, size_t t) { (*static_cast<Fn*>(ctx))(t); };
            ctx_ = const_cast<void*>(static_cast<const void*>(&f));
            ntasks_ = ntasks;
            helpers_ = helpers;
            done_.store(0, std::memory_order_relaxed);
            error_ = nullptr;
            claim_.store((seq << 32) | 1, std::memory_order_release);  // task 0 is the caller's
            published_.store(seq, std::memory_order_release);
        }
        wake_cv_.notify_all();
        work(seq, call_, ctx_, ntasks, true);
        // Wait for tasks a helper claimed; they are short, so spin, then yield. A helper that
        // woke too late finds the claim counter tagged with a later job and touches nothing, so
        // nothing here waits for a thread that is not running a task of this job.
        for (int spins = 0; done_.load(std::memory_order_acquire) < ntasks; ++spins) {
            if (spins < 256)
                BT_CPU_RELAX();
            else
                std::this_thread::yield();  // the helper may be waiting for this very core
        }
        if (error_) std::rethrow_exception(error_);
    }

    int workers() const { return int(threads_.size()); }

private:
    static Pool*& current() {
        static Pool* p = nullptr;
        return p;
    }

    static constexpr size_t kMaxTasks = 0xffffffffu;  // task indices share a word with the job's tag

    Pool() = default;

    void ensure_workers(int n) {
        while (int(threads_.size()) < n) {
            const int id = int(threads_.size());
            threads_.emplace_back([this, id] { loop(id); });
            threads_.back().detach();
        }
    }

    // Claims and runs tasks of job `seq` until none are left or the job is over. A claim is a
    // compare-exchange on (job tag, next index), so a stale thread can never claim a task of a
    // later job through a snapshot of this one. The submitting thread runs task 0 first, which no
    // helper can claim: with as many tasks as threads, task t then runs on the same thread in
    // every region, so what it owns (a block of a layer's output units, the rows of W they read
    // and step) stays in one core's cache from record to record and step to step. Claimed by
    // whichever thread came first, task 0 of a lookup record often went to the helper, each time
    // moving the halves of W between the cores; with task 0 the caller's, two-thread training
    // steps ran a little faster and never slower.
    void work(uint64_t seq, void (*call)(void*, size_t), void* ctx, size_t ntasks, bool caller = false) {
        const bool was = detail::t_in_task;
        detail::t_in_task = true;
        if (caller) run_task(call, ctx, 0);
        uint64_t c = claim_.load(std::memory_order_acquire);
        for (;;) {
            if ((c >> 32) != (seq & 0xffffffffu) || (c & 0xffffffffu) >= ntasks) break;
            if (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
            run_task(call, ctx, size_t(c & 0xffffffffu));
            c = claim_.load(std::memory_order_acquire);
        }
        detail::t_in_task = was;
    }

    void run_task(void (*call)(void*, size_t), void* ctx, size_t task) {
        try {
            call(ctx, task);
        } catch (...) {
            std::lock_guard<std::mutex> lk(error_mu_);
            if (!error_) error_ = std::current_exception();
        }
        done_.fetch_add(1, std::memory_order_acq_rel);
    }

    void loop(int id) {
        uint64_t seen = 0;
        for (;;) {
            // Spin a little (the next record usually follows within microseconds), then sleep.
            // The spin yields now and then: on a busy machine the OS may have put this thread on
            // the caller's core, and a helper that only spins there would delay the very job it
            // waits for.
            const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicroseconds);
            int spins = 0;
            while (published_.load(std::memory_order_acquire) == seen) {
                BT_CPU_RELAX();
                if (++spins % 64 == 0) std::this_thread::yield();
                if (spins % 256 == 0 && std::chrono::steady_clock::now() > until) {
                    std::unique_lock<std::mutex> lk(wake_mu_);
                    wake_cv_.wait(lk, [&] { return seq_ != seen; });
                    break;
                }
            }
            uint64_t seq;
            void (*call)(void*, size_t);
            void* ctx;
            size_t ntasks;
            {
                std::lock_guard<std::mutex> lk(wake_mu_);
                seen = seq = seq_;
                if (id >= helpers_) continue;
                call = call_;
                ctx = ctx_;
                ntasks = ntasks_;
            }
            work(seq, call, ctx, ntasks);
        }
    }

    std::mutex submit_;  // one job at a time; a second submitter runs its tasks itself
    std::vector<std::thread> threads_;

    // The current job (written under wake_mu_).
    uint64_t seq_ = 0;
    void (*call_)(void*, size_t) = nullptr;
    void* ctx_ = nullptr;
    size_t ntasks_ = 0;
    int helpers_ = 0;                     // workers 0 .. helpers_ - 1 join it
    std::atomic<uint64_t> published_{0};  // seq_, for spinning workers to watch without the lock
    std::atomic<uint64_t> claim_{0};      // (job tag << 32) | next task index
    std::atomic<size_t> done_{0};
    std::exception_ptr error_;
    std::mutex error_mu_;

    std::mutex wake_mu_;
    std::condition_variable wake_cv_;
};

// Runs f(task) for task in [0, ntasks) on the pool with num_threads() threads.
template <class F>
inline void parallel_tasks(size_t ntasks, F&& f) {
    Pool::instance().run(ntasks, num_threads(), f);
}

// Whether a region started here could run on more than one thread (not inside a task, more than
// one thread allowed): callers check it before measuring work that would only decide a split.
inline bool can_split() { return !detail::t_in_task && num_threads() > 1; }

// How many tasks a region of `work` units should be split into: 1 below `threshold` units (a
// parallel region costs a few microseconds to start), else one per thread, capped by `items`.
inline size_t tasks_for(double work, double threshold, size_t items) {
    if (work < threshold || detail::t_in_task) return 1;
    return std::max<size_t>(1, std::min<size_t>(size_t(num_threads()), items));
}

// [begin, end) of part t of n items split into `parts` nearly equal ranges, each a multiple of
// `align` except the last.
inline std::pair<size_t, size_t> split(size_t n, size_t parts, size_t t, size_t align = 1) {
    const size_t units = (n + align - 1) / align;
    const size_t b = units * t / parts * align, e = units * (t + 1) / parts * align;
    return {std::min(b, n), std::min(e, n)};
}

// Items from which in_blocks splits its work across threads.
inline constexpr double kBlockElements = double(1 << 16);

// How many blocks in_blocks(n, ...) runs n items in.
inline size_t block_tasks(size_t n, double threshold = kBlockElements) { return tasks_for(double(n), threshold, n); }

// Runs step(first, count) over [0, n) in blocks across the pool when n is at least
// `threshold`: for element-wise updates (optimizer steps), where blocks give the bits of one loop.
template <class F>
inline void in_blocks(size_t n, F&& step, double threshold = kBlockElements) {
    const size_t tasks = block_tasks(n, threshold);
    if (tasks <= 1) return step(size_t(0), n);
    parallel_tasks(tasks, [&](size_t t) {
        const auto [b, e] = split(n, tasks, t, 64);
        step(b, e - b);
    });
}

}  // namespace bt::threads
