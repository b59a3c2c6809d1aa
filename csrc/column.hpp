// Reserved storage whose elements never move.
//
// The whole capacity is reserved as address space up front (no access, no memory committed;
// platform.hpp);
// pages become readable/writable only as the owner asks for more elements. So:
//  - pointers into a column stay valid for its whole life (numpy views, threads),
//  - growing never copies, and shrinking (rewind) never frees: the steady state of a training
//    loop allocates nothing.
// A Column does not know how many elements are in use: the arena keeps one count for all the
// columns that grow together (values, grads, generations, sweep bounds), so an append updates
// one number instead of one per column.
//
// `skew` offsets the first element from the page boundary. Columns indexed alike (value[i],
// grad[i], gen[i]) would otherwise sit at addresses equal modulo 4 KiB, and the CPU then takes
// a load of one for a store to another ("4K aliasing"), which stalls every append.
#pragma once
#include <cstddef>
#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>

#include "platform.hpp"

namespace bt {

class CapacityError : public std::length_error {
public:
    using std::length_error::length_error;
};

template <typename T>
class Column {
public:
    explicit Column(size_t max_elems, size_t skew = 0) : max_(max_elems ? max_elems : 1), skew_(skew) {
        if (max_ > (SIZE_MAX - page() - skew_) / sizeof(T))
            throw CapacityError("column capacity overflows the address space");
        reserved_bytes_ = round_up(skew_ + max_ * sizeof(T));
        void* p = platform::reserve(reserved_bytes_);
        if (!p) throw std::bad_alloc();
        base_ = static_cast<char*>(p);
        data_ = reinterpret_cast<T*>(base_ + skew_);
    }
    ~Column() {
        if (base_) platform::unreserve(base_, reserved_bytes_);
    }
    Column(const Column&) = delete;
    Column& operator=(const Column&) = delete;

    T* data() const { return data_; }
    size_t max_size() const { return max_; }
    size_t committed_bytes() const { return committed_bytes_; }
    // Elements usable without committing more memory (never more than the capacity).
    size_t committed() const {
        const size_t n = committed_bytes_ > skew_ ? (committed_bytes_ - skew_) / sizeof(T) : 0;
        return n < max_ ? n : max_;
    }

    // Makes elements [0, n) usable; throws CapacityError beyond the capacity, bad_alloc if the
    // OS refuses memory. Commits geometrically so that commits are rare.
    void ensure(size_t n) {
        if (n > max_) capacity_exceeded();
        const size_t need = skew_ + n * sizeof(T);
        if (need <= committed_bytes_) return;
        size_t bytes = committed_bytes_ ? committed_bytes_ * 2 : size_t(64) << 10;
        if (bytes < need) bytes = need;
        bytes = round_up(bytes);
        if (bytes > reserved_bytes_) bytes = reserved_bytes_;
        if (!platform::commit(base_ + committed_bytes_, bytes - committed_bytes_)) throw std::bad_alloc();
        committed_bytes_ = bytes;
    }
    // Returns the physical pages beyond the first n elements to the OS. They stay mapped (reads
    // give zeros), so a numpy view made earlier over them can never fault.
    void release_beyond(size_t n) {
        const size_t keep = round_up(skew_ + n * sizeof(T));
        if (keep < committed_bytes_) platform::discard(base_ + keep, committed_bytes_ - keep);
    }

    [[noreturn]] void capacity_exceeded() const {
        throw CapacityError("arena capacity exceeded: room for " + std::to_string(max_) +
                            " elements; create the Arena with a larger capacity");
    }

private:
    static size_t page() {
        static const size_t p = platform::page_size();
        return p;
    }
    static size_t round_up(size_t bytes) { return (bytes + page() - 1) / page() * page(); }

    char* base_ = nullptr;
    T* data_ = nullptr;
    size_t max_ = 0;
    size_t skew_ = 0;
    size_t reserved_bytes_ = 0;
    size_t committed_bytes_ = 0;
};

}  // namespace bt
