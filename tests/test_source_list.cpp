// list_source on CSV/TSV lists: the inputs tests/fuzz/ found bugs with, as plain cases.
#include <doctest/doctest.h>

#include <string>

#include "dscache/error.h"
#include "dscache/ingest/source_list.h"
#include "test_util.h"

using dscache::test::TempDir;
using dscache::test::write_all;

TEST_SUITE("source list") {
  TEST_CASE("integer labels name classes 0..max; a huge label is InvalidArgument, not billions") {
    TempDir tmp;
    write_all(tmp.file("a.png"), "x");
    struct Case {
      const char* list;
      int64_t classes;  // -1: InvalidArgument naming the label
    };
    const Case cases[] = {
        {"a.png,0\n", 1},
        {"a.png,3\n", 4},
        {"a.png,1048575\n", 1048576},
        {"a.png,1048576\n", -1},
        {"a.png,999999999\n", -1},           // fuzz: ran for minutes allocating names
        {"a.png,999999999999999999\n", -1},  // the largest label the parser reads as a number
    };
    for (const Case& c : cases) {
      CAPTURE(c.list);
      write_all(tmp.file("list.csv"), c.list);
      if (c.classes >= 0) {
        const dscache::SourceListing l = dscache::list_source(tmp.file("list.csv"), {});
        CHECK(static_cast<int64_t>(l.classes.size()) == c.classes);
        CHECK(l.classes.back() == std::to_string(c.classes - 1));
      } else {
        const std::string msg = dscache::test::invalid_argument_message(
            [&] { dscache::list_source(tmp.file("list.csv"), {}); });
        CHECK(msg.find("label ") != std::string::npos);
        CHECK(msg.find("--classes") != std::string::npos);
      }
    }
    // Names given: the label is checked against them, however large.
    write_all(tmp.file("list.csv"), "a.png,999999999\n");
    dscache::SourceOptions named;
    named.class_names = {"cat", "dog"};
    CHECK(dscache::test::invalid_argument_message([&] {
            dscache::list_source(tmp.file("list.csv"), named);
          }).find("--classes names only 2") != std::string::npos);
  }
}
