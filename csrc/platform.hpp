// The OS layer of the core: address-space reservation, committing and discarding pages, large
// buffers in huge pages, and the threads' side (the cores a process may use, pinning a thread,
// a hook for the child of fork()). Everything OS-specific in csrc/ goes through here, with a
// POSIX implementation (Linux, macOS) and a Windows one (VirtualAlloc), so the rest of the core
// is plain C++ that compiles with MSVC as with g++ and clang++.
#pragma once
#include <cstddef>
#include <cstdint>
#include <thread>

#if defined(_WIN32)
#ifndef NOMINMAX
#define NOMINMAX
#endif
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
#else
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>
#endif
#if defined(__linux__)
#include <sched.h>
#endif

namespace bt::platform {

inline size_t page_size() {
#if defined(_WIN32)
    SYSTEM_INFO info;
    GetSystemInfo(&info);
    return static_cast<size_t>(info.dwPageSize);
#else
    return static_cast<size_t>(sysconf(_SC_PAGESIZE));
#endif
}

// Address space for `bytes` (a multiple of page_size()), no memory committed and no access;
// nullptr if the OS refuses.
inline void* reserve(size_t bytes) {
#if defined(_WIN32)
    return VirtualAlloc(nullptr, bytes, MEM_RESERVE, PAGE_NOACCESS);
#else
    int flags = MAP_PRIVATE | MAP_ANONYMOUS;
#ifdef MAP_NORESERVE
    flags |= MAP_NORESERVE;  // no swap accounted for pages never touched
#endif
    void* p = mmap(nullptr, bytes, PROT_NONE, flags, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
#endif
}

// Makes [p, p + bytes) of a reservation readable and writable (zeros at first); false if refused.
inline bool commit(void* p, size_t bytes) {
#if defined(_WIN32)
    return VirtualAlloc(p, bytes, MEM_COMMIT, PAGE_READWRITE) != nullptr;
#else
    return mprotect(p, bytes, PROT_READ | PROT_WRITE) == 0;
#endif
}

// Returns the physical pages of committed [p, p + bytes) to the OS; they stay accessible and
// read as zeros afterwards (a view made over them earlier can never fault).
inline void discard(void* p, size_t bytes) {
#if defined(_WIN32)
    // decommitted, then committed again: zero pages that take no memory until touched
    if (VirtualFree(p, bytes, MEM_DECOMMIT)) VirtualAlloc(p, bytes, MEM_COMMIT, PAGE_READWRITE);
#else
    madvise(p, bytes, MADV_DONTNEED);
#endif
}

// Gives back a whole reservation made by reserve().
inline void unreserve(void* p, size_t bytes) {
#if defined(_WIN32)
    (void)bytes;
    VirtualFree(p, 0, MEM_RELEASE);
#else
    munmap(p, bytes);
#endif
}

inline constexpr size_t kHugePage = size_t(2) << 20;

// `bytes` (a multiple of kHugePage) of zeroed, writable memory, aligned to kHugePage and in
// transparent huge pages where the OS has them (Linux's MADV_HUGEPAGE; elsewhere ordinary
// pages); nullptr if refused. Freed with unmap_huge(p, bytes).
inline void* map_huge(size_t bytes) {
#if defined(_WIN32)
    // Large pages need a privilege users do not have: ordinary committed pages.
    return VirtualAlloc(nullptr, bytes, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
#else
    // One extra huge page of address space to align within; the ends are unmapped again.
    void* p = mmap(nullptr, bytes + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    char* const base = static_cast<char*>(p);
    char* const aligned =
        reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(base) + kHugePage - 1) / kHugePage * kHugePage);
    if (aligned > base) munmap(base, size_t(aligned - base));
    const size_t tail = size_t(base + bytes + kHugePage - (aligned + bytes));
    if (tail) munmap(aligned + bytes, tail);
#ifdef MADV_HUGEPAGE
    madvise(aligned, bytes, MADV_HUGEPAGE);  // refused without THP: ordinary pages then
#endif
    return aligned;
#endif
}

// A huge mapping is given back as a reservation is.
inline void unmap_huge(void* p, size_t bytes) { unreserve(p, bytes); }

// The cores this process may run on now, at least 1: its affinity mask on Linux and Windows
// (what os.sched_getaffinity reports on Linux), the machine's count elsewhere (macOS has no
// affinity masks).
inline int allowed_cores() {
    const unsigned hc = std::thread::hardware_concurrency();
    const int fallback = hc ? int(hc) : 1;
#if defined(__linux__)
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) return fallback;
    return CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
#elif defined(_WIN32)
    DWORD_PTR process = 0, system = 0;
    if (!GetProcessAffinityMask(GetCurrentProcess(), &process, &system) || process == 0) return fallback;
    int n = 0;
    for (; process; process &= process - 1) ++n;
    return n;
#else
    return fallback;
#endif
}

// CPUs pin_thread() can name: 0 .. kMaxCpu - 1.
#if defined(__linux__)
inline constexpr int kMaxCpu = CPU_SETSIZE;
#else
inline constexpr int kMaxCpu = 64;
#endif

// Pins thread `t` to CPU `cpu`; false where the OS refuses or has no such call (macOS).
inline bool pin_thread(std::thread& t, int cpu) {
    if (cpu < 0 || cpu >= kMaxCpu) return false;
#if defined(__linux__)
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(t.native_handle(), sizeof(set), &set) == 0;
#elif defined(_WIN32) && defined(_MSC_VER)
    return SetThreadAffinityMask(t.native_handle(), DWORD_PTR(1) << cpu) != 0;
#else
    // (MinGW's std::thread is a winpthreads thread, macOS has no affinity: not pinned)
    (void)t;
    return false;
#endif
}

// Runs `child` in the child process after every fork() (POSIX); Windows has no fork().
inline void at_fork_child(void (*child)()) {
#if defined(_WIN32)
    (void)child;
#else
    pthread_atfork(nullptr, nullptr, child);
#endif
}

}  // namespace bt::platform
