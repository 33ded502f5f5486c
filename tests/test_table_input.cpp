// list_source on hostile and unusual table input (issue 38): JSON nested past the limit, NUL
// bytes in paths, paths leading out of the table's folder (--confine), RFC 4180 quoted line
// ends and CR-only files, COCO files that are no JSON, integers past 2^64, class names given on
// the command line, text columns that are masks, and option errors that are usage errors.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "dscache/error.h"
#include "dscache/exit_codes.h"
#include "dscache/ingest/source_list.h"
#include "dscache/manifest.h"
#include "test_util.h"

using dscache::ErrorKind;
using dscache::SourceListing;
using dscache::SourceOptions;
using dscache::test::expect_error;
using dscache::test::TempDir;
using dscache::test::write_all;

namespace {

std::string nested(size_t depth) { return std::string(depth, '[') + "1" + std::string(depth, ']'); }

SourceOptions confined() {
  SourceOptions o;
  o.confine = true;
  return o;
}

std::string coco_text(const std::string& file_name) {
  return R"({"images": [{"id": 1, "file_name": ")" + file_name +
         R"(", "height": 4, "width": 4}], "annotations": [], "categories": [{"id": 1, "name": "c"}]})";
}

}  // namespace

TEST_SUITE("table input") {
  TEST_CASE("JSON nested past the limit is a named error (file, line, limit), not a crash") {
    TempDir tmp;
    write_all(tmp.file("a.png"), "x");
    // A JSONL line nested 100,000 deep overflowed the stack (SIGSEGV) before the bound.
    write_all(tmp.file("t.jsonl"),
              "{\"image_path\": \"a.png\"}\n{\"image_path\": \"a.png\", \"s\": " + nested(100000) +
                  "}\n");
    expect_error([&] { dscache::list_source(tmp.file("t.jsonl"), {}); },
                 ErrorKind::kInvalidArgument,
                 {tmp.file("t.jsonl"), "line 2: JSON nested deeper than 256", "the limit"});
    // Up to the limit it lists: the nested value is a text field holding its JSON.
    write_all(tmp.file("ok.jsonl"), "{\"image_path\": \"a.png\", \"s\": " + nested(255) + "}\n");
    const SourceListing l = dscache::list_source(tmp.file("ok.jsonl"), {});
    REQUIRE(l.fields.size() == 1);
    CHECK(l.columns.get(0, 0).bytes == 255 * 2 + 1);
    // Brackets in strings do not count.
    write_all(tmp.file("s.jsonl"),
              "{\"image_path\": \"a.png\", \"s\": \"" + std::string(1000, '[') + "\"}\n");
    CHECK(dscache::list_source(tmp.file("s.jsonl"), {}).entries.size() == 1);
    // COCO and manifests go through the same bound.
    write_all(tmp.file("deep.json"),
              "{\"images\": [], \"annotations\": [], \"categories\": " + nested(300) + "}");
    SourceOptions coco;
    coco.image_root = tmp.path();
    expect_error([&] { dscache::list_source(tmp.file("deep.json"), coco); }, ErrorKind::kCorruption,
                 {"deep.json", "nested deeper than 256", "line 1"});
    expect_error([&] { dscache::manifest_from_json("{\"x\": " + nested(100000) + "}", "/m.json"); },
                 ErrorKind::kCorruption, {"/m.json", "nested deeper than 256"});
  }

  TEST_CASE("a NUL byte in an image or mask path skips the row, naming it") {
    TempDir tmp;
    write_all(tmp.file("a.png"), "x");
    struct Case {
      const char* file;
      std::string text;
      SourceOptions options;
    };
    SourceOptions mask;
    mask.field_kinds = {{"m", "mask"}};
    const std::string nul(1, '\0');
    const Case cases[] = {
        {"t.jsonl", "{\"image_path\": \"a.png\"}\n{\"image_path\": \"a.png\\u0000x\"}\n", {}},
        {"t.csv", "image_path,label,n\na.png,0,1\na.png" + nul + "x,0,1\n", {}},
        {"t.csv", "image_path,label,m\na.png,0,a.png\na.png,0,a.png" + nul + "x\n", mask},
        {"l.csv", "a.png,0\na.png" + nul + "x,1\n", {}},  // a path,label list
    };
    for (const Case& c : cases) {
      CAPTURE(c.file);
      write_all(tmp.file(c.file), c.text);
      const SourceListing l = dscache::list_source(tmp.file(c.file), c.options);
      REQUIRE(l.entries.size() == 2);
      CHECK(l.entries[0].bad == "");
      CHECK(l.entries[1].bad.find("NUL byte after 'a.png'") != std::string::npos);
    }
  }

  TEST_CASE("--confine skips paths that lead outside the table's folder or --image-root") {
    TempDir tmp;
    std::filesystem::create_directories(tmp.file("d"));
    write_all(tmp.file("d/a.png"), "x");
    write_all(tmp.file("outside.png"), "x");
    const std::string table =
        "image_path,label,n\na.png,0,1\nsub/../a.png,0,1\n../outside.png,0,1\n" +
        tmp.file("outside.png") + ",0,1\n";
    write_all(tmp.file("d/t.csv"), table);
    const SourceListing open = dscache::list_source(tmp.file("d/t.csv"), {});
    for (const auto& e : open.entries) CHECK(e.bad == "");  // followed without --confine
    const SourceListing l = dscache::list_source(tmp.file("d/t.csv"), confined());
    REQUIRE(l.entries.size() == 4);
    CHECK(l.entries[0].bad == "");
    CHECK(l.entries[1].bad == "");
    CHECK(l.entries[2].bad ==
          "line 4: column 'image_path': the path '../outside.png' leads "
          "outside the table's folder " +
              tmp.file("d") + " (--confine)");
    CHECK(l.entries[3].bad.find("(--confine)") != std::string::npos);
    CHECK(l.digest != open.digest);  // a resume cannot mix the two
    // COCO: relative to --image-root.
    write_all(tmp.file("c.json"), coco_text("../outside.png"));
    SourceOptions coco = confined();
    coco.image_root = tmp.file("d");
    CHECK(dscache::list_source(tmp.file("c.json"), coco).entries[0].bad ==
          "the path '../outside.png' leads outside --image-root " + tmp.file("d") + " (--confine)");
    coco.confine = false;
    CHECK(dscache::list_source(tmp.file("c.json"), coco).entries[0].bad == "");
  }

  TEST_CASE("CSV: quoted line ends (RFC 4180) and CR-only line ends are parsed") {
    TempDir tmp;
    write_all(tmp.file("a.png"), "x");
    write_all(tmp.file("t.csv"),
              "image_path,label,caption\na.png,0,\"two\r\nlines, \"\"quoted\"\"\"\na.png,1,\n"
              "a.png,0,\"x\"\"\n");
    // The third row's quote never closes: named by the line it starts on.
    expect_error([&] { dscache::list_source(tmp.file("t.csv"), {}); }, ErrorKind::kInvalidArgument,
                 {"line 5: unterminated quote"});
    write_all(tmp.file("t.csv"),
              "image_path,label,caption\na.png,0,\"two\r\nlines, \"\"quoted\"\"\"\na.png,1,\n"
              "a.png,0,bad,extra\n");
    expect_error([&] { dscache::list_source(tmp.file("t.csv"), {}); }, ErrorKind::kInvalidArgument,
                 {"line 5: 4 fields"});  // line numbers count the quoted line end
    write_all(tmp.file("t.csv"),
              "image_path,label,caption\na.png,0,\"two\r\nlines, \"\"quoted\"\"\"\na.png,1,\n");
    const SourceListing l = dscache::list_source(tmp.file("t.csv"), {});
    REQUIRE(l.entries.size() == 2);
    const dscache::FieldData v = l.columns.get(0, 0);
    CHECK(std::string(static_cast<const char*>(v.data), v.bytes) == "two\nlines, \"quoted\"");
    // Classic Mac line ends: one record per CR, not one header line naming columns twice.
    write_all(tmp.file("cr.csv"), "image_path,label,n\ra.png,cat,1\ra.png,dog,2\r");
    const SourceListing cr = dscache::list_source(tmp.file("cr.csv"), {});
    CHECK(cr.entries.size() == 2);
    CHECK(cr.classes == std::vector<std::string>{"cat", "dog"});
    write_all(tmp.file("crl.csv"), "a.png,cat\ra.png,dog\r");  // a path,label list too
    CHECK(dscache::list_source(tmp.file("crl.csv"), {}).entries.size() == 2);
    write_all(tmp.file("q.csv"), "a.png,cat\n\"a.png,dog\na.png,cat\n");
    expect_error([&] { dscache::list_source(tmp.file("q.csv"), {}); }, ErrorKind::kInvalidArgument,
                 {"q.csv", "line 2: unterminated quote"});
  }

  TEST_CASE("a .json that is no COCO JSON says why, with the byte offset") {
    TempDir tmp;
    SourceOptions coco;
    coco.image_root = tmp.path();
    const std::string good = coco_text("a.png");
    struct Case {
      std::string text;
      std::vector<std::string> parts;
    };
    const Case cases[] = {
        {good.substr(0, 60), {"not valid JSON at byte 61", "missing closing quote"}},
        {R"({"images": [], "annotations": [], "categories": [], "x": NaN})",
         {"not valid JSON at byte 58 (line 1, column 58)", "invalid literal"}},
        {R"({"images": [], "annotations": [], "categories": [Infinity]})",
         {"not valid JSON at byte 50", "invalid literal"}},
        {R"({"images": [], "annotations": [], "categories": [], "x": 1e400})",
         {"not valid JSON at byte 62", "number overflow parsing '1e400'"}},
        {"[1, 2]", {"not a JSON object"}},
    };
    for (const Case& c : cases) {
      CAPTURE(c.text);
      write_all(tmp.file("x.json"), c.text);
      std::vector<std::string> parts = c.parts;
      parts.push_back(tmp.file("x.json"));
      for (const SourceOptions& o : {coco, SourceOptions{}}) {  // with COCO options or none
        expect_error([&] { dscache::list_source(tmp.file("x.json"), o); }, ErrorKind::kCorruption,
                     parts);
      }
    }
  }

  TEST_CASE("a JSONL integer past 2^64 keeps its digits: a class name, not a rounded float") {
    TempDir tmp;
    write_all(tmp.file("a.png"), "x");
    write_all(tmp.file("t.jsonl"),
              "{\"image_path\": \"a.png\", \"label\": 123456789012345678901234567890}\n"
              "{\"image_path\": \"a.png\", \"label\": -99999999999999999999}\n");
    const SourceListing l = dscache::list_source(tmp.file("t.jsonl"), {});
    CHECK(l.classes ==
          std::vector<std::string>{"-99999999999999999999", "123456789012345678901234567890"});
    // As an int field it is refused by name.
    write_all(tmp.file("n.jsonl"),
              "{\"image_path\": \"a.png\", \"n\": 1}\n"
              "{\"image_path\": \"a.png\", \"n\": 123456789012345678901234567890}\n");
    SourceOptions as_int;
    as_int.field_kinds = {{"n", "int"}};
    CHECK(dscache::list_source(tmp.file("n.jsonl"), as_int).entries[1].bad ==
          "line 2: column 'n': '123456789012345678901234567890' is out of range for int64");
  }

  TEST_CASE("class names given for mask and multi-hot fields: recorded, in the given order") {
    TempDir tmp;
    write_all(tmp.file("a.png"), "x");
    write_all(tmp.file("t.csv"), "image_path,m,tags\na.png,a.png,zebra;ant\na.png,a.png,ant\n");
    SourceOptions o;
    o.field_kinds = {{"m", "mask"}, {"tags", "multi-hot"}};
    const SourceListing sorted = dscache::list_source(tmp.file("t.csv"), o);
    CHECK(sorted.fields[0].classes.empty());
    CHECK(sorted.fields[1].classes == std::vector<std::string>{"ant", "zebra"});
    o.field_classes = {{"m", {"background", "animal"}}, {"tags", {"zebra", "cow", "ant"}}};
    const SourceListing l = dscache::list_source(tmp.file("t.csv"), o);
    CHECK(l.fields[0].classes == std::vector<std::string>{"background", "animal"});
    CHECK(l.fields[1].classes == std::vector<std::string>{"zebra", "cow", "ant"});
    REQUIRE(l.fields[1].shape == std::vector<uint32_t>{3});
    const dscache::FieldData hot = l.columns.get(1, 0);
    REQUIRE(hot.bytes == 3);
    const auto* h = static_cast<const uint8_t*>(hot.data);
    CHECK((h[0] == 1 && h[1] == 0 && h[2] == 1));
    CHECK(sorted.digest != l.digest);
    // A name the list does not hold skips its row; names for another kind are refused.
    o.field_classes = {{"tags", {"ant"}}};
    CHECK(dscache::list_source(tmp.file("t.csv"), o).entries[0].bad ==
          "line 2: column 'tags': 'zebra' is not one of the classes --field names");
    o.field_kinds = {{"m", "text"}, {"tags", "multi-hot"}};
    o.field_classes = {{"m", {"x"}}};
    expect_error([&] { dscache::list_source(tmp.file("t.csv"), o); }, ErrorKind::kInvalidArgument,
                 {"--field 'm=KIND:CLASSES'", "mask or multi-hot"});
    o.field_classes = {{"tags", {"ant", "zebra", "ant"}}};
    expect_error([&] { dscache::list_source(tmp.file("t.csv"), o); }, ErrorKind::kInvalidArgument,
                 {"--field 'tags=KIND:CLASSES'", "non-empty and distinct"});
  }

  TEST_CASE("a text column whose values all name image files gets a notice naming the flag") {
    TempDir tmp;
    write_all(tmp.file("a.png"), "x");
    std::filesystem::create_directories(tmp.file("m"));
    write_all(tmp.file("m/a.PNG"), "x");
    write_all(tmp.file("t.csv"),
              "image_path,mask_path,caption\na.png,m/a.PNG,a.png\na.png,"
              "m/a.PNG,hello\n");
    const SourceListing l = dscache::list_source(tmp.file("t.csv"), {});
    REQUIRE(l.notices.size() == 1);  // caption: not every value is an image
    CHECK(l.notices[0].find("--field 'mask_path=mask'") != std::string::npos);
    SourceOptions text;
    text.field_kinds = {{"mask_path", "text"}};  // said so: no notice
    CHECK(dscache::list_source(tmp.file("t.csv"), text).notices.empty());
    write_all(tmp.file("t.csv"), "image_path,mask_path\na.png,m/a.PNG\na.png,m/missing.png\n");
    CHECK(dscache::list_source(tmp.file("t.csv"), {}).notices.empty());
  }

  TEST_CASE("an option that does not fit the source is a usage error (exit 2)") {
    TempDir tmp;
    write_all(tmp.file("a.png"), "x");
    write_all(tmp.file("t.csv"), "image_path,label,s\na.png,0,1\n");
    SourceOptions missing;
    missing.field_kinds = {{"mask", "mask"}};
    SourceOptions column;
    column.image_column = "img";
    SourceOptions coco;
    coco.image_root = tmp.path();
    for (const SourceOptions& o : {missing, column, coco}) {
      try {
        dscache::list_source(tmp.file("t.csv"), o);
        FAIL("no error");
      } catch (const dscache::Error& e) {
        CAPTURE(e.what());
        CHECK(e.kind() == ErrorKind::kInvalidArgument);
        CHECK(dscache::exit_code_for(e) == dscache::ExitCode::kUsage);
      }
    }
  }
}
