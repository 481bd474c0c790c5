// A small JSON document model: enough to read JGF, jobspecs and R, and to
// write the exact text flux-sched's writers produce.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fluxion::json {

enum class Kind { Null, Bool, Int, Double, String, Array, Object };

class Value {
   public:
    Value() = default;
    static Value make_bool(bool b);
    static Value make_int(int64_t i);
    static Value make_double(double d);
    static Value make_string(std::string s);
    static Value make_array();
    static Value make_object();

    Kind kind() const { return kind_; }
    bool is_null() const { return kind_ == Kind::Null; }
    bool is_bool() const { return kind_ == Kind::Bool; }
    bool is_int() const { return kind_ == Kind::Int; }
    bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Double; }
    bool is_string() const { return kind_ == Kind::String; }
    bool is_array() const { return kind_ == Kind::Array; }
    bool is_object() const { return kind_ == Kind::Object; }

    bool as_bool() const { return b_; }
    int64_t as_int() const { return kind_ == Kind::Double ? static_cast<int64_t>(d_) : i_; }
    double as_double() const { return kind_ == Kind::Int ? static_cast<double>(i_) : d_; }
    const std::string &as_string() const { return s_; }
    const std::vector<Value> &items() const { return arr_; }
    std::vector<Value> &items() { return arr_; }
    // Object members keep their document order.
    const std::vector<std::pair<std::string, Value>> &members() const { return obj_; }
    std::vector<std::pair<std::string, Value>> &members() { return obj_; }

    const Value *find(std::string_view key) const;
    void set(std::string key, Value v);  // appends or replaces
    void push(Value v) { arr_.push_back(std::move(v)); }

   private:
    Kind kind_ = Kind::Null;
    bool b_ = false;
    int64_t i_ = 0;
    double d_ = 0.0;
    std::string s_;
    std::vector<Value> arr_;
    std::vector<std::pair<std::string, Value>> obj_;
};

// A read-only parse of a large text (a whole JGF): values are 16 bytes in one
// arena and strings point into the input unless they had escapes, so reading
// costs a fraction of building Values. The input must outlive the Document.
struct Member;
struct Node {
    Kind kind = Kind::Null;
    uint32_t n = 0;  // string length, or item / member count
    union {
        bool b;
        int64_t i;
        double d;
        const char *s;
        const Node *items;
        const Member *members;
    };
    Node() : i(0) {}

    bool is_null() const { return kind == Kind::Null; }
    bool is_bool() const { return kind == Kind::Bool; }
    bool is_int() const { return kind == Kind::Int; }
    bool is_string() const { return kind == Kind::String; }
    bool is_array() const { return kind == Kind::Array; }
    bool is_object() const { return kind == Kind::Object; }
    int64_t as_int() const { return kind == Kind::Double ? static_cast<int64_t>(d) : i; }
    std::string_view str() const { return {s, n}; }
    const Node *begin_items() const { return kind == Kind::Array ? items : nullptr; }
    const Node *end_items() const { return kind == Kind::Array ? items + n : nullptr; }
    size_t size() const { return kind == Kind::Array || kind == Kind::Object ? n : 0; }
    // First member with this key, as Value::find.
    const Node *find(std::string_view key) const;
};
struct Member {
    std::string_view key;
    Node value;
};

class Document {
   public:
    Document() = default;
    Document(Document &&) = default;
    Document &operator=(Document &&) = default;
    const Node &root() const { return root_; }

    struct Free {
        void operator()(char *p) const;
    };

   private:
    friend class DocumentBuilder;
    Node root_;
    std::vector<std::unique_ptr<char, Free>> chunks_;
};

// Called with each element of a streamed array while the text is parsed,
// once the element after it (`next`, null for the last) has been read too,
// so a reader can start fetching what the next element will need. The
// element's arrays and objects are freed after the call (keep no Node
// pointers); its strings live as long as the Document.
using ElementFn = std::function<void(const Node &element, const Node *next)>;

// Parse a complete JSON text; throws fluxion::InputError with the byte offset on error.
// When `stream` names an array by its object keys from the root (the first
// member of each key, as find() would pick), its elements go to `on_element`
// one by one instead of into the document, where the array stays empty.
Document parse_document(std::string_view text, const std::vector<std::string_view> &stream = {},
                        const ElementFn &on_element = {});
Value to_value(const Node &n);
Value parse(std::string_view text);

// Serialise. `spaced` writes ", " and ": " separators like Python's json.dumps defaults.
std::string dump(const Value &v, bool spaced = true);
void dump_string(std::string &out, std::string_view s);
// Appends `v` in decimal, as a JSON number.
void append_int(std::string &out, int64_t v);
// Appends code point `cp` (at most U+10FFFF, not a surrogate) as UTF-8.
void append_utf8(std::string &out, uint32_t cp);

}  // namespace fluxion::json
