#include "json.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "errors.hpp"

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

namespace {

class Parser {
   public:
    explicit Parser(std::string_view t) : t_(t) {}

    Value document() {
        skip_ws();
        Value v = value(0);
        skip_ws();
        if (p_ != t_.size()) fail("trailing characters after the JSON value");
        return v;
    }

   private:
    std::string_view t_;
    size_t p_ = 0;

    [[noreturn]] void fail(const std::string &what) const {
        throw InputError("invalid JSON at byte " + std::to_string(p_) + ": " + what);
    }
    void skip_ws() {
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

    Value value(int depth) {
        if (depth > 512) fail("nesting too deep");
        switch (peek()) {
            case '{':
                return object(depth);
            case '[':
                return array(depth);
            case '"':
                return Value::make_string(string());
            case 't':
                literal("true");
                return Value::make_bool(true);
            case 'f':
                literal("false");
                return Value::make_bool(false);
            case 'n':
                literal("null");
                return Value();
            default:
                return number();
        }
    }

    Value object(int depth) {
        Value v = Value::make_object();
        expect('{');
        skip_ws();
        if (peek() == '}') {
            ++p_;
            return v;
        }
        for (;;) {
            skip_ws();
            if (peek() != '"') fail("expected a string key");
            std::string key = string();
            skip_ws();
            expect(':');
            skip_ws();
            v.members().emplace_back(std::move(key), value(depth + 1));
            skip_ws();
            if (peek() == ',') {
                ++p_;
                continue;
            }
            expect('}');
            return v;
        }
    }

    Value array(int depth) {
        Value v = Value::make_array();
        expect('[');
        skip_ws();
        if (peek() == ']') {
            ++p_;
            return v;
        }
        for (;;) {
            skip_ws();
            v.push(value(depth + 1));
            skip_ws();
            if (peek() == ',') {
                ++p_;
                continue;
            }
            expect(']');
            return v;
        }
    }

    static void put_utf8(std::string &out, uint32_t cp) {
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

    std::string string() {
        expect('"');
        std::string out;
        size_t start = p_;
        // Fast path: copy runs without escapes.
        while (p_ < t_.size()) {
            char c = t_[p_];
            if (c == '"') {
                out.append(t_.data() + start, p_ - start);
                ++p_;
                return out;
            }
            if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
            if (c == '\\') {
                out.append(t_.data() + start, p_ - start);
                ++p_;
                if (p_ >= t_.size()) break;
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
                        if (cp >= 0xD800 && cp < 0xDC00 && p_ + 1 < t_.size() && t_[p_] == '\\' &&
                            t_[p_ + 1] == 'u') {
                            p_ += 2;
                            uint32_t lo = hex4();
                            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        }
                        put_utf8(out, cp);
                        break;
                    }
                    default:
                        fail("bad escape in string");
                }
                start = p_;
                continue;
            }
            ++p_;
        }
        fail("unterminated string");
    }

    Value number() {
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
        std::string tok(t_.substr(s, p_ - s));
        if (!is_float) {
            errno = 0;
            char *end = nullptr;
            long long v = std::strtoll(tok.c_str(), &end, 10);
            if (errno == 0) return Value::make_int(v);
        }
        return Value::make_double(std::strtod(tok.c_str(), nullptr));
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
            out += std::to_string(v.as_int());
            break;
        case Kind::Double: {
            char buf[64];
            double d = v.as_double();
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

Value parse(std::string_view text) { return Parser(text).document(); }

void dump_string(std::string &out, std::string_view s) {
    out += '"';
    for (char ch : s) {
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
