// A growable buffer for the kernels' working memory (packed operands, a record's scratch), backed
// by transparent huge pages once it is large.
//
// Why: the tiles stream their packed panels from L2 many times over. In 4 KiB pages a 512 KiB
// buffer sits on physical pages scattered at random, so how evenly its lines spread over L2's
// sets, and how many TLB entries it takes, is left to chance; one 2 MiB page is physically
// contiguous, so a wide layer's products and the compiled steps over it run faster and more
// evenly (build/cpp/gemm_kernels compares the two).
//
// Large buffers are mapped 2 MiB-aligned and marked MADV_HUGEPAGE (platform.hpp); where the OS has no
// transparent huge pages the mark is refused and they stay ordinary pages. Only touched pages
// take memory, so the rounding costs nothing without huge pages and at most the rest of one
// 2 MiB page with them. Small buffers stay on the heap (and, in sanitized builds, all of them).
// Growing keeps the contents (and, as a std::vector's resize, the new elements start at zero);
// it never shrinks, so a training loop's steady state allocates nothing.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

#include "platform.hpp"

namespace bt {

// Bytes from which a buffer is mapped in huge pages: below it, rounding up to 2 MiB would be
// most of a touched page (the memory goals count every byte of a small model's process).
// Sanitized builds keep every buffer on the heap, where AddressSanitizer sees an overrun.
#if defined(BT_SANITIZED)
inline constexpr size_t kHugeBufferFrom = SIZE_MAX;
#else
inline constexpr size_t kHugeBufferFrom = size_t(256) << 10;
#endif
using platform::kHugePage;

template <typename T>
class HugeBuffer {
    static_assert(std::is_trivially_copyable_v<T>, "moved with memcpy");

public:
    HugeBuffer() = default;
    ~HugeBuffer() { release(); }
    HugeBuffer(const HugeBuffer&) = delete;
    HugeBuffer& operator=(const HugeBuffer&) = delete;
    HugeBuffer(HugeBuffer&& o) noexcept : data_(o.data_), size_(o.size_), mapped_(o.mapped_) {
        o.data_ = nullptr;
        o.size_ = o.mapped_ = 0;
    }
    HugeBuffer& operator=(HugeBuffer&& o) noexcept {
        if (this != &o) {
            release();
            std::swap(data_, o.data_);
            std::swap(size_, o.size_);
            std::swap(mapped_, o.mapped_);
        }
        return *this;
    }

    T* data() const { return data_; }
    size_t size() const { return size_; }
    T& operator[](size_t i) const { return data_[i]; }

    // At least n elements; the first size() keep their values.
    void resize(size_t n) {
        if (n <= size_) return;
        if (mapped_ && n <= mapped_ / sizeof(T)) {  // the mapping's rest was never written: zeros
            size_ = n;
            return;
        }
        if (n > (SIZE_MAX - 2 * kHugePage) / sizeof(T)) throw std::bad_alloc();
        const size_t bytes = n * sizeof(T);
        T* fresh;
        size_t mapped = 0;
        if (bytes >= kHugeBufferFrom) {
            mapped = (bytes + kHugePage - 1) / kHugePage * kHugePage;
            void* p = platform::map_huge(mapped);
            if (!p) throw std::bad_alloc();
            fresh = static_cast<T*>(p);  // zero-filled by the OS
        } else {
            fresh = static_cast<T*>(::operator new(bytes, std::align_val_t(64)));
            std::memset(static_cast<void*>(fresh), 0, bytes);
        }
        if (size_) std::memcpy(static_cast<void*>(fresh), static_cast<const void*>(data_), size_ * sizeof(T));
        release();
        data_ = fresh;
        size_ = n;
        mapped_ = mapped;
    }

private:
    void release() {
        if (!data_) return;
        if (mapped_)
            platform::unmap_huge(static_cast<void*>(data_), mapped_);
        else
            ::operator delete(static_cast<void*>(data_), std::align_val_t(64));
        data_ = nullptr;
        size_ = mapped_ = 0;
    }

    T* data_ = nullptr;
    size_t size_ = 0;
    size_t mapped_ = 0;  // bytes mapped (0: on the heap)
};

}  // namespace bt
