// list_source on tables: CSV/TSV/JSONL with a header whose other columns become fields, typed
// from their values or by --field; rows that cannot be samples; tables that cannot be listed.
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

// Tables: CSV/TSV/JSONL with a header whose columns beyond the image and the label are fields.
namespace {

using dscache::SourceListing;
using dscache::SourceOptions;

// Entry e's value of field f as text: scalars printed, text and mask paths as they are, a
// multi-hot array as its 0/1 digits.
std::string value_text(const SourceListing& l, size_t f, size_t e) {
  const dscache::FieldSpec& s = l.fields[f];
  const dscache::FieldData v = l.columns.get(f, e);
  const char* p = static_cast<const char*>(v.data);
  std::ostringstream out;
  if (s.kind == dscache::FieldKind::kScalar && s.dtype == dscache::FieldType::kInt64) {
    int64_t x = 0;
    if (v.bytes == sizeof x) std::memcpy(&x, p, sizeof x), out << x;
  } else if (s.kind == dscache::FieldKind::kScalar) {
    float x = 0;
    if (v.bytes == sizeof x) std::memcpy(&x, p, sizeof x), out << x;
  } else if (s.kind == dscache::FieldKind::kArray) {
    for (uint64_t i = 0; i < v.bytes; ++i) out << int(p[i]);
  } else {
    out << std::string(p, v.bytes);
  }
  return out.str();
}

// Every entry's value of field f, '|'-separated.
std::string column_text(const SourceListing& l, size_t f) {
  std::string out;
  for (size_t e = 0; e < l.entries.size(); ++e) out += (e ? "|" : "") + value_text(l, f, e);
  return out;
}

// "name:kind/dtype" of every field, ' '-separated.
std::string specs_text(const SourceListing& l) {
  std::string out;
  for (const dscache::FieldSpec& s : l.fields) {
    out += (out.empty() ? "" : " ") + s.name + ":" + dscache::to_string(s.kind) + "/" +
           dscache::to_string(s.dtype);
  }
  return out;
}

SourceOptions table_options(std::vector<std::pair<std::string, std::string>> fields,
                            std::string image_column = "", std::string label_column = "") {
  SourceOptions o;
  o.field_kinds = std::move(fields);
  o.image_column = std::move(image_column);
  o.label_column = std::move(label_column);
  return o;
}

// The digest list_source promises for a listing without fields: XXH64 of the entries' names,
// sizes and mtimes.
uint64_t entries_digest(const SourceListing& l) {
  dscache::Xxh64 h;
  for (const dscache::SourceEntry& e : l.entries) {
    h.update(e.name.data(), e.name.size());
    h.update("\0", 1);
    h.update(&e.size, sizeof e.size);
    h.update(&e.mtime_ns, sizeof e.mtime_ns);
  }
  return h.digest();
}

}  // namespace

TEST_SUITE("source list") {
  TEST_CASE("a table's other columns become fields, typed from their values or by --field") {
    TempDir tmp;
    for (const char* f : {"a.png", "b.png", "c.png"}) write_all(tmp.file(f), "x");
    struct Case {
      const char* file;
      std::string text;
      SourceOptions options;
      const char* specs;                 // specs_text
      std::vector<std::string> columns;  // column_text of each field
      const char* labels;                // every entry's label, ' '-separated
      std::vector<std::string> classes;
    };
    const std::string masks = tmp.file("masks/");
    const Case cases[] = {
        {"t.csv",
         "image_path,label,count,score,caption\na.png,cat,3,0.5,hello\n"
         "b.png,dog,-2,1,\"a, b\"\nc.png,cat,+7,-1e-1,  x y \n",
         {},
         "count:scalar/int64 score:scalar/float32 caption:text/uint8",
         {"3|-2|7", "0.5|1|-0.1", "hello|a, b|x y"},
         "0 1 0",
         {"cat", "dog"}},
        {"t.tsv",
         "image_path\tlabel\tcount\tscore\na.png\t2\t3\t.5\nb.png\t0\t4\t2.\n",
         {},
         "count:scalar/int64 score:scalar/float32",
         {"3|4", "0.5|2"},
         "2 0",
         {"0", "1", "2"}},
        {"t.jsonl",
         "{\"image_path\": \"a.png\", \"label\": 1, \"n\": 3, \"s\": 0.25, \"c\": \"hi\"}\n\n"
         "{\"s\": 2, \"c\": \"x;y\", \"image_path\": \"b.png\", \"n\": -4, \"label\": 0}\n",
         {},
         "n:scalar/int64 s:scalar/float32 c:text/uint8",
         {"3|-4", "0.25|2", "hi|x;y"},
         "1 0",
         {"0", "1"}},
        // A mix of integers and decimals is float; anything else among numbers is text.
        {"t.csv",
         "image_path,a,b,c\na.png,1,1,\nb.png,2.5,x,\n",
         {},
         "a:scalar/float32 b:text/uint8 c:text/uint8",
         {"1|2.5", "1|x", "|"},
         "0 0",
         {}},
        // --field forces a kind; `ignore` drops the column.
        {"t.csv",
         "image_path,n,tags,mask_path,junk\na.png,3,b;a,masks/a.png,q\n"
         "b.png,4, c ;;,/abs/m.png,r\nc.png,5,,masks/c.png,s\n",
         table_options(
             {{"n", "text"}, {"tags", "multi-hot"}, {"mask_path", "mask"}, {"junk", "ignore"}}),
         "n:text/uint8 tags:array/uint8 mask_path:mask/uint8",
         {"3|4|5", "110|001|000", masks + "a.png|/abs/m.png|" + masks + "c.png"},
         "0 0 0",
         {}},
        {"t.csv",
         "image_path,n,m\na.png,3,4\n",
         table_options({{"n", "float"}, {"m", "int"}}),
         "n:scalar/float32 m:scalar/int64",
         {"3", "4"},
         "0",
         {}},
        // JSONL multi-hot: a list of names, or a ';'-separated string.
        {"t.jsonl",
         "{\"image_path\": \"a.png\", \"tags\": [\"zebra\", \"Ant\"]}\n"
         "{\"image_path\": \"b.png\", \"tags\": \"ant;Ant\"}\n",
         table_options({{"tags", "multi-hot"}}),
         "tags:array/uint8",
         {"101|110"},
         "0 0",
         {}},
        // Other image and label columns; `label` is then an ordinary column -- here ignored.
        {"t.csv",
         "img,cls,label,w\na.png,7,x,1\nb.png,3,y,2\n",
         table_options({{"label", "ignore"}}, "img", "cls"),
         "w:scalar/int64",
         {"1|2"},
         "7 3",
         {"0", "1", "2", "3", "4", "5", "6", "7"}},
        // `path` names the images when there is no `image_path`; no label column: labels 0.
        {"t.csv",
         "path,w,h\na.png,1,2\n",
         {},
         "w:scalar/int64 h:scalar/int64",
         {"1", "2"},
         "0",
         {}},
        {"t.csv", "image_path\na.png\nb.png\n", {}, "", {}, "0 0", {}},
    };
    for (const Case& c : cases) {
      CAPTURE(c.text);
      write_all(tmp.file(c.file), c.text);
      const SourceListing l = dscache::list_source(tmp.file(c.file), c.options);
      CHECK(l.kind == "list");
      CHECK(specs_text(l) == c.specs);
      REQUIRE(l.fields.size() == c.columns.size());
      for (size_t f = 0; f < l.fields.size(); ++f) CHECK(column_text(l, f) == c.columns[f]);
      std::string labels;
      for (const auto& e : l.entries) {
        labels += (labels.empty() ? "" : " ") + std::to_string(e.label);
        CHECK(e.bad == "");
      }
      CHECK(labels == c.labels);
      CHECK(l.classes == c.classes);
      CHECK(l.entries[0].name == "a.png");
      CHECK(l.entries[0].path == tmp.file("a.png"));
      CHECK(l.entries[0].size == 1);
    }
    // Multi-hot classes are the sorted distinct names (bytes: upper case first).
    write_all(tmp.file("t.jsonl"),
              "{\"image_path\": \"a.png\", \"tags\": [\"zebra\", \"Ant\"]}\n"
              "{\"image_path\": \"b.png\", \"tags\": \"ant;Ant\"}\n");
    const SourceListing l =
        dscache::list_source(tmp.file("t.jsonl"), table_options({{"tags", "multi-hot"}}));
    CHECK(l.fields[0].classes == std::vector<std::string>{"Ant", "ant", "zebra"});
    CHECK(l.fields[0].shape == std::vector<uint32_t>{3});
  }
}

TEST_SUITE("source list") {
  TEST_CASE("a table row that cannot be a sample is listed bad, naming its line and column") {
    TempDir tmp;
    struct Case {
      const char* file;
      std::string text;
      SourceOptions options;
      size_t bad_entry;  // the one bad entry
      const char* reason;
    };
    const Case cases[] = {
        {"t.csv",
         "image_path,label,score\na.png,0,1\nb.png,0\n",
         {},
         1,
         "line 3: column 'score': missing"},
        {"t.csv",
         "image_path,label,score\n\na.png,0,\nb.png,0,2\n",
         {},
         0,
         "line 3: column 'score': empty value, expected an integer"},
        {"t.csv", "image_path,label,score\na.png,0,1.5\nb.png,0,abc\n",
         table_options({{"score", "float"}}), 1, "line 3: column 'score': 'abc' is not a number"},
        {"t.csv", "image_path,label,n\na.png,0,1.5\nb.png,0,2\n", table_options({{"n", "int"}}), 0,
         "line 2: column 'n': '1.5' is not an integer"},
        {"t.csv", "image_path,label,n\na.png,0,99999999999999999999\nb.png,0,2\n",
         table_options({{"n", "int"}}), 0,
         "line 2: column 'n': '99999999999999999999' is out of range for int64"},
        {"t.csv", "image_path,label,s\na.png,0,1e39\nb.png,0,2\n", table_options({{"s", "float"}}),
         0, "line 2: column 's': '1e39' is out of range for float32"},
        {"t.csv", "image_path,label,s\na.png,0,nan\nb.png,0,2\n", table_options({{"s", "float"}}),
         0, "line 2: column 's': 'nan' is not a number"},
        {"t.csv",
         "image_path,label,s\n,0,1\nb.png,0,2\n",
         {},
         0,
         "line 2: column 'image_path': empty value"},
        {"t.csv",
         "image_path,label,s\na.png,,1\nb.png,0,2\n",
         {},
         0,
         "line 2: column 'label': empty value"},
        {"t.csv", "image_path,m,s\na.png,,1\nb.png,m.png,2\n", table_options({{"m", "mask"}}), 0,
         "line 2: column 'm': empty value, expected the path of a mask image"},
        {"t.csv",
         "image_path,c,s\na.png,\xff\xfe,1\nb.png,x,2\n",
         {},
         0,
         "line 2: column 'c': not valid UTF-8"},
        {"t.jsonl",
         "{\"image_path\": \"a.png\", \"s\": 1}\n{\"image_path\": \"b.png\"}\n",
         {},
         1,
         "line 2: column 's': missing"},
        {"t.jsonl",
         "{\"image_path\": \"a.png\", \"s\": null}\n{\"image_path\": \"b.png\", \"s\": 2}\n",
         {},
         0,
         "line 1: column 's': empty value, expected an integer"},
        {"t.jsonl",
         "{\"image_path\": \"a.png\", \"t\": [\"x\", 3]}\n{\"image_path\": \"b.png\", \"t\": "
         "\"x\"}\n",
         table_options({{"t", "multi-hot"}}), 0,
         "line 1: column 't': a multi-hot list holds names (strings) only"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.text);
      write_all(tmp.file(c.file), c.text);
      const SourceListing l = dscache::list_source(tmp.file(c.file), c.options);
      REQUIRE(l.entries.size() == 2);
      const size_t good = 1 - c.bad_entry;
      CHECK(l.entries[c.bad_entry].bad == c.reason);
      CHECK(l.entries[good].bad == "");
      for (size_t f = 0; f < l.fields.size(); ++f) {
        CHECK(l.columns.get(f, c.bad_entry).bytes == 0);
        CHECK(l.columns.get(f, good).bytes > 0);
      }
    }
    // Bad rows do not vote: the one good row's `3` makes the column int, the missing column's
    // row does not make it text, and a bad row's label is no class.
    write_all(tmp.file("t.csv"), "image_path,label,n,s\na.png,cat,3,x\nb.png,dog,zz\n");
    const SourceListing l = dscache::list_source(tmp.file("t.csv"), {});
    CHECK(specs_text(l) == "n:scalar/int64 s:text/uint8");
    CHECK(l.classes == std::vector<std::string>{"cat"});
    CHECK(l.entries[1].bad == "line 3: column 's': missing");
  }

  TEST_CASE("a table that cannot be listed is InvalidArgument naming the file and the reason") {
    TempDir tmp;
    write_all(tmp.file("a.png"), "x");
    SourceOptions classes;
    classes.class_names = {"a", "b"};
    struct Case {
      const char* file;
      std::string text;
      SourceOptions options;
      std::vector<std::string> parts;  // in the message
    };
    const Case cases[] = {
        {"t.csv",
         "image_path,label,s\na.png,0,1\nb.png,0,1,2\n",
         {},
         {"line 3: 4 fields, but the header names 3 columns"}},
        {"t.csv", "image_path,label,s\n\"a.png,0,1\n", {}, {"line 2: unterminated quote"}},
        {"t.jsonl", "{\"image_path\": \"a.png\"}\n[1, 2]\n", {}, {"line 2: not a JSON object"}},
        {"t.jsonl",
         "{\"image_path\": \"a.png\"}\n{\"image_path\": \n",
         {},
         {"line 2: not valid JSON at column"}},
        {"t.csv",
         "image_path,label,Col Name\na.png,0,1\n",
         {},
         {"column 'Col Name' cannot be a field", "'col_name'", "--field 'Col Name=ignore'"}},
        {"t.csv",
         "image_path,label,index\na.png,0,1\n",
         {},
         {"column 'index' cannot be a field", "reserved", "--field 'index=ignore'"}},
        {"t.csv", "file,label,s\na.png,0,1\n", {}, {"no column 'image_path'", "--image-column"}},
        {"t.csv",
         "image_path,label,s\na.png,0,1\n",
         table_options({}, "img"),
         {"--image-column: the table has no column 'img'", "image_path, label, s"}},
        {"t.csv",
         "image_path,label,s\na.png,0,1\n",
         table_options({}, "", "cls"),
         {"--label-column: the table has no column 'cls'"}},
        {"t.csv",
         "image_path,label,s\na.png,0,1\n",
         table_options({{"s", "bool"}}),
         {"--field 's=bool': KIND is one of mask, multi-hot, int, float, text, ignore"}},
        {"t.csv",
         "image_path,label,s\na.png,0,1\n",
         table_options({{"nope", "int"}}),
         {"--field 'nope=int': the table has no column 'nope'"}},
        {"t.csv",
         "image_path,label,s\na.png,0,1\n",
         table_options({{"label", "int"}}),
         {"'label' is the label column"}},
        {"t.csv",
         "image_path,label,s\na.png,0,1\n",
         table_options({{"s", "int"}, {"s", "text"}}),
         {"column 's' twice"}},
        {"t.csv",
         "image_path,s,t\na.png,0,1\n",
         classes,
         {"--classes names the classes of a label column, and the table has none"}},
        {"t.csv", "image_path,label,s\na.png,c,1\n", classes, {"label 'c' is not in --classes"}},
        {"t.csv",
         ",image_path,label\n0,a.png,1\n",
         {},
         {"column 1 has an empty name", "index=False"}},
        {"t.csv", "image_path,s,s\na.png,0,1\n", {}, {"column 's' appears twice"}},
        {"t.csv",
         "image_path,t\na.png,\n",
         table_options({{"t", "multi-hot"}}),
         {"column 't' (multi-hot) names no class"}},
    };
    for (const Case& c : cases) {
      CAPTURE(c.text);
      write_all(tmp.file(c.file), c.text);
      const std::string what = dscache::test::invalid_argument_message(
          [&] { dscache::list_source(tmp.file(c.file), c.options); }, true);
      CHECK(what.find(tmp.file(c.file)) != std::string::npos);
      for (const std::string& p : c.parts) CHECK(what.find(p) != std::string::npos);
    }
    // The hint works: the column ignored, the table lists.
    write_all(tmp.file("t.csv"), "image_path,label,Col Name\na.png,0,1\n");
    CHECK(dscache::list_source(tmp.file("t.csv"), table_options({{"Col Name", "ignore"}}))
              .fields.empty());
    // Table options on a source that is no table; COCO options on one that is no COCO file.
    SourceOptions coco;
    coco.image_root = tmp.path();
    CHECK(dscache::test::invalid_argument_message([&] {
            dscache::list_source(tmp.path(), table_options({{"s", "int"}}));
          }).find("apply to .csv/.tsv/.jsonl tables") != std::string::npos);
    CHECK(dscache::test::invalid_argument_message([&] {
            dscache::list_source(tmp.file("t.csv"), coco);
          }).find("--image-root and --coco-mask apply to COCO") != std::string::npos);
  }

  TEST_CASE("two-column lists list as before tables existed: no fields, the same digest") {
    TempDir tmp;
    for (const char* f : {"a.png", "b.png"}) write_all(tmp.file(f), "x");
    struct Case {
      const char* file;
      std::string text;
      SourceOptions options;
      std::vector<std::string> classes;
    };
    const Case cases[] = {
        {"l.csv", "a.png,1\nb.png,0\n", {}, {"0", "1"}},
        {"l.csv", "path,label\na.png,1\nb.png,0\n", {}, {"0", "1"}},
        {"l.csv", "image_path,label\na.png,1\nb.png,0\n", {}, {"0", "1"}},
        {"l.csv", "image_path,score\na.png,1\nb.png,0\n", {}, {"0", "1"}},  // still a list
        {"l.tsv", "file\tclass\na.png\tdog\nb.png\tcat\n", {}, {"cat", "dog"}},
        // A table of only the image and the label: no fields either, and the same digest.
        {"l.csv",
         "image_path,label\na.png,1\nb.png,0\n",
         table_options({}, "", "label"),
         {"0", "1"}},
        {"l.jsonl",
         "{\"image_path\": \"a.png\", \"label\": 1}\n{\"image_path\": \"b.png\", "
         "\"label\": 0}\n",
         {},
         {"0", "1"}},
    };
    for (const Case& c : cases) {
      CAPTURE(c.text);
      write_all(tmp.file(c.file), c.text);
      const SourceListing l = dscache::list_source(tmp.file(c.file), c.options);
      REQUIRE(l.entries.size() == 2);
      CHECK(l.fields.empty());
      CHECK(l.columns.values.empty());
      CHECK(l.classes == c.classes);
      CHECK(l.entries[0].name == "a.png");
      CHECK(l.entries[1].path == tmp.file("b.png"));
      CHECK(l.digest == entries_digest(l));
    }
  }

  TEST_CASE("a table's digest changes with any field value, a mask file, or a --field kind") {
    TempDir tmp;
    for (const char* f : {"a.png", "b.png", "m.png"}) write_all(tmp.file(f), "x");
    const std::string head = "image_path,label,score,m\n";
    const SourceOptions mask = table_options({{"m", "mask"}});
    auto digest = [&](const std::string& body, const SourceOptions& o = table_options({})) {
      write_all(tmp.file("t.csv"), head + body);
      return dscache::list_source(tmp.file("t.csv"), o).digest;
    };
    const std::string base = "a.png,0,1.5,m.png\nb.png,1,2,m.png\n";
    const uint64_t d = digest(base, mask);
    CHECK(d == digest(base, mask));  // the same listing, the same digest
    CHECK(d != entries_digest(dscache::list_source(tmp.file("t.csv"), mask)));
    CHECK(d != digest("a.png,0,1.5,m.png\nb.png,1,2.5,m.png\n", mask));  // a value
    CHECK(d != digest("a.png,0,1.5,m.png\nb.png,1,2,a.png\n", mask));    // a mask path
    CHECK(d != digest(base));                                            // m as text
    CHECK(d != digest("a.png,0,1.5,m.png\nb.png,1,,m.png\n", mask));     // a row gone bad
    digest(base, mask);
    write_all(tmp.file("m.png"), "xy");  // the mask file itself
    CHECK(d != dscache::list_source(tmp.file("t.csv"), mask).digest);
  }
}
