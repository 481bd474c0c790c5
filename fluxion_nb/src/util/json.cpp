#include "util/json.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "util/errors.hpp"

namespace fluxion::json {

Value Value::make_bool(bool b) {
    Value v;
    v.kind_ = Kind::Bool;
    v.b_ = b;
    return v;
}
Value Value::make_int(int64_t i) {
    Value v;
    v.kind_ = Kind::Int;
    v.i_ = i;
    return v;
}
Value Value::make_double(double d) {
    Value v;
    v.kind_ = Kind::Double;
    v.d_ = d;
    return v;
}
Value Value::make_string(std::string s) {
    Value v;
    v.kind_ = Kind::String;
    v.s_ = std::move(s);
    return v;
}
Value Value::make_array() {
    Value v;
    v.kind_ = Kind::Array;
    return v;
}
Value Value::make_object() {
    Value v;
    v.kind_ = Kind::Object;
    return v;
}

const Value *Value::find(std::string_view key) const {
    if (kind_ != Kind::Object) return nullptr;
    for (const auto &kv : obj_)
        if (kv.first == key) return &kv.second;
    return nullptr;
}

void Value::set(std::string key, Value v) {
    for (auto &kv : obj_)
        if (kv.first == key) {
            kv.second = std::move(v);
            return;
        }
    obj_.emplace_back(std::move(key), std::move(v));
}

void Document::Free::operator()(char *p) const { std::free(p); }

const Node *Node::find(std::string_view key) const {
    if (kind != Kind::Object) return nullptr;
    for (uint32_t k = 0; k < n; ++k)
        if (members[k].key == key) return &members[k].value;
    return nullptr;
}

// Bump allocation in chunks that never move. Chunks double from 64 KiB, so a
// jobspec costs one small chunk and a large JGF a few dozen big ones.
class Arena {
   public:
    using Chunk = std::unique_ptr<char, Document::Free>;

    // 8-byte aligned storage.
    void *alloc(size_t bytes) {
        bytes = (bytes + 7) & ~size_t{7};
        while (bytes > left_) {
            if (idx_ + 1 < chunks_.size()) {
                // Reuse a chunk kept from before a reset.
                ++idx_;
            } else {
                size_t size = std::max(bytes, next_);
                next_ = std::min(next_ * 2, kMaxChunk);
                char *mem = static_cast<char *>(std::malloc(size));
                if (!mem) throw std::bad_alloc();
                chunks_.emplace_back(mem);
                sizes_.push_back(size);
                idx_ = chunks_.size() - 1;
            }
            cur_ = chunks_[idx_].get();
            left_ = sizes_[idx_];
        }
        void *p = cur_;
        cur_ += bytes;
        left_ -= bytes;
        return p;
    }
    // Forget everything allocated; the chunks are reused.
    void reset() {
        idx_ = 0;
        cur_ = chunks_.empty() ? nullptr : chunks_[0].get();
        left_ = chunks_.empty() ? 0 : sizes_[0];
    }
    std::vector<Chunk> release() {
        sizes_.clear();
        cur_ = nullptr;
        left_ = 0;
        return std::move(chunks_);
    }

   private:
    static constexpr size_t kMaxChunk = size_t{8} << 20;
    size_t next_ = size_t{64} << 10;
    std::vector<Chunk> chunks_;
    std::vector<size_t> sizes_;
    size_t idx_ = 0;
    char *cur_ = nullptr;
    size_t left_ = 0;
};

// Owns the arenas of a Document while it is being built.
class DocumentBuilder {
   public:
    explicit DocumentBuilder(Document &d) : d_(d) {}
    ~DocumentBuilder() { d_.chunks_ = kept_.release(); }

    // Storage for strings, kept with the document.
    void *alloc(size_t bytes) { return kept_.alloc(bytes); }
    // Storage for arrays and objects: kept, or freed once the streamed
    // element after the current one has been handed over. Two arenas take
    // turns, so an element and the one after it are alive together.
    void *alloc_container(size_t bytes) {
        return transient_ ? element_[turn_].alloc(bytes) : kept_.alloc(bytes);
    }
    void begin_element() { transient_ = true; }
    // The current element is complete: the next one goes to the other arena,
    // whose element (the one before) has been handed over by now.
    void end_element() {
        transient_ = false;
        turn_ ^= 1;
        element_[turn_].reset();
    }
    Node &root() { return d_.root_; }

   private:
    Document &d_;
    Arena kept_;
    Arena element_[2];
    int turn_ = 0;
    bool transient_ = false;
};

namespace {

// Bytes a JSON string holds as they are (not a quote, backslash or control).
constexpr struct PlainBytes {
    bool at[256];
    constexpr PlainBytes() : at() {
        for (int c = 0x20; c < 256; ++c) at[c] = c != '"' && c != '\\';
    }
} kPlain;

class Parser {
   public:
    Parser(std::string_view t, DocumentBuilder &b, const std::vector<std::string_view> &stream,
           const ElementFn &on_element)
        : t_(t), b_(b), stream_(stream), on_element_(on_element) {}

    void document() {
        skip_ws();
        b_.root() = value(0, on_element_ ? 0 : -1);
        skip_ws();
        if (p_ != t_.size()) fail("trailing characters after the JSON value");
    }

   private:
    std::string_view t_;
    size_t p_ = 0;
    DocumentBuilder &b_;
    const std::vector<std::string_view> &stream_;
    const ElementFn &on_element_;
    // Items and members of the containers being read; each container takes
    // its own from the top when it closes, then copies them to the arena.
    std::vector<Node> item_stack_;
    std::vector<Member> member_stack_;
    std::string scratch_;

    [[noreturn]] void fail(const std::string &what) const {
        throw InputError("invalid JSON at byte " + std::to_string(p_) + ": " + what);
    }
    void skip_ws() {
        // Machine-written JSON (every JGF of a big cluster) has no whitespace
        // between tokens: one test settles it.
        if (p_ < t_.size() && static_cast<unsigned char>(t_[p_]) > ' ') return;
        while (p_ < t_.size() &&
               (t_[p_] == ' ' || t_[p_] == '\n' || t_[p_] == '\r' || t_[p_] == '\t'))
            ++p_;
    }
    char peek() const { return p_ < t_.size() ? t_[p_] : '\0'; }
    void expect(char c) {
        if (peek() != c) fail(std::string("expected '") + c + "'");
        ++p_;
    }
    void literal(const char *word) {
        size_t n = std::strlen(word);
        if (t_.substr(p_, n) != word) fail(std::string("expected '") + word + "'");
        p_ += n;
    }

    static Node make(Kind k) {
        Node v;
        v.kind = k;
        return v;
    }

    // `on_path`: how many keys of the streamed array's path lead here, or -1.
    Node value(int depth, int on_path) {
        if (depth > 512) fail("nesting too deep");
        switch (peek()) {
            case '{':
                return object(depth, on_path);
            case '[':
                return array(depth, on_path);
            case '"': {
                Node v = make(Kind::String);
                std::string_view sv = string();
                v.s = sv.data();
                v.n = static_cast<uint32_t>(sv.size());
                return v;
            }
            case 't': {
                literal("true");
                Node v = make(Kind::Bool);
                v.b = true;
                return v;
            }
            case 'f': {
                literal("false");
                Node v = make(Kind::Bool);
                v.b = false;
                return v;
            }
            case 'n':
                literal("null");
                return Node();
            default:
                return number();
        }
    }

    Node object(int depth, int on_path) {
        Node v = make(Kind::Object);
        v.members = nullptr;
        expect('{');
        skip_ws();
        if (peek() == '}') {
            ++p_;
            return v;
        }
        const size_t base = member_stack_.size();
        for (;;) {
            skip_ws();
            if (peek() != '"') fail("expected a string key");
            std::string_view key = string();
            skip_ws();
            expect(':');
            skip_ws();
            int child_path = -1;
            if (on_path >= 0 && static_cast<size_t>(on_path) < stream_.size() &&
                key == stream_[static_cast<size_t>(on_path)] &&
                std::none_of(member_stack_.begin() + static_cast<long>(base), member_stack_.end(),
                             [&](const Member &m) { return m.key == key; }))
                child_path = on_path + 1;
            Node item = value(depth + 1, child_path);
            member_stack_.push_back(Member{key, item});
            skip_ws();
            if (peek() == ',') {
                ++p_;
                continue;
            }
            expect('}');
            size_t count = member_stack_.size() - base;
            if (count > UINT32_MAX) fail("object too large");
            auto *m = static_cast<Member *>(b_.alloc_container(count * sizeof(Member)));
            std::copy(member_stack_.begin() + static_cast<long>(base), member_stack_.end(), m);
            member_stack_.resize(base);
            v.members = m;
            v.n = static_cast<uint32_t>(count);
            return v;
        }
    }

    Node array(int depth, int on_path) {
        Node v = make(Kind::Array);
        v.items = nullptr;
        expect('[');
        skip_ws();
        if (peek() == ']') {
            ++p_;
            return v;
        }
        if (on_path >= 0 && static_cast<size_t>(on_path) == stream_.size()) return streamed(depth);
        const size_t base = item_stack_.size();
        for (;;) {
            skip_ws();
            Node item = value(depth + 1, -1);
            item_stack_.push_back(item);
            skip_ws();
            if (peek() == ',') {
                ++p_;
                continue;
            }
            expect(']');
            size_t count = item_stack_.size() - base;
            if (count > UINT32_MAX) fail("array too large");
            auto *it = static_cast<Node *>(b_.alloc_container(count * sizeof(Node)));
            std::copy(item_stack_.begin() + static_cast<long>(base), item_stack_.end(), it);
            item_stack_.resize(base);
            v.items = it;
            v.n = static_cast<uint32_t>(count);
            return v;
        }
    }

    // The elements of a non-empty streamed array, past its '['.
    // Each element is handed over once the one after it is read.
    Node streamed(int depth) {
        Node before;
        bool have_before = false;
        for (;;) {
            skip_ws();
            b_.begin_element();
            Node item = value(depth + 1, -1);
            if (have_before) on_element_(before, &item);
            b_.end_element();
            before = item;
            have_before = true;
            skip_ws();
            if (peek() == ',') {
                ++p_;
                continue;
            }
            expect(']');
            on_element_(before, nullptr);
            Node v = make(Kind::Array);
            v.items = nullptr;
            return v;
        }
    }

    uint32_t hex4() {
        if (p_ + 4 > t_.size()) fail("truncated \\u escape");
        uint32_t cp = 0;
        for (int i = 0; i < 4; ++i) {
            char c = t_[p_++];
            cp <<= 4;
            if (c >= '0' && c <= '9')
                cp |= static_cast<uint32_t>(c - '0');
            else if (c >= 'a' && c <= 'f')
                cp |= static_cast<uint32_t>(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F')
                cp |= static_cast<uint32_t>(c - 'A' + 10);
            else
                fail("bad hex digit in \\u escape");
        }
        return cp;
    }

    // Moves past the bytes a string may hold as they are: it stops at a
    // quote, a backslash, a control character or the end of the text.
    void skip_plain() {
        const size_t n = t_.size();
        const char *d = t_.data();
#if defined(__SSE2__)
        // Sixteen bytes a step while they lie inside the text.
        const __m128i quote = _mm_set1_epi8('"');
        const __m128i backslash = _mm_set1_epi8('\\');
        const __m128i control = _mm_set1_epi8(0x1F);
        while (p_ + 16 <= n) {
            const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i *>(d + p_));
            const __m128i stop = _mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi8(c, quote), _mm_cmpeq_epi8(c, backslash)),
                _mm_cmpeq_epi8(_mm_max_epu8(c, control), control));
            const unsigned mask = static_cast<unsigned>(_mm_movemask_epi8(stop));
            if (mask) {
                p_ += static_cast<size_t>(__builtin_ctz(mask));
                return;
            }
            p_ += 16;
        }
#endif
        while (p_ < n && kPlain.at[static_cast<unsigned char>(d[p_])]) ++p_;
    }

    // A string without escapes is a view into the input; one with escapes is
    // decoded into the arena.
    std::string_view string() {
        expect('"');
        const size_t start = p_;
        skip_plain();
        if (p_ >= t_.size()) fail("unterminated string");
        const char c = t_[p_];
        if (c == '"') {
            const size_t len = p_ - start;
            ++p_;
            if (len > UINT32_MAX) fail("string too long");
            return {t_.data() + start, len};
        }
        if (c == '\\') return escaped_string(start);
        fail("control character in string");
    }

    // Decodes a string with escapes into the arena, from `start` (past the
    // opening quote); the plain runs between escapes are skipped as string()
    // skips them.
    std::string_view escaped_string(size_t start) {
        std::string &out = scratch_;
        out.clear();
        for (;;) {
            skip_plain();
            out.append(t_.data() + start, p_ - start);
            if (p_ >= t_.size()) fail("unterminated string");
            const char c = t_[p_];
            if (c == '"') {
                ++p_;
                if (out.size() > UINT32_MAX) fail("string too long");
                char *mem = static_cast<char *>(b_.alloc(out.size() + 1));
                std::memcpy(mem, out.data(), out.size());
                return std::string_view(mem, out.size());
            }
            if (c != '\\') fail("control character in string");
            ++p_;
            if (p_ >= t_.size()) fail("unterminated string");
            char e = t_[p_++];
            switch (e) {
                case '"': out += '"'; break;
                case '\\': out += '\\'; break;
                case '/': out += '/'; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case 'n': out += '\n'; break;
                case 'r': out += '\r'; break;
                case 't': out += '\t'; break;
                case 'u': {
                    uint32_t cp = hex4();
                    if (cp >= 0xDC00 && cp < 0xE000)
                        fail("lone low surrogate \\u escape (not valid Unicode); "
                             "write the character itself or a high+low surrogate pair");
                    if (cp >= 0xD800 && cp < 0xDC00) {
                        uint32_t lo = 0;
                        if (p_ + 1 < t_.size() && t_[p_] == '\\' && t_[p_ + 1] == 'u') {
                            p_ += 2;
                            lo = hex4();
                        }
                        if (!(lo >= 0xDC00 && lo < 0xE000))
                            fail("high surrogate \\u escape not followed by a low surrogate "
                                 "(not valid Unicode); write the character itself or a "
                                 "high+low surrogate pair");
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    }
                    append_utf8(out, cp);
                    break;
                }
                default:
                    fail("bad escape in string");
            }
            start = p_;
        }
    }

    Node number() {
        size_t s = p_;
        bool is_float = false;
        if (peek() == '-') ++p_;
        if (!(peek() >= '0' && peek() <= '9')) fail("unexpected character");
        while (peek() >= '0' && peek() <= '9') ++p_;
        if (peek() == '.') {
            is_float = true;
            ++p_;
            if (!(peek() >= '0' && peek() <= '9')) fail("digit expected after '.'");
            while (peek() >= '0' && peek() <= '9') ++p_;
        }
        if (peek() == 'e' || peek() == 'E') {
            is_float = true;
            ++p_;
            if (peek() == '+' || peek() == '-') ++p_;
            if (!(peek() >= '0' && peek() <= '9')) fail("digit expected in exponent");
            while (peek() >= '0' && peek() <= '9') ++p_;
        }
        if (!is_float) {
            // Same result as strtoll: out of range falls through to a double.
            int64_t v = 0;
            auto r = std::from_chars(t_.data() + s, t_.data() + p_, v);
            if (r.ec == std::errc()) {
                Node n = make(Kind::Int);
                n.i = v;
                return n;
            }
        }
        std::string tok(t_.substr(s, p_ - s));
        Node n = make(Kind::Double);
        n.d = std::strtod(tok.c_str(), nullptr);
        if (!std::isfinite(n.d))
            fail("number " + tok + " is out of the range of a double; use a smaller value");
        return n;
    }
};

void dump_into(std::string &out, const Value &v, bool spaced) {
    switch (v.kind()) {
        case Kind::Null:
            out += "null";
            break;
        case Kind::Bool:
            out += v.as_bool() ? "true" : "false";
            break;
        case Kind::Int:
            append_int(out, v.as_int());
            break;
        case Kind::Double: {
            char buf[64];
            double d = v.as_double();
            if (!std::isfinite(d)) {
                // JSON has no infinity or NaN; never emit text that is not JSON.
                out += "null";
                break;
            }
            if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1e15) {
                std::snprintf(buf, sizeof buf, "%.1f", d);
            } else {
                std::snprintf(buf, sizeof buf, "%.17g", d);
            }
            out += buf;
            break;
        }
        case Kind::String:
            dump_string(out, v.as_string());
            break;
        case Kind::Array: {
            out += '[';
            bool first = true;
            for (const auto &it : v.items()) {
                if (!first) out += spaced ? ", " : ",";
                first = false;
                dump_into(out, it, spaced);
            }
            out += ']';
            break;
        }
        case Kind::Object: {
            out += '{';
            bool first = true;
            for (const auto &kv : v.members()) {
                if (!first) out += spaced ? ", " : ",";
                first = false;
                dump_string(out, kv.first);
                out += spaced ? ": " : ":";
                dump_into(out, kv.second, spaced);
            }
            out += '}';
            break;
        }
    }
}

}  // namespace

void append_utf8(std::string &out, uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

Document parse_document(std::string_view text, const std::vector<std::string_view> &stream,
                        const ElementFn &on_element) {
    Document d;
    {
        DocumentBuilder b(d);
        Parser(text, b, stream, on_element).document();
    }
    return d;
}

Value to_value(const Node &n) {
    switch (n.kind) {
        case Kind::Null:
            return Value();
        case Kind::Bool:
            return Value::make_bool(n.b);
        case Kind::Int:
            return Value::make_int(n.i);
        case Kind::Double:
            return Value::make_double(n.d);
        case Kind::String:
            return Value::make_string(std::string(n.str()));
        case Kind::Array: {
            Value v = Value::make_array();
            v.items().reserve(n.n);
            for (const Node *it = n.begin_items(); it != n.end_items(); ++it) v.push(to_value(*it));
            return v;
        }
        case Kind::Object: {
            Value v = Value::make_object();
            v.members().reserve(n.n);
            for (uint32_t k = 0; k < n.n; ++k)
                v.members().emplace_back(std::string(n.members[k].key), to_value(n.members[k].value));
            return v;
        }
    }
    return Value();
}

Value parse(std::string_view text) { return to_value(parse_document(text).root()); }

void append_int(std::string &out, int64_t v) {
    char buf[24];
    auto res = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, res.ptr);
}

void dump_string(std::string &out, std::string_view s) {
    out += '"';
    // Most strings (names, paths, idsets) need no escape: append the clean
    // prefix at once and escape from the first character that needs it.
    size_t clean = 0;
    while (clean < s.size() && s[clean] != '"' && s[clean] != '\\' &&
           static_cast<unsigned char>(s[clean]) >= 0x20)
        ++clean;
    out.append(s.data(), clean);
    for (char ch : s.substr(clean)) {
        unsigned char c = static_cast<unsigned char>(ch);
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out += ch;
                }
        }
    }
    out += '"';
}

std::string dump(const Value &v, bool spaced) {
    std::string out;
    dump_into(out, v, spaced);
    return out;
}

}  // namespace fluxion::json
