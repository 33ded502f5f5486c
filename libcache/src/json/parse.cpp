#include "json/parse.h"

#include <algorithm>
#include <string>

namespace dscache {
namespace {

// "line L, column C" of the 1-based byte `byte` of `text` (a line of a JSON Lines file: its own
// line number, then the column).
std::string position(const JsonOrigin& origin, size_t byte, JsonPosition at) {
  if (origin.line != 0) return "column " + std::to_string(at.column);
  return "byte " + std::to_string(byte) + " (line " + std::to_string(at.line) + ", column " +
         std::to_string(at.column) + ")";
}

std::string position(std::string_view text, const JsonOrigin& origin, size_t byte) {
  JsonPosition at;
  at.advance(text.substr(0, std::min(text.size(), byte == 0 ? 0 : byte - 1)));
  return position(origin, byte, at);
}

std::string depth_reason() {
  return "JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
         " arrays and objects (the limit) at ";
}

// nlohmann's text: "[json.exception.parse_error.101] parse error at line 1, column 5: why";
// the position is ours (a JSON Lines line is parsed alone: its "line 1" would mislead).
std::string syntax_reason(const std::string& reason) {
  std::string why = reason.substr(reason.find(']') == std::string::npos ? 0 : reason.find(']') + 2);
  const size_t colon = why.find(": ");
  if (why.rfind("parse error", 0) == 0 && colon != std::string::npos) why = why.substr(colon + 2);
  return why;
}

[[noreturn]] void fail(const JsonOrigin& origin, const std::string& reason) {
  const std::string at = origin.line != 0 ? "line " + std::to_string(origin.line) + ": " : "";
  throw Error(origin.kind, origin.path, at + reason);
}

}  // namespace

void check_json_depth(std::string_view text, const JsonOrigin& origin) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        fail(origin, depth_reason() + position(text, origin, i + 1));
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

void throw_json_syntax(std::string_view text, const JsonOrigin& origin, size_t byte,
                       const std::string& reason) {
  fail(origin, "not valid JSON at " + position(text, origin, byte) + ": " + syntax_reason(reason));
}

void JsonPosition::advance(std::string_view piece) {
  for (char c : piece) {
    if (c == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
}

void throw_json_syntax_at(const JsonOrigin& origin, size_t byte, JsonPosition at,
                          const std::string& reason) {
  fail(origin, "not valid JSON at " + position(origin, byte, at) + ": " + syntax_reason(reason));
}

void throw_json_depth_at(const JsonOrigin& origin, size_t byte, JsonPosition at) {
  fail(origin, depth_reason() + position(origin, byte, at));
}

}  // namespace dscache
