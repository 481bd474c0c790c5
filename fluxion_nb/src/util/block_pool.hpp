// Fixed-size blocks from process-wide free lists. A placement fills graphs
// with fresh planner states and first table blocks, and every fresh heap
// block took malloc's slowest path. Blocks are carved from chunks instead
// and kept on a free list when given back; the chunks live as long as the
// process and serve every graph in it, so a process holds at most its peak
// of blocks of each size. Sanitizer builds use plain malloc, to keep
// catching misuse of a block.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define FLUXION_POOL_BLOCKS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FLUXION_POOL_BLOCKS 0
#endif
#endif
#ifndef FLUXION_POOL_BLOCKS
#define FLUXION_POOL_BLOCKS 1
#endif

namespace fluxion {

// Held for a few instructions at a time: a flag is cheaper than a mutex.
class SpinLock {
   public:
    void lock() noexcept {
        while (flag_.test_and_set(std::memory_order_acquire)) std::this_thread::yield();
    }
    void unlock() noexcept { flag_.clear(std::memory_order_release); }

   private:
    std::atomic_flag flag_ = ATOMIC_FLAG_INIT;
};

class BlockPool {
   public:
    explicit BlockPool(size_t block) : block_((block + kAlign - 1) / kAlign * kAlign) {}
    // The process-wide pools are never destroyed; a pool of one's own gives
    // its chunks back, with every block carved from them.
    ~BlockPool() {
        for (char *chunk : chunks_) std::free(chunk);
    }
    BlockPool(const BlockPool &) = delete;
    BlockPool &operator=(const BlockPool &) = delete;
    void *take() {
        std::lock_guard<SpinLock> lk(mu_);
        if (!free_) refill();
        Free *f = free_;
        free_ = f->next;
        --free_count_;
        return f;
    }
    void give(void *p) noexcept {
        std::lock_guard<SpinLock> lk(mu_);
        give_unlocked(p);
    }
    // At least `n` blocks free, carved now: the chunks are written through,
    // so their pages are in memory before anyone asks for a block.
    void reserve(size_t n) {
        std::lock_guard<SpinLock> lk(mu_);
        while (free_count_ < n) refill();
    }

   private:
    struct Free {
        Free *next;
    };
    static constexpr size_t kAlign = alignof(std::max_align_t);
    static constexpr size_t kPerChunk = 128;
    size_t block_;
    SpinLock mu_;
    Free *free_ = nullptr;
    size_t free_count_ = 0;
    std::vector<char *> chunks_;
    void refill() {
        char *chunk = static_cast<char *>(std::malloc(block_ * kPerChunk));
        if (!chunk) throw std::bad_alloc();
        try {
            chunks_.push_back(chunk);
        } catch (...) {
            std::free(chunk);
            throw;
        }
        for (size_t i = kPerChunk; i-- > 0;) give_unlocked(chunk + i * block_);
    }
    void give_unlocked(void *p) noexcept {
        Free *f = static_cast<Free *>(p);
        f->next = free_;
        free_ = f;
        ++free_count_;
    }
};

#if FLUXION_POOL_BLOCKS
// The pool of blocks of `Size` bytes.
template <size_t Size>
BlockPool &pool_of() {
    static BlockPool *pool = new BlockPool(Size);  // never destroyed: blocks may outlive statics
    return *pool;
}
#endif

// A block of `Size` bytes, aligned for any type; give it back with give_block.
template <size_t Size>
void *take_block() {
#if FLUXION_POOL_BLOCKS
    return pool_of<Size>().take();
#else
    void *p = std::malloc(Size);
    if (!p) throw std::bad_alloc();
    return p;
#endif
}

// At least `n` blocks of `Size` bytes free (nothing in sanitizer builds).
template <size_t Size>
void reserve_blocks([[maybe_unused]] size_t n) {
#if FLUXION_POOL_BLOCKS
    pool_of<Size>().reserve(n);
#endif
}

template <size_t Size>
void give_block(void *p) noexcept {
    if (!p) return;
#if FLUXION_POOL_BLOCKS
    pool_of<Size>().give(p);
#else
    std::free(p);
#endif
}

}  // namespace fluxion
