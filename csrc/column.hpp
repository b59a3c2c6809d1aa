// A growable array whose elements never move.
//
// The whole capacity is reserved as address space up front (PROT_NONE, no memory
// committed); pages become readable/writable only as the column grows. So:
//  - pointers into a column stay valid for its whole life (numpy views, threads),
//  - growing never copies, and truncating (rewind) never frees: the steady state of a
//    training loop allocates nothing.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

namespace bt {

class CapacityError : public std::length_error {
public:
    using std::length_error::length_error;
};

template <typename T>
class Column {
public:
    explicit Column(size_t max_elems) : max_(max_elems) {
        if (max_ == 0) max_ = 1;
        if (max_ > (SIZE_MAX - page()) / sizeof(T)) throw CapacityError("column capacity overflows the address space");
        reserved_bytes_ = round_up(max_ * sizeof(T));
        void* p = mmap(nullptr, reserved_bytes_, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) throw std::bad_alloc();
        data_ = static_cast<T*>(p);
    }
    ~Column() {
        if (data_) munmap(data_, reserved_bytes_);
    }
    Column(const Column&) = delete;
    Column& operator=(const Column&) = delete;

    T* data() { return data_; }
    const T* data() const { return data_; }
    size_t size() const { return size_; }
    size_t max_size() const { return max_; }
    size_t committed_bytes() const { return committed_bytes_; }
    T& operator[](size_t i) { return data_[i]; }
    const T& operator[](size_t i) const { return data_[i]; }

    // Appends n uninitialised elements; returns the index of the first.
    size_t grow(size_t n) {
        size_t first = size_;
        if (n > max_ - size_) capacity_exceeded();
        size_t want = size_ + n;
        if (want * sizeof(T) > committed_bytes_) commit(want);
        size_ = want;
        return first;
    }
    void push(const T& v) {
        if (size_ + 1 > max_) capacity_exceeded();
        if ((size_ + 1) * sizeof(T) > committed_bytes_) commit(size_ + 1);
        data_[size_++] = v;
    }
    // Throws unless n more elements fit; commits memory for them. After it, grow(n) cannot throw.
    void make_room(size_t n) {
        if (n > max_ - size_) capacity_exceeded();
        size_t want = size_ + n;
        if (want * sizeof(T) > committed_bytes_) commit(want);
    }
    void truncate(size_t n) {
        if (n < size_) size_ = n;
    }
    // Makes room for n elements in total without changing the size.
    void reserve(size_t n) {
        if (n > max_) capacity_exceeded();
        if (n * sizeof(T) > committed_bytes_) commit(n);
    }
    // Returns the physical pages beyond the current size to the OS. They stay mapped (reads
    // give zeros), so a numpy view made earlier over them can never fault.
    void release_unused() {
        size_t keep = round_up(size_ * sizeof(T));
        if (keep < committed_bytes_)
            madvise(reinterpret_cast<char*>(data_) + keep, committed_bytes_ - keep, MADV_DONTNEED);
    }

private:
    static size_t page() {
        static const size_t p = static_cast<size_t>(sysconf(_SC_PAGESIZE));
        return p;
    }
    static size_t round_up(size_t bytes) { return (bytes + page() - 1) / page() * page(); }

    [[noreturn]] void capacity_exceeded() const {
        throw CapacityError("arena capacity exceeded: room for " + std::to_string(max_) +
                            " elements; create the Arena with a larger capacity");
    }

    void commit(size_t elems) {
        if (elems > max_) capacity_exceeded();
        // Grow geometrically so that commits are rare, but never past the reservation.
        size_t bytes = committed_bytes_ ? committed_bytes_ * 2 : size_t(64) << 10;
        if (bytes < elems * sizeof(T)) bytes = elems * sizeof(T);
        bytes = round_up(bytes);
        if (bytes > reserved_bytes_) bytes = reserved_bytes_;
        char* base = reinterpret_cast<char*>(data_);
        if (mprotect(base + committed_bytes_, bytes - committed_bytes_, PROT_READ | PROT_WRITE) != 0)
            throw std::bad_alloc();
        committed_bytes_ = bytes;
    }

    T* data_ = nullptr;
    size_t size_ = 0;
    size_t max_ = 0;
    size_t reserved_bytes_ = 0;
    size_t committed_bytes_ = 0;
};

}  // namespace bt
