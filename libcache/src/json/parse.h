// Parsing JSON read from users and files (tables, COCO, manifests, side files): every document
// passes one nesting bound and reports a syntax error with its position. Internal to dscache.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "dscache/error.h"

namespace dscache {

// The most arrays and objects a JSON document may nest. nlohmann parses without recursion, but
// dump() and its other tree walks recurse: a line nested 100,000 deep overflowed the stack.
// Real documents (COCO: 5, a manifest: 4) stay far below.
constexpr size_t kMaxJsonDepth = 256;

// What a number written as an integer but past uint64's range becomes: the nearest double (as
// nlohmann reads it), or a string of its digits (a table's label or id keeps its text).
enum class BigIntegers { kAsDouble, kAsText };

// Where a JSON text came from, for errors: the file, the kind of Error its faults are, and for
// one line of a JSON Lines file that line's number (0: the text is the whole file).
struct JsonOrigin {
  const std::string& path;
  ErrorKind kind;
  size_t line = 0;
};

// Throws Error(origin.kind, origin.path, ...) when `text` nests arrays and objects deeper than
// kMaxJsonDepth, naming the position (line and column, or line N of a JSON Lines file and the
// column) and the limit. Brackets inside strings do not count.
void check_json_depth(std::string_view text, const JsonOrigin& origin);

// Throws Error(origin.kind, origin.path, "not valid JSON at byte B (line L, column C): reason")
// for a syntax error whose last read byte is `byte` (1-based, as nlohmann counts); for a line of
// a JSON Lines file, "line N: not valid JSON at column C: reason".
[[noreturn]] void throw_json_syntax(std::string_view text, const JsonOrigin& origin, size_t byte,
                                    const std::string& reason);

// The line and column (1-based) reached in a text read from its start, piece by piece: for a
// caller that streams a document and has no whole text to give throw_json_syntax.
struct JsonPosition {
  size_t line = 1, column = 1;
  void advance(std::string_view piece);  // past the next piece of the text
};

// throw_json_syntax and check_json_depth's error for a streamed document (origin.line == 0):
// `at` is the position of the 1-based `byte`, that is of the text's first byte - 1 bytes.
[[noreturn]] void throw_json_syntax_at(const JsonOrigin& origin, size_t byte, JsonPosition at,
                                       const std::string& reason);
[[noreturn]] void throw_json_depth_at(const JsonOrigin& origin, size_t byte, JsonPosition at);

namespace detail {

// nlohmann's DOM builder, keeping the position of a syntax error (number overflow included,
// which nlohmann reports without one).
template <typename J>
class PositionedDomParser : public nlohmann::detail::json_sax_dom_parser<J> {
 public:
  using Base = nlohmann::detail::json_sax_dom_parser<J>;
  PositionedDomParser(J& root, BigIntegers big) : Base(root, false), big_(big) {}
  bool number_float(typename J::number_float_t value, const typename J::string_t& literal) {
    if (big_ == BigIntegers::kAsText && literal.find_first_of(".eE") == std::string::npos) {
      typename J::string_t digits = literal;
      return Base::string(digits);
    }
    return Base::number_float(value, literal);
  }
  bool parse_error(std::size_t byte, const std::string& /*token*/,
                   const nlohmann::detail::exception& e) {
    byte_ = byte;
    reason_ = e.what();
    return false;
  }
  BigIntegers big_;
  size_t byte_ = 0;
  std::string reason_;
};

}  // namespace detail

// Parses `text` (nlohmann::json or nlohmann::ordered_json) after check_json_depth. A syntax
// error, NaN, Infinity or a number past double's range is throw_json_syntax.
template <typename J = nlohmann::json>
J parse_json(std::string_view text, const JsonOrigin& origin,
             BigIntegers big = BigIntegers::kAsDouble) {
  check_json_depth(text, origin);
  J root;
  detail::PositionedDomParser<J> sax(root, big);
  if (!J::sax_parse(text, &sax)) throw_json_syntax(text, origin, sax.byte_, sax.reason_);
  return root;
}

// parse_json for a caller that has its own message for any fault: a discarded value (see
// is_discarded()) instead of an Error, for text nested too deep too.
template <typename J = nlohmann::json>
J parse_json_or_discarded(std::string_view text) {
  static const std::string kNoPath;
  try {
    return parse_json<J>(text, JsonOrigin{kNoPath, ErrorKind::kCorruption});
  } catch (const Error&) {
    return J(J::value_t::discarded);
  }
}

}  // namespace dscache
