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
  TEST_CASE("a header row under any column names is not a sample; integer labels keep values") {
    TempDir tmp;
    // 12 classes: as strings "10" < "2", so a header read as a sample made label 2 index 4.
    std::string body;
    for (int k = 0; k < 24; ++k) {
      const std::string name = "f" + std::to_string(k) + ".png";
      write_all(tmp.file(name), "x");
      body += name + "," + std::to_string(k % 12) + "\n";
    }
    for (const std::string head : {"path,label\n", "image_path,label\n", "file,class\n",
                                   "\"filepath\",\"target\"\n", " image , y \n"}) {
      CAPTURE(head);
      write_all(tmp.file("list.csv"), head + body);
      const dscache::SourceListing l = dscache::list_source(tmp.file("list.csv"), {});
      REQUIRE(l.entries.size() == 24);
      CHECK(l.classes.size() == 12);
      for (int k = 0; k < 24; ++k) {
        CHECK(l.entries[k].name == "f" + std::to_string(k) + ".png");
        CHECK(l.entries[k].label == k % 12);
      }
      CHECK(l.classes[2] == "2");
    }
    // Named labels: a header whose label is no other row's label.
    write_all(tmp.file("list.csv"), "filename,class\nf0.png,cat\nf1.png,dog\nf2.png,cat\n");
    dscache::SourceListing l = dscache::list_source(tmp.file("list.csv"), {});
    REQUIRE(l.entries.size() == 3);
    CHECK(l.classes == std::vector<std::string>{"cat", "dog"});
    // Not a header: a first row whose file exists, or a missing file whose label other rows
    // share (it stays a sample, skipped at build time as missing).
    write_all(tmp.file("list.csv"), "f0.png,cat\nf1.png,dog\n");
    CHECK(dscache::list_source(tmp.file("list.csv"), {}).entries.size() == 2);
    write_all(tmp.file("list.csv"), "gone.png,cat\nf1.png,cat\nf2.png,dog\n");
    l = dscache::list_source(tmp.file("list.csv"), {});
    CHECK(l.entries.size() == 3);
    CHECK(l.entries[0].name == "gone.png");
    write_all(tmp.file("list.csv"), "gone.png,3\nf1.png,1\n");
    CHECK(dscache::list_source(tmp.file("list.csv"), {}).entries.size() == 2);
  }
}
