// check_table: what every EnumTable must do, for the library's tables and the trainer's.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "dscache/enum_table.h"
#include "dscache/error.h"

namespace dscache::test {

// What a table must hold: these names for these values, in this order (the order messages list
// them in). The names are stored in manifests or typed by users: a change here is a format or
// interface change, not a refactoring.
template <typename E>
struct Expected {
  const EnumTable<E>& table;
  std::vector<std::pair<E, std::string>> names;
  std::string listed;  // names(): what an error message lists
};

template <typename E>
void check_table(const Expected<E>& want) {
  const EnumTable<E>& t = want.table;
  REQUIRE(t.size() == want.names.size());
  size_t i = 0;
  for (const auto& entry : t) {
    CAPTURE(entry.name);
    CHECK(entry.value == want.names[i].first);
    CHECK(std::string(entry.name) == want.names[i].second);
    ++i;
  }
  for (const auto& [value, name] : want.names) {
    CAPTURE(name);
    CHECK(std::string(t.to_string(value)) == name);
    REQUIRE(t.find(name).has_value());
    CHECK(*t.find(name) == value);
    CHECK(t.parse(name, "field") == value);
    // Exact match only: no case folding, no surrounding space, no prefix.
    std::string upper = name;
    upper[0] = static_cast<char>(upper[0] - 'a' + 'A');
    CHECK_FALSE(t.find(upper).has_value());
    CHECK_FALSE(t.find(" " + name).has_value());
    CHECK_FALSE(t.find(name.substr(0, name.size() - 1)).has_value());
  }
  CHECK(t.names() == want.listed);
  // A value outside the enum (an integer cast to it) has no name.
  CHECK(std::string(t.to_string(static_cast<E>(99))) == "?");
  for (const std::string bad : {"", "bogus", "?"}) {
    CAPTURE(bad);
    CHECK_FALSE(t.find(bad).has_value());
    try {
      t.parse(bad, "--opt");
      FAIL("parse accepted '" << bad << "'");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kInvalidArgument);
      CHECK(e.path().empty());
      CHECK(e.reason() == "--opt: '" + bad + "' is not one of " + want.listed);
      CHECK(t.unknown(bad, "--opt") == e.reason());
    }
  }
}

}  // namespace dscache::test
