// The fast YAML reader: the shapes jobspecs take read to the JSON that
// PyYAML + json.dumps would give, and everything it is not sure of is
// declined (tests/unit/test_jobspec_yaml.py compares it with PyYAML itself).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "util/json.hpp"
#include "jobspec/yaml_subset.hpp"

using namespace fluxion;

namespace {

std::string read(const std::string &yaml) {
    std::string out;
    EXPECT_TRUE(yaml_subset_to_json(yaml, out)) << "declined: " << yaml;
    return out;
}

bool declined(const std::string &yaml) {
    std::string out;
    return !yaml_subset_to_json(yaml, out);
}

const char *kJobspec = R"(# a comment
version: 1
resources:
  - type: node
    count: 2
    exclusive: true
    with:
      - type: slot
        count: 1
        label: default
        with:
          - type: core
            count: 4
attributes:
  system:
    duration: 3600.0
tasks:
  - command: [ "app", 'x' ]
    slot: default
    count:
      per_slot: 1
)";

}  // namespace

TEST(YamlSubset, ReadsAJobspec) {
    EXPECT_EQ(read(kJobspec),
              R"({"version":1,"resources":[{"type":"node","count":2,"exclusive":true,"with":[)"
              R"({"type":"slot","count":1,"label":"default","with":[{"type":"core","count":4}]}]}],)"
              R"("attributes":{"system":{"duration":3600.0}},)"
              R"("tasks":[{"command":["app","x"],"slot":"default","count":{"per_slot":1}}]})");
    // The core's own JSON reader takes the output.
    json::Value v = json::parse(read(kJobspec));
    EXPECT_EQ(v.find("version")->as_int(), 1);
    EXPECT_TRUE(v.find("attributes")->find("system")->find("duration")->kind() == json::Kind::Double);
}

TEST(YamlSubset, ReadsJsonDocuments) {
    EXPECT_EQ(read(R"({"a": [1, -2, "x", true, null], "b": {"c": {}}, "d": []})"),
              R"({"a":[1,-2,"x",true,null],"b":{"c":{}},"d":[]})");
    EXPECT_EQ(read("{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": \"\\u00e9\\/\\n\"\n}\n"),
              "{\"a\":[1,2],\"b\":\"\xC3\xA9/\\n\"}");
    EXPECT_EQ(read(R"({"a":1,"b":"c"})"), R"({"a":1,"b":"c"})");
}

TEST(YamlSubset, ResolvesPlainScalarsAsYaml11) {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"~", "null"},        {"null", "null"},     {"NULL", "null"},     {"", "null"},
        {"yes", "true"},      {"On", "true"},       {"TRUE", "true"},     {"no", "false"},
        {"off", "false"},     {"False", "false"},   {"y", "\"y\""},       {"0", "0"},
        {"-5", "-5"},         {"+7", "7"},          {"-0", "0"},          {"1.5", "1.5"},
        {"-0.0", "-0.0"},     {"1.", "1.0"},        {"007.50", "7.50"},   {"1.0e+3", "1.0e+3"},
        {"2.5E-3", "2.5e-3"}, {"0-15", "\"0-15\""}, {"-a", "\"-a\""},     {"a b", "\"a b\""},
        {"a#b", "\"a#b\""},   {"x:y", "\"x:y\""},   {"http://h/p", "\"http://h/p\""},
        {"9223372036854775807", "9223372036854775807"},
        {"-9223372036854775808", "-9223372036854775808"},
    };
    for (const auto &[yaml, want] : cases) EXPECT_EQ(read("k: " + yaml + "\n"), "{\"k\":" + want + "}") << yaml;
}

TEST(YamlSubset, QuotedScalarsAreStrings) {
    EXPECT_EQ(read("a: 'yes'\nb: \"1\"\nc: 'it''s'\nd: \"q\\\"\\\\\\t\\u00e9\\x41\\U0001F600\"\ne: ''\n"),
              "{\"a\":\"yes\",\"b\":\"1\",\"c\":\"it's\",\"d\":\"q\\\"\\\\\\téA\xF0\x9F\x98\x80\",\"e\":\"\"}");
    // Control characters come out escaped as JSON wants them.
    EXPECT_EQ(read("a: \"\\0\\e\"\n"), R"({"a":"\u0000\u001b"})");
}

TEST(YamlSubset, KeysBecomeTheTextJsonDumpsWrites) {
    EXPECT_EQ(read("1: a\nfalse: b\n~: c\n'x y': d\n\"q\": e\n+5: f\n"),
              R"({"1":"a","false":"b","null":"c","x y":"d","q":"e","5":"f"})");
}

TEST(YamlSubset, BlockSequenceForms) {
    // Indentless under a key, compact mappings, nested on one line, empty entries.
    EXPECT_EQ(read("a:\n- 1\n- b: 2\n  c: 3\nd: 4\n"), R"({"a":[1,{"b":2,"c":3}],"d":4})");
    EXPECT_EQ(read("- - a\n  - b\n- c\n"), R"([["a","b"],"c"])");
    EXPECT_EQ(read("- a\n-\n- # c\n- [x, {y: z}]\n"), R"(["a",null,null,["x",{"y":"z"}]])");
    EXPECT_EQ(read("-\n  a: 1\n"), R"([{"a":1}])");
}

TEST(YamlSubset, EmptyValuesAndComments) {
    EXPECT_EQ(read("a:\nb: # c\n# whole line\n  # indented\nc: 1 # after\n"), R"({"a":null,"b":null,"c":1})");
    EXPECT_EQ(read("---\na: 1\n...\n# trailing\n"), R"({"a":1})");
    EXPECT_EQ(read("--- # c\n  a: 1\n  b: 2\n"), R"({"a":1,"b":2})");
}

TEST(YamlSubset, FlowCollectionsAcrossLines) {
    EXPECT_EQ(read("a: [1,\n  2, # c\n  3]\nb: {x: 1,\n  y: 2}\n"), R"({"a":[1,2,3],"b":{"x":1,"y":2}})");
    EXPECT_EQ(read("a:\n  b: [1,\n    2]\n  c: 3\n"), R"({"a":{"b":[1,2],"c":3}})");
}

TEST(YamlSubset, DeclinesWhatItDoesNotRead) {
    const std::vector<std::string> inputs = {
        "", "# only a comment\n", "---\n", "---\n...\n",  // empty documents
        "a: &x 1\nb: *x\n", "a: !!str 1\n", "!t\na: 1\n",  // anchors, aliases, tags
        "a: |\n  x\n", "a: >\n  x\n",                       // block scalars
        "? a\n: b\n", "[a]: b\n", "{a: 1}: b\n",           // complex keys
        "<<: {a: 1}\n", "a: <<\n", "a: =\n",               // merge and value tags
        "a: 1\na: 2\n", "1: a\ntrue: b\n", "null: a\n~: b\n", "1: a\n'1': b\n", "{a: 1, a: 2}",
        "a: 1\n---\nb: 2\n", "a: 1\n...\nb: 2\n", "%YAML 1.1\n---\na: 1\n", "--- {a: 1}\n",
        "a:\tb\n", "\ta: b\n", "a: 'x\ty'\n", "a: b\r\n",  // tabs, carriage returns
        "a: b\n  c\n", "- a\n  b\n", "a: 'b\n  c'\n", "a: \"b\n  c\"\n", "a: \"b\\\n  c\"\n",
        "a: 0x1F\n", "a: 0b1\n", "a: 010\n", "a: 00\n", "a: 1_000\n", "a: 1:30\n", "a: 1.5:30\n",
        "a: 2001-12-14\n", "a: 2001-12-14 21:59:43.10 -5\n", "a: .inf\n", "a: -.Inf\n", "a: .nan\n",
        "a: .5\n", "a: 1e5\n", "a: 1.0e+999\n", "a: 1.0e+00400\n", "a: 9223372036854775808\n",
        "a: -9223372036854775809\n", "1.5: a\n", "a: 1.2.3a\n",
        "a: \"\\ud83d\\ude00\"\n", "a: \"\\U00110000\"\n", "a: \"\\q\"\n", "a: \"\\x4\"\n",
        "[a, b,]\n", "[,]\n", "{a, b: 1}\n", "{a: }\n", "{a:1}\n", "[a?b]\n", "[a: 1]\n", "[-]\n",
        "a: [1,\n2]\n", "[1,\n---\n]\n", "a: [1]x\n", "a: \"b\"#c\n", "[1,#c\n2]\n",
        "a: b: c\n", "a: - b\n", "- a: 1\n  - b\n", "a:\n  - 1\n - 2\n", "  a: 1\nb: 2\n",
        "a:\n    b: 1\n  c: 2\n", "-\n  a\n  b\n", "a: 'unterminated\n", "a: \"unterminated",
        "@a: 1\n", "`a`: 1\n", "a: %x\n", "a: @x\n", ":a: 1\n", "a: ?x\n",
        std::string("a: b\0c\n", 7), "a: \x7f\n", "a: \xC2\x85\n", "a: \xE2\x80\xA8\n",
        "\xEF\xBB\xBF" "a: 1\n", "a: \xC3\n", "a: \xC0\xAF\n", "a: \xED\xA0\x80\n", "a: \xF4\x90\x80\x80\n",
        std::string(129, '[') + std::string(129, ']'), std::string(1100, 'k') + ": v\n",
    };
    for (const auto &text : inputs) EXPECT_TRUE(declined(text)) << text;
}

TEST(YamlSubset, NestingUpToTheDepthCapIsRead) {
    std::string deep = std::string(128, '[') + std::string(128, ']');
    EXPECT_EQ(read(deep), deep);
    std::string block;
    for (int i = 0; i < 100; ++i) block += std::string(static_cast<size_t>(i), ' ') + "k:\n";
    block += std::string(100, ' ') + "v\n";
    std::string out = read(block);
    EXPECT_EQ(out.substr(0, 6), R"({"k":{)");
}

TEST(YamlSubset, GarbageNeverBreaksIt) {
    // Random edits of a jobspec with YAML-significant pieces; whatever is
    // accepted must be JSON the core reads.
    const std::vector<std::string> pieces = {" ", "\n", ":", "-", "#", "'", "\"", "[", "]", "{", "}", ",",
                                             "?", "&", "*", "!", "|", ">", "\t", "0", ".", "e", "+", "~",
                                             "\\", "%", "\xC3", "\xA9", std::string(1, '\0'), "  ", ": ", "- ", "---"};
    std::mt19937 rng(11);
    const std::string base = kJobspec;
    int accepted = 0;
    for (int round = 0; round < 20000; ++round) {
        std::string text = base;
        for (int e = 0, n = 1 + static_cast<int>(rng() % 4); e < n; ++e) {
            size_t at = rng() % (text.size() + 1);
            size_t drop = std::min<size_t>(rng() % 3, text.size() - at);
            text = text.substr(0, at) + pieces[rng() % pieces.size()] + text.substr(at + drop);
        }
        if (round % 5 == 0) text = text.substr(0, rng() % (text.size() + 1));  // cut anywhere
        std::string out;
        if (!yaml_subset_to_json(text, out)) continue;
        ++accepted;
        EXPECT_NO_THROW(json::parse(out)) << text << "\n->\n" << out;
    }
    EXPECT_GT(accepted, 1000);
    std::string out;
    for (int round = 0; round < 20000; ++round) {
        std::string bytes(rng() % 64, '\0');
        for (char &c : bytes) c = static_cast<char>(rng());
        if (yaml_subset_to_json(bytes, out)) {
            EXPECT_NO_THROW(json::parse(out)) << bytes;
        }
    }
}

// Fluxion's jobspec reader takes a property only as a quoted string; which
// scalars were quoted is lost in JSON, so the plain ones are left to the
// full YAML reader, which knows the style of each scalar.
TEST(YamlSubset, DeclinesAPropertyListWithAPlainScalar) {
    EXPECT_TRUE(declined("attributes:\n  system:\n    constraints:\n      properties: [fast]\n"));
    EXPECT_TRUE(declined("attributes:\n  system:\n    constraints:\n      properties:\n        - fast\n"));
    EXPECT_TRUE(declined("c: {and: [{properties: [\"a\", b]}]}\n"));
    EXPECT_EQ(read("attributes:\n  system:\n    constraints:\n      properties: [\"fast\", '^slow']\n"),
              R"({"attributes":{"system":{"constraints":{"properties":["fast","^slow"]}}}})");
    EXPECT_EQ(read("properties: \"fast\"\nhostlist: [node0]\nranks: [0, 1]\n"),
              R"({"properties":"fast","hostlist":["node0"],"ranks":[0,1]})");
    EXPECT_EQ(read("{\"properties\": [\"a\"]}"), R"({"properties":["a"]})");
}
