// list_source on CSV/TSV lists (the inputs tests/fuzz/ found bugs with, as plain cases) and listed
// paths resolved beside their list; SourceEntries' storage. Tables (a header whose other columns
// become fields) are in test_source_table.cpp.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dscache/checksum.h"
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

TEST_SUITE("source list: paths") {
  TEST_CASE("a listed path resolves beside its list, on disk or on object storage") {
    struct Case {
      const char* kind;
      const char* root;
      const char* name;
      const char* path;
    };
    const Case cases[] = {
        {"list", "/data/t.csv", "img/a.jpg", "/data/img/a.jpg"},
        {"list", "/data/t.csv", "/abs/a.jpg", "/abs/a.jpg"},
        {"list", "/data/t.csv", "s3://b/k/a.jpg", "s3://b/k/a.jpg"},
        {"list", "s3://b/dir/t.csv", "img/a.jpg", "s3://b/dir/img/a.jpg"},
        {"list", "s3://b/dir/t.csv", "./img/../x/a.jpg", "s3://b/dir/x/a.jpg"},
        {"list", "s3://b/dir/t.csv", "../../../a.jpg", "s3://b/a.jpg"},  // no higher than b
        {"list", "s3://b/dir/t.csv", "/top/a.jpg", "s3://b/top/a.jpg"},  // from the bucket
        {"list", "s3://b/dir/t.csv", "s3://c/a.jpg", "s3://c/a.jpg"},
        {"list", "s3://b/t.csv", "a.jpg", "s3://b/a.jpg"},
        {"list", "https://h:8080/d/t.tsv", "i//a.jpg", "https://h:8080/d/i//a.jpg"},  // S3 keeps //
        {"coco", "s3://b/images", "val/1.jpg", "s3://b/images/val/1.jpg"},
        {"coco", "/images", "/elsewhere/1.jpg", "/elsewhere/1.jpg"},
        {"folder", "s3://b/raw", "cat/1.jpg", "s3://b/raw/cat/1.jpg"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.root);
      CAPTURE(c.name);
      CHECK(dscache::source_entry_path(c.kind, c.root, c.name) == c.path);
    }
    CHECK(dscache::absolute_path("s3://b/images/") == "s3://b/images");
    CHECK(dscache::absolute_path("https://h/d") == "https://h/d");
  }

  TEST_CASE("a remote SOURCE that cannot be listed is refused before any request") {
    using dscache::ErrorKind;
    using dscache::test::expect_error;
    expect_error([] { dscache::list_source("http://127.0.0.1:9/raw", {}); },
                 ErrorKind::kInvalidArgument, {"http://127.0.0.1:9/raw", "cannot be listed"});
    expect_error([] { dscache::list_source("s3://bucket/train-images-idx3-ubyte.gz", {}); },
                 ErrorKind::kUnsupported, {"idx files are not read from object storage"});
  }

  TEST_CASE("SourceEntries gives back every member as appended, storing a prefixed path once") {
    dscache::SourceEntries es;
    es.set_path_prefix("/data/train/");
    const std::string long_name(3000, 'x');  // several fill a block: names cross into new ones
    std::vector<dscache::SourceEntry> want;
    for (int i = 0; i < 2000; ++i) {
      dscache::SourceEntry e;
      e.name = i % 7 == 0 ? long_name + std::to_string(i)
                          : "c" + std::to_string(i % 10) + "/" + std::to_string(i) + ".jpg";
      // Most paths are the prefix + name; some are elsewhere (an absolute path in a list, a URL),
      // some empty (idx entries).
      e.path = i % 5 == 1 ? "s3://bucket/" + e.name : i % 5 == 2 ? "" : "/data/train/" + e.name;
      e.label = i % 3 == 0 ? -1 - i : i * 1000;
      e.size = uint64_t{1} << (i % 40);
      e.mtime_ns = -int64_t{i} * 1000000007;
      if (i % 11 == 0) e.etag = "\"etag" + std::to_string(i) + "\"";
      if (i % 13 == 0) e.bad = "line " + std::to_string(i) + ": missing";
      es.push_back(e);
      want.push_back(e);
    }
    REQUIRE(es.size() == want.size());
    size_t i = 0;
    for (const dscache::SourceEntry& got : es) {
      const dscache::SourceEntry& w = want[i];
      INFO("entry " << i);
      CHECK(got.name == w.name);
      CHECK(got.path == w.path);
      CHECK(es.name(i) == w.name);
      CHECK(es.path(i) == w.path);
      CHECK(got.label == w.label);
      CHECK(es.label(i) == w.label);
      CHECK(got.size == w.size);
      CHECK(got.mtime_ns == w.mtime_ns);
      CHECK(got.etag == w.etag);
      CHECK(got.bad == w.bad);
      CHECK(es.bad(i) == w.bad);
      ++i;
    }
    CHECK(i == want.size());
    // A label past 31 bits is no class index: refused rather than cut.
    dscache::SourceEntry big;
    big.label = int64_t{1} << 30;
    CHECK_THROWS_AS(es.push_back(big), std::length_error);
    big.label = -(int64_t{1} << 30) - 1;
    CHECK_THROWS_AS(es.push_back(big), std::length_error);
    CHECK(es.size() == want.size());
  }

  TEST_CASE("a folder's listing holds 32 bytes an entry beside its names") {
    TempDir dir;
    const int n = 3000;
    std::string names;
    for (int c = 0; c < 3; ++c)
      std::filesystem::create_directory(dir.path() + "/c" + std::to_string(c));
    for (int i = 0; i < n; ++i) {
      const std::string name = "c" + std::to_string(i % 3) + "/" + std::to_string(i) + ".png";
      write_all(dir.path() + "/" + name, "not read by the listing");
      names += name;
    }
    const dscache::SourceListing l = dscache::list_source(dir.path(), {});
    REQUIRE(l.entries.size() == static_cast<size_t>(n));
    CHECK(l.entries.path(7) == dir.path() + "/" + std::string(l.entries.name(7)));
    // 32-byte records, the names once (their paths are the root + name: not stored), and one
    // 1 MiB block of text. A std::vector<SourceEntry> held ~370 bytes an entry.
    CHECK(l.entries.bytes_held() <= uint64_t{32} * n + names.size() + (uint64_t{1} << 20) + 512);
  }
}
