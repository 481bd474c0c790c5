// A fast reader for the YAML that jobspecs are written in (and for JSON),
// giving the JSON text that PyYAML's SafeLoader followed by json.dumps would
// give. It declines whatever lies outside that subset, so that the caller
// can hand the text to a full YAML parser instead.
#pragma once
#include <string>
#include <string_view>

namespace fluxion {

// Returns true and writes `text` as compact JSON to `json_out` when the whole
// document lies within the subset; returns false otherwise, for valid YAML it
// does not read as well as for invalid text (`json_out` is then unspecified).
// Any byte sequence is safe to pass; nothing is thrown.
//
// The subset: an optional "---" first line and "..." last line; comments;
// block mappings and sequences, including indentless sequences and compact
// "- key: value" mappings; flow sequences and mappings, also across lines;
// single-line plain, single-quoted and double-quoted scalars (with YAML's
// escapes, less line continuations). Plain scalars resolve as YAML 1.1 does
// in PyYAML (null, bool, int within int64, floats with a '.'); one that
// might be an integer, float or timestamp in another spelling is declined.
// Tabs, carriage returns, anchors, aliases, tags, block scalars, complex
// and merge keys, duplicate keys, directives and multiple or empty
// documents are declined.
bool yaml_subset_to_json(std::string_view text, std::string &json_out);

}  // namespace fluxion
