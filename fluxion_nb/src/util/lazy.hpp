// A container that costs one pointer until something is put in it. Most
// vertices never hold a job or a property, and an empty std::map is 48
// bytes; with hundreds of thousands of vertices that adds up.
#pragma once
#include <memory>
#include <utility>

namespace fluxion {

template <class C>
class Lazy {
   public:
    using iterator = typename C::iterator;
    using const_iterator = typename C::const_iterator;
    using key_type = typename C::key_type;

    Lazy() = default;
    Lazy(const Lazy &o) : p_(o.p_ ? std::make_unique<C>(*o.p_) : nullptr) {}
    Lazy &operator=(const Lazy &o) {
        p_ = o.p_ ? std::make_unique<C>(*o.p_) : nullptr;
        return *this;
    }
    Lazy(Lazy &&) noexcept = default;
    Lazy &operator=(Lazy &&) noexcept = default;

    // The contents (an empty container when nothing was ever added).
    const C &get() const { return p_ ? *p_ : none(); }
    operator const C &() const { return get(); }
    C &mut() {
        if (!p_) p_ = std::make_unique<C>();
        return *p_;
    }

    bool empty() const { return !p_ || p_->empty(); }
    size_t size() const { return p_ ? p_->size() : 0; }
    size_t count(const key_type &k) const { return p_ ? p_->count(k) : 0; }
    const_iterator begin() const { return get().begin(); }
    const_iterator end() const { return get().end(); }
    // Non-const lookups on an unallocated container return the shared empty
    // container's end(), which compares equal to end() below.
    iterator begin() { return p_ ? p_->begin() : none().begin(); }
    iterator end() { return p_ ? p_->end() : none().end(); }
    iterator find(const key_type &k) { return p_ ? p_->find(k) : none().end(); }
    const_iterator find(const key_type &k) const { return get().find(k); }
    template <class K>
    auto &operator[](K &&k) {
        return mut()[std::forward<K>(k)];
    }
    template <class V>
    auto insert(V &&v) {
        return mut().insert(std::forward<V>(v));
    }
    iterator erase(iterator it) { return p_->erase(it); }
    size_t erase(const key_type &k) { return p_ ? p_->erase(k) : 0; }
    void clear() { p_.reset(); }

   private:
    std::unique_ptr<C> p_;
    static C &none() {
        static C e;
        return e;
    }
};

}  // namespace fluxion
