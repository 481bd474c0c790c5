// Stable storage for the graph's many short strings (names, paths, JGF ids):
// one allocation per megabyte instead of one per string, and views that stay
// valid for the pool's lifetime. Strings shared by many vertices (basenames,
// units) can be interned so they are stored once.
#pragma once
#include <cstring>
#include <memory>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace fluxion {

class StringPool {
   public:
    StringPool() = default;
    StringPool(const StringPool &) = delete;
    StringPool &operator=(const StringPool &) = delete;

    std::string_view add(std::string_view s) {
        if (s.empty()) return {};
        if (s.size() > left_) {
            size_t size = s.size() > kChunk / 4 ? s.size() : kChunk;
            chunks_.emplace_back(new char[size]);
            if (size == kChunk) {
                cur_ = chunks_.back().get();
                left_ = size;
            } else {
                // An oversized string gets a chunk of its own; keep filling the current one.
                std::memcpy(chunks_.back().get(), s.data(), s.size());
                return {chunks_.back().get(), s.size()};
            }
        }
        std::memcpy(cur_, s.data(), s.size());
        std::string_view out(cur_, s.size());
        cur_ += s.size();
        left_ -= s.size();
        return out;
    }

    std::string_view intern(std::string_view s) {
        auto it = interned_.find(s);
        if (it != interned_.end()) return *it;
        std::string_view v = add(s);
        interned_.insert(v);
        return v;
    }

   private:
    static constexpr size_t kChunk = size_t{1} << 20;
    std::vector<std::unique_ptr<char[]>> chunks_;
    char *cur_ = nullptr;
    size_t left_ = 0;
    std::unordered_set<std::string_view> interned_;
};

}  // namespace fluxion
