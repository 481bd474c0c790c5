// The block pool hands out distinct, aligned blocks, takes them back for
// reuse, and a reserve is a floor on free blocks, not an extra allocation.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include "util/block_pool.hpp"

using namespace fluxion;

TEST(BlockPool, BlocksAreDistinctAlignedAndWritable) {
    BlockPool pool(40);
    pool.reserve(300);
    std::vector<void *> taken;
    std::set<uintptr_t> seen;
    for (int i = 0; i < 1000; ++i) {  // past the reserve: the pool grows on demand
        void *p = pool.take();
        ASSERT_EQ(reinterpret_cast<uintptr_t>(p) % alignof(std::max_align_t), 0u);
        std::memset(p, i & 0xff, 40);
        ASSERT_TRUE(seen.insert(reinterpret_cast<uintptr_t>(p)).second) << "block handed out twice";
        taken.push_back(p);
    }
    // Every block kept its own bytes: no two overlap.
    for (size_t i = 0; i < taken.size(); ++i)
        for (size_t b = 0; b < 40; ++b)
            ASSERT_EQ(static_cast<unsigned char *>(taken[i])[b], static_cast<unsigned char>(i & 0xff));
    for (void *p : taken) pool.give(p);
    // Given back, they come out again before any new memory is carved.
    pool.reserve(10);
    std::set<uintptr_t> again;
    for (size_t i = 0; i < taken.size(); ++i) again.insert(reinterpret_cast<uintptr_t>(pool.take()));
    EXPECT_EQ(again, seen);
}

TEST(BlockPool, ProcessWidePoolsAfterAReserve) {
    // take_block/give_block are malloc/free under ASan, which then checks
    // every byte written here; either way the blocks must be distinct.
    reserve_blocks<48>(64);
    std::vector<void *> held;
    std::set<void *> distinct;
    for (int i = 0; i < 200; ++i) {
        held.push_back(take_block<48>());
        std::memset(held.back(), 0x5a, 48);
        distinct.insert(held.back());
    }
    EXPECT_EQ(distinct.size(), held.size());
    for (void *p : held) give_block<48>(p);
}
