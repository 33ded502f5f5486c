#include "json_parse.h"

#include <algorithm>
#include <string>

namespace dscache {
namespace {

// "line L, column C" of the 1-based byte `byte` of `text` (a line of a JSON Lines file: its own
// line number, then the column).
std::string position(std::string_view text, const JsonOrigin& origin, size_t byte) {
  const size_t end = std::min(text.size(), byte == 0 ? 0 : byte - 1);
  size_t line = 1, column = 1;
  for (size_t i = 0; i < end; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  if (origin.line != 0) return "column " + std::to_string(column);
  return "byte " + std::to_string(byte) + " (line " + std::to_string(line) + ", column " +
         std::to_string(column) + ")";
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
        fail(origin, "JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                         " arrays and objects (the limit) at " + position(text, origin, i + 1));
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

void throw_json_syntax(std::string_view text, const JsonOrigin& origin, size_t byte,
                       const std::string& reason) {
  // nlohmann's text: "[json.exception.parse_error.101] parse error at line 1, column 5: why";
  // the position is ours (a JSON Lines line is parsed alone: its "line 1" would mislead).
  std::string why = reason.substr(reason.find(']') == std::string::npos ? 0 : reason.find(']') + 2);
  const size_t colon = why.find(": ");
  if (why.rfind("parse error", 0) == 0 && colon != std::string::npos) why = why.substr(colon + 2);
  fail(origin, "not valid JSON at " + position(text, origin, byte) + ": " + why);
}

}  // namespace dscache
