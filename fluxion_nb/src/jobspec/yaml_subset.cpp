// Reads the jobspec subset of YAML straight to JSON text in one pass.
//
// Every rule here is chosen so that an accepted document means exactly what
// PyYAML (pure or libyaml based) reads from it; where the two parsers or the
// YAML 1.1 resolvers leave any doubt the reader declines, since declining
// only costs the slow path while a wrong reading would change a jobspec.
#include "jobspec/yaml_subset.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <new>
#include <string>
#include <vector>

#include "util/json.hpp"

namespace fluxion {
namespace {

// Thrown inside the reader when the text leaves the subset; caught at the top.
struct Declined {};
[[noreturn]] void decline() { throw Declined{}; }

constexpr int kMaxDepth = 128;
// PyYAML and libyaml want the ':' of a simple key within 1024 characters of
// the key's start; a character is at least one byte.
constexpr size_t kMaxKey = 1000;

bool is_digit(char c) { return c >= '0' && c <= '9'; }
// Tabs and carriage returns never get this far (see printable_utf8).
bool blank_or_end(char c) { return c == ' ' || c == '\n' || c == '\0'; }
bool flow_indicator(char c) { return c == ',' || c == '[' || c == ']' || c == '{' || c == '}'; }
// Characters that cannot start a plain scalar (a '-' can, before a non-blank).
bool indicator(char c) {
    switch (c) {
        case '-': case '?': case ':': case ',': case '[': case ']': case '{': case '}': case '#':
        case '&': case '*': case '!': case '|': case '>': case '\'': case '"': case '%': case '@':
        case '`':
            return true;
        default:
            return false;
    }
}
// Characters at which a plain scalar may end or be declined.
bool plain_special(char c) {
    switch (c) {
        case '\0': case '\n': case ':': case '#': case ',': case '[': case ']': case '{': case '}':
        case '?':
            return true;
        default:
            return false;
    }
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// Strict UTF-8 holding only characters YAML accepts in a stream, less tabs,
// carriage returns, NEL/LS/PS (YAML 1.1 line breaks) and byte order marks:
// the reader then never meets a character whose meaning the two PyYAML
// parsers disagree on, and a NUL can mark the end of the text.
bool printable_utf8(std::string_view t) {
    size_t i = 0;
    const size_t n = t.size();
    while (i < n) {
        auto c = static_cast<unsigned char>(t[i]);
        if (c >= 0x20 && c < 0x7F) {
            ++i;
            continue;
        }
        if (c < 0x80) {
            if (c != '\n' && (c < 0x20 || c == 0x7F)) return false;
            ++i;
            continue;
        }
        uint32_t cp;
        size_t len;
        if (c >= 0xC2 && c <= 0xDF) {
            cp = c & 0x1F;
            len = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            cp = c & 0x0F;
            len = 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            cp = c & 0x07;
            len = 4;
        } else {
            return false;
        }
        if (n - i < len) return false;
        for (size_t k = 1; k < len; ++k) {
            auto cc = static_cast<unsigned char>(t[i + k]);
            if ((cc & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (cc & 0x3F);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return false;
        if (cp < 0xA0 || (cp >= 0xD800 && cp < 0xE000) || cp == 0x2028 || cp == 0x2029 || cp == 0xFEFF ||
            cp == 0xFFFE || cp == 0xFFFF)
            return false;
        i += len;
    }
    return true;
}

// What a plain scalar resolves to under PyYAML's YAML 1.1 resolvers.
enum class Tag { Null, True, False, Int, Float, Str };

struct Resolved {
    Tag tag = Tag::Str;
    int64_t i = 0;
};

bool one_of(std::string_view v, std::initializer_list<std::string_view> words) {
    for (std::string_view w : words)
        if (v == w) return true;
    return false;
}

// [-+]?(0|[1-9][0-9]*) within int64.
bool decimal_int(std::string_view v, int64_t &out) {
    size_t i = (v[0] == '-' || v[0] == '+') ? 1 : 0;
    const size_t digits = v.size() - i;
    if (digits == 0 || digits > 19 || (digits > 1 && v[i] == '0')) return false;
    uint64_t x = 0;
    for (size_t k = i; k < v.size(); ++k) {
        if (!is_digit(v[k])) return false;
        x = x * 10 + static_cast<uint64_t>(v[k] - '0');  // 19 digits fit in uint64
    }
    const bool neg = v[0] == '-';
    const uint64_t limit = neg ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
    if (x > limit) return false;
    out = neg ? static_cast<int64_t>(0 - x) : static_cast<int64_t>(x);
    return true;
}

// [-+]?[0-9]+\.[0-9]*([eE][-+][0-9]+)? : PyYAML's float form less
// underscores, sexagesimals, .inf and .nan.
struct FloatParts {
    bool neg = false;
    std::string_view whole, frac, exp;  // exp keeps its sign
};

bool float_form(std::string_view v, FloatParts &f) {
    size_t i = 0;
    if (v[0] == '-' || v[0] == '+') {
        f.neg = v[0] == '-';
        i = 1;
    }
    size_t s = i;
    while (i < v.size() && is_digit(v[i])) ++i;
    if (i == s || i == v.size() || v[i] != '.') return false;
    f.whole = v.substr(s, i - s);
    s = ++i;
    while (i < v.size() && is_digit(v[i])) ++i;
    f.frac = v.substr(s, i - s);
    if (i == v.size()) return true;
    if ((v[i] != 'e' && v[i] != 'E') || i + 2 >= v.size() || (v[i + 1] != '-' && v[i + 1] != '+')) return false;
    f.exp = v.substr(i + 1);
    for (size_t k = i + 2; k < v.size(); ++k)
        if (!is_digit(v[k])) return false;
    return true;
}

// Whether PyYAML's int, float or timestamp resolver might match `v` (which
// starts with a digit, sign or '.'), in a spelling not converted here; a
// superset of their patterns that still lets "0-15" or "1.2.3-rc" be strings.
bool maybe_number_or_time(std::string_view v) {
    // Timestamps start with a four-digit year and a '-'.
    if (v.size() > 4 && std::all_of(v.begin(), v.begin() + 4, is_digit) && v[4] == '-') return true;
    // Numbers: digits, hex digits, "0x", "0b", ".inf", ".nan", '_', ':', '.',
    // with a sign only first or after an exponent's 'e'.
    bool has_digit_or_dot = false;
    for (size_t i = 0; i < v.size(); ++i) {
        const char c = v[i];
        if (c == '-' || c == '+') {
            if (i > 0 && v[i - 1] != 'e' && v[i - 1] != 'E') return false;
        } else if (!is_digit(c) && !std::strchr("._:abcdefABCDEFxinIN", c)) {
            return false;
        }
        has_digit_or_dot = has_digit_or_dot || is_digit(c) || c == '.';
    }
    return has_digit_or_dot;
}

Resolved resolve(std::string_view v) {
    Resolved r;
    // The null and bool words are 1 to 5 characters long and start with one of "~nNyYtTfFoO".
    bool word = v.size() <= 5;
    if (word && !v.empty()) {
        switch (v[0]) {
            case '~': case 'n': case 'N': case 'y': case 'Y': case 't': case 'T': case 'f': case 'F':
            case 'o': case 'O':
                break;
            default:
                word = false;
        }
    }
    if (v.empty() || (word && one_of(v, {"~", "null", "Null", "NULL"}))) {
        r.tag = Tag::Null;
    } else if (word && one_of(v, {"yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"})) {
        r.tag = Tag::True;
    } else if (word && one_of(v, {"no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"})) {
        r.tag = Tag::False;
    } else if (v == "=" || v == "<<") {
        decline();  // the value and merge tags, which SafeLoader cannot construct as scalars
    } else if (is_digit(v[0]) || v[0] == '-' || v[0] == '+' || v[0] == '.') {
        // Only these first characters can start an int, float or timestamp.
        FloatParts f;
        if (decimal_int(v, r.i)) {
            r.tag = Tag::Int;
        } else if (float_form(v, f)) {
            r.tag = Tag::Float;
        } else if (maybe_number_or_time(v)) {
            decline();
        }
    }
    return r;
}

// The float as a JSON number with the same decimal value: Python's float()
// and the core's strtod both round correctly, so they read the double that
// PyYAML's float() read from the literal. Values near or past the range of a
// double are declined (PyYAML makes them inf, which JSON cannot hold).
void write_float(std::string &out, std::string_view v) {
    FloatParts f;
    float_form(v, f);
    size_t z = 0;
    while (z < f.whole.size() && f.whole[z] == '0') ++z;
    std::string_view whole = f.whole.substr(z);
    if (!f.exp.empty()) {
        std::string_view digits = f.exp.substr(1);
        size_t ez = 0;
        while (ez + 1 < digits.size() && digits[ez] == '0') ++ez;
        digits = digits.substr(ez);
        if (digits.size() > 4) decline();
        int e = 0;
        for (char c : digits) e = e * 10 + (c - '0');
        if (f.exp[0] == '+' && static_cast<int>(whole.size()) + e > 300) decline();
    }
    if (whole.size() > 300) decline();
    if (f.neg) out += '-';
    if (whole.empty()) out += '0';
    out += whole;
    out += '.';
    if (f.frac.empty()) out += '0';
    out += f.frac;
    if (!f.exp.empty()) {
        out += 'e';
        out += f.exp;
    }
}

struct Scalar {
    std::string_view text;  // into the input, or into the reader's scratch buffer
    bool quoted = false;
};

// A key already written: its JSON text in the output and, for an int or a
// bool, its value as a Python dict key (True is 1, False is 0).
struct Key {
    size_t at = 0, len = 0;
    bool numeric = false;
    int64_t value = 0;
};

class Reader {
   public:
    Reader(std::string_view text, std::string &out) : t_(text), out_(out) {}

    void document() {
        skip_to_content();
        if (at_marker("---")) {
            p_ += 3;
            end_line();
        }
        if (at_end()) decline();  // an empty document, or a second one
        block_node(-1);
        if (eof()) return;
        if (!at_marker("...")) decline();
        p_ += 3;
        end_line();
        if (!eof()) decline();
    }

   private:
    std::string_view t_;
    std::string &out_;
    size_t p_ = 0;     // cursor
    size_t line_ = 0;  // where the cursor's line starts
    int depth_ = 0;
    std::string scratch_;    // unescaped text of the last quoted scalar
    std::vector<Key> keys_;  // of the mappings being read, innermost last
    // Fluxion's jobspec reader takes a property only as a quoted string, and
    // JSON cannot say which scalars were quoted: a sequence under a
    // "properties" key holding a plain scalar is left to the full YAML reader.
    bool props_key_ = false;  // the value about to be read is a "properties" key's
    int props_depth_ = -1;    // depth of the "properties" sequence being read

    char at(size_t i) const { return i < t_.size() ? t_[i] : '\0'; }
    char cur() const { return at(p_); }
    bool eof() const { return p_ >= t_.size(); }
    int column() const { return static_cast<int>(p_ - line_); }

    bool at_marker(std::string_view m) const {
        return p_ == line_ && p_ + 3 <= t_.size() && t_.compare(p_, 3, m) == 0 && blank_or_end(at(p_ + 3));
    }
    // No more content in this document: the end of the text or a marker line.
    bool at_end() const { return eof() || at_marker("---") || at_marker("..."); }
    // A '#' starts a comment only at the start of a line or after a space.
    bool at_comment() const { return cur() == '#' && (p_ == line_ || t_[p_ - 1] == ' '); }
    bool at_entry() const { return cur() == '-' && blank_or_end(at(p_ + 1)); }

    void enter() {
        if (++depth_ > kMaxDepth) decline();
    }
    void leave() { --depth_; }

    // A sequence just entered: is it a "properties" list? Returns the depth of
    // the one it is nested in, to restore on leaving.
    int enter_props() {
        const int outer = props_depth_;
        props_depth_ = props_key_ ? depth_ : -1;
        props_key_ = false;
        return outer;
    }

    // Past spaces, comments and line breaks, to the next token or the end.
    void skip_to_content() {
        for (;;) {
            while (cur() == ' ') ++p_;
            if (at_comment())
                while (cur() != '\n' && cur() != '\0') ++p_;
            if (cur() != '\n') return;
            line_ = ++p_;
        }
    }

    // After the last token of a line only spaces and a comment may follow.
    void end_line() {
        while (cur() == ' ') ++p_;
        if (cur() != '\n' && cur() != '\0' && !at_comment()) decline();
        skip_to_content();
    }

    // Spaces before a ':' that makes the scalar just read a mapping key.
    bool key_follows() {
        while (cur() == ' ') ++p_;
        return cur() == ':' && blank_or_end(at(p_ + 1));
    }

    // ---- block structure -------------------------------------------------
    // Each reader leaves the cursor on the first token of a later line (or at
    // the end), so the enclosing collection decides by its column whether the
    // token is its next entry (same column), not its own (less) or an error
    // or a continued plain scalar (more: declined).

    // A node starting at the cursor, more indented than its parent collection.
    void block_node(int parent) {
        if (at_entry()) return block_sequence(column(), false);
        if (cur() == '[' || cur() == '{') {
            flow_node(parent);
            return end_line();
        }
        const size_t start = p_;
        const int col = column();
        Scalar s = scalar(false);
        if (key_follows()) {
            p_ = start;
            return block_mapping(col);
        }
        write_value(s);
        end_line();
    }

    void block_mapping(int indent) {
        enter();
        out_ += '{';
        const size_t keys = keys_.size();
        for (bool first = true;; first = false) {
            const size_t start = p_;
            Scalar k = scalar(false);
            if (!key_follows() || p_ - start > kMaxKey) decline();
            ++p_;
            if (!first) out_ += ',';
            write_key(k);
            out_ += ':';
            props_key_ = k.text == "properties";
            block_value(indent);
            props_key_ = false;
            if (at_end() || column() < indent) break;
            if (column() > indent) decline();
        }
        check_unique(keys);
        out_ += '}';
        leave();
    }

    // The value after "key:" in a mapping at `indent`.
    void block_value(int indent) {
        while (cur() == ' ') ++p_;
        if (cur() == '\n' || cur() == '\0' || at_comment()) {
            end_line();
            if (!at_end() && column() > indent) return block_node(indent);
            // A sequence may sit at its key's own indentation.
            if (!at_end() && column() == indent && at_entry()) return block_sequence(indent, true);
            out_ += "null";
            return;
        }
        if (cur() == '[' || cur() == '{') {
            flow_node(indent);
            return end_line();
        }
        Scalar v = scalar(false);  // declines a "- " here, which YAML forbids
        if (key_follows()) decline();
        write_value(v);
        end_line();
    }

    // Entries at `indent`; an indentless one ends at a non-entry token there.
    void block_sequence(int indent, bool indentless) {
        enter();
        const int outer_props = enter_props();
        out_ += '[';
        for (bool first = true;; first = false) {
            ++p_;  // the '-'
            if (!first) out_ += ',';
            while (cur() == ' ') ++p_;
            if (cur() == '\n' || cur() == '\0' || at_comment()) {
                end_line();
                if (!at_end() && column() > indent)
                    block_node(indent);
                else
                    out_ += "null";
            } else {
                block_node(indent);  // on the entry's line: "- a", "- k: v", "- - a", "- [a]"
            }
            if (at_end() || column() < indent) break;
            if (column() > indent) decline();
            if (!at_entry()) {
                if (indentless) break;
                decline();
            }
        }
        out_ += ']';
        props_depth_ = outer_props;
        leave();
    }

    // ---- flow collections ------------------------------------------------

    // Inside a flow collection lines must be indented past the enclosing
    // block collection at `indent` and hold no document marker.
    void flow_skip(int indent) {
        const size_t line = line_;
        skip_to_content();
        if (line_ != line && (column() <= indent || at_marker("---") || at_marker("..."))) decline();
    }

    void flow_node(int indent) {
        if (cur() == '[')
            flow_sequence(indent);
        else if (cur() == '{')
            flow_mapping(indent);
        else
            write_value(scalar(true));
    }

    void flow_sequence(int indent) {
        enter();
        const int outer_props = enter_props();
        ++p_;
        out_ += '[';
        flow_skip(indent);
        if (cur() != ']') {
            for (;;) {
                flow_node(indent);  // a trailing ',' leaves ']' here, which no node starts with
                flow_skip(indent);
                if (cur() == ']') break;
                if (cur() != ',') decline();  // also "[a: b]", a mapping in the sequence
                ++p_;
                out_ += ',';
                flow_skip(indent);
            }
        }
        ++p_;
        out_ += ']';
        props_depth_ = outer_props;
        leave();
    }

    void flow_mapping(int indent) {
        enter();
        ++p_;
        out_ += '{';
        const size_t keys = keys_.size();
        flow_skip(indent);
        if (cur() != '}') {
            for (bool first = true;; first = false) {
                if (cur() == '[' || cur() == '{') decline();
                const size_t start = p_;
                Scalar k = scalar(true);
                while (cur() == ' ') ++p_;
                // A plain key's ':' is followed by a blank, or scalar() declined;
                // a quoted key's may be followed by anything, as in JSON.
                if (cur() != ':' || p_ - start > kMaxKey) decline();
                ++p_;
                if (!first) out_ += ',';
                write_key(k);
                out_ += ':';
                flow_skip(indent);
                props_key_ = k.text == "properties";
                flow_node(indent);  // an empty value leaves ',' or '}', which no node starts with
                props_key_ = false;
                flow_skip(indent);
                if (cur() == '}') break;
                if (cur() != ',') decline();
                ++p_;
                flow_skip(indent);
            }
        }
        check_unique(keys);
        ++p_;
        out_ += '}';
        leave();
    }

    // ---- scalars ---------------------------------------------------------

    Scalar scalar(bool flow) {
        if (cur() == '"') return double_quoted();
        if (cur() == '\'') return single_quoted();
        return plain(flow);
    }

    // One line of a plain scalar. In flow context a ':' not followed by a
    // blank and any '?' are declined: pure PyYAML and libyaml split those
    // scalars differently.
    Scalar plain(bool flow) {
        const char c = cur(), next = at(p_ + 1);
        if (blank_or_end(c) || indicator(c)) {
            if (c != '-' || blank_or_end(next) || (flow && flow_indicator(next))) decline();
        }
        const size_t start = p_;
        size_t end = p_;
        for (;; ++p_) {
            const char ch = cur();
            if (ch == ' ') continue;
            if (plain_special(ch)) {
                if (ch == '\n' || ch == '\0') break;
                if (ch == ':') {
                    if (blank_or_end(at(p_ + 1))) break;
                    if (flow) decline();
                } else if (ch == '#') {
                    if (t_[p_ - 1] == ' ') break;
                } else if (flow) {
                    if (ch == '?') decline();
                    break;
                }
            }
            end = p_ + 1;
        }
        p_ = end;  // trailing spaces belong to what follows
        return Scalar{t_.substr(start, end - start), false};
    }

    Scalar single_quoted() {
        const size_t start = ++p_;
        bool doubled = false;
        for (;;) {
            const char c = cur();
            if (c == '\n' || c == '\0') decline();  // multi-line or unterminated
            if (c == '\'') {
                if (at(p_ + 1) != '\'') break;
                doubled = true;
                ++p_;
            }
            ++p_;
        }
        std::string_view raw = t_.substr(start, p_ - start);
        ++p_;
        if (!doubled) return Scalar{raw, true};
        scratch_.clear();
        for (size_t i = 0; i < raw.size(); ++i) {
            scratch_ += raw[i];
            if (raw[i] == '\'') ++i;
        }
        return Scalar{scratch_, true};
    }

    Scalar double_quoted() {
        const size_t start = ++p_;
        for (;;) {
            const char c = cur();
            if (c == '"') {
                ++p_;
                return Scalar{t_.substr(start, p_ - 1 - start), true};
            }
            if (c == '\\') break;
            if (c == '\n' || c == '\0') decline();
            ++p_;
        }
        scratch_.assign(t_.data() + start, p_ - start);
        for (;;) {
            const char c = cur();
            if (c == '"') break;
            if (c == '\n' || c == '\0') decline();
            if (c != '\\') {
                scratch_ += c;
                ++p_;
                continue;
            }
            const char e = at(p_ + 1);
            p_ += 2;
            // YAML 1.1's escapes, as both PyYAML parsers read them.
            switch (e) {
                case '"':
                case '\\':
                case '/':
                case ' ':
                    scratch_ += e;
                    break;
                case '0':
                    scratch_ += '\0';
                    break;
                case 'a':
                    scratch_ += '\a';
                    break;
                case 'b':
                    scratch_ += '\b';
                    break;
                case 't':
                    scratch_ += '\t';
                    break;
                case 'n':
                    scratch_ += '\n';
                    break;
                case 'v':
                    scratch_ += '\v';
                    break;
                case 'f':
                    scratch_ += '\f';
                    break;
                case 'r':
                    scratch_ += '\r';
                    break;
                case 'e':
                    scratch_ += '\x1B';
                    break;
                case 'N':
                    json::append_utf8(scratch_, 0x85);
                    break;
                case '_':
                    json::append_utf8(scratch_, 0xA0);
                    break;
                case 'L':
                    json::append_utf8(scratch_, 0x2028);
                    break;
                case 'P':
                    json::append_utf8(scratch_, 0x2029);
                    break;
                case 'x':
                    json::append_utf8(scratch_, hex_escape(2));
                    break;
                case 'u':
                    json::append_utf8(scratch_, hex_escape(4));
                    break;
                case 'U':
                    json::append_utf8(scratch_, hex_escape(8));
                    break;
                default:
                    decline();  // line continuations and unknown escapes
            }
        }
        ++p_;
        return Scalar{scratch_, true};
    }

    // The code point of `digits` hex digits at the cursor. libyaml rejects
    // surrogates, which pure PyYAML keeps unpaired; both reject past U+10FFFF.
    uint32_t hex_escape(int digits) {
        uint32_t cp = 0;
        for (int k = 0; k < digits; ++k, ++p_) {
            const int h = hex_value(cur());
            if (h < 0) decline();
            cp = cp * 16 + static_cast<uint32_t>(h);
        }
        if ((cp >= 0xD800 && cp < 0xE000) || cp > 0x10FFFF) decline();
        return cp;
    }

    void write_value(const Scalar &s) {
        if (s.quoted) return json::dump_string(out_, s.text);
        if (props_depth_ == depth_) decline();
        const Resolved r = resolve(s.text);
        switch (r.tag) {
            case Tag::Null:
                out_ += "null";
                break;
            case Tag::True:
                out_ += "true";
                break;
            case Tag::False:
                out_ += "false";
                break;
            case Tag::Int:
                out_ += std::to_string(r.i);
                break;
            case Tag::Float:
                write_float(out_, s.text);
                break;
            case Tag::Str:
                json::dump_string(out_, s.text);
                break;
        }
    }

    // Writes the key as json.dumps writes the key PyYAML builds: None, True,
    // False and ints become "null", "true", "false" and digits.
    void write_key(const Scalar &k) {
        Key key;
        key.at = out_.size();
        if (k.quoted) {
            json::dump_string(out_, k.text);
        } else {
            const Resolved r = resolve(k.text);
            switch (r.tag) {
                case Tag::Null:
                    out_ += "\"null\"";
                    break;
                case Tag::True:
                case Tag::False:
                    out_ += r.tag == Tag::True ? "\"true\"" : "\"false\"";
                    key.numeric = true;
                    key.value = r.tag == Tag::True;
                    break;
                case Tag::Int:
                    out_ += '"';
                    out_ += std::to_string(r.i);
                    out_ += '"';
                    key.numeric = true;
                    key.value = r.i;
                    break;
                case Tag::Float:
                    decline();  // its JSON text would be Python's repr of the float
                case Tag::Str:
                    json::dump_string(out_, k.text);
                    break;
            }
        }
        key.len = out_.size() - key.at;
        keys_.push_back(key);
    }

    // PyYAML keeps the last of duplicate keys at the first one's place; the
    // core's JSON reader may not, so duplicates are declined: keys that
    // json.dumps writes alike ("1" and 1) or that a dict holds as one (1 and
    // True). Pops the keys of the mapping that started at `first`.
    void check_unique(size_t first) {
        const size_t n = keys_.size() - first;
        auto text = [this](const Key &k) { return std::string_view(out_).substr(k.at, k.len); };
        auto same = [&text](const Key &a, const Key &b) {
            return text(a) == text(b) || (a.numeric && b.numeric && a.value == b.value);
        };
        if (n <= 16) {
            for (size_t i = first; i < keys_.size(); ++i)
                for (size_t j = i + 1; j < keys_.size(); ++j)
                    if (same(keys_[i], keys_[j])) decline();
        } else {
            std::vector<std::string_view> texts;
            std::vector<int64_t> values;
            for (size_t i = first; i < keys_.size(); ++i) {
                texts.push_back(text(keys_[i]));
                if (keys_[i].numeric) values.push_back(keys_[i].value);
            }
            std::sort(texts.begin(), texts.end());
            std::sort(values.begin(), values.end());
            if (std::adjacent_find(texts.begin(), texts.end()) != texts.end() ||
                std::adjacent_find(values.begin(), values.end()) != values.end())
                decline();
        }
        keys_.resize(first);
    }
};

}  // namespace

bool yaml_subset_to_json(std::string_view text, std::string &json_out) {
    json_out.clear();
    if (!printable_utf8(text)) return false;
    try {
        Reader(text, json_out).document();
        return true;
    } catch (const Declined &) {
        return false;
    } catch (const std::bad_alloc &) {
        return false;  // the full parser will not fare better, but it reports it
    }
}

}  // namespace fluxion
