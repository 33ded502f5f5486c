// dscache/ingest/coco.h: COCO instances files parsed (category indexes, clipped boxes, errors
// naming the element, the streamed parse) and listed with fields (list_coco, is_coco_instances).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <random>
#include <string>
#include <vector>

#include "coco_fixtures.h"
#include "dscache/error.h"
#include "dscache/ingest/coco.h"
#include "test_util.h"

using dscache::CocoInstances;
using dscache::Error;
using dscache::ErrorKind;
using dscache::test::annotation;
using dscache::test::categories;
using dscache::test::expect_error;
using dscache::test::image;
using dscache::test::TempDir;
using dscache::test::write_all;
using dscache::test::write_json;
using json = nlohmann::json;

TEST_SUITE("coco") {
  TEST_CASE("read_coco_instances: category indexes by file order, boxes clipped or dropped") {
    TempDir tmp;
    json j = {{"images", {image(10, "a.png", 40, 30), image(11, "b.jpg", 50, 20)}},
              {"annotations",
               {annotation(1, 11, 90, {1, 2, 3, 4}),
                annotation(2, 10, 7, {-0.5, 29.25, 40.6, 0.75}),  // past the edges by < 1
                annotation(3, 10, 3, {5, 5, 0, 4}),               // no width: dropped
                annotation(4, 10, 3, {5, 5, 4, -1}),              // negative height: dropped
                annotation(5, 10, 3, {40.5, 5, 0.4, 4}),          // nothing left inside: dropped
                annotation(6, 10, 3, {2, 3, 4, 5})}},
              {"categories", categories()}};
    const CocoInstances coco = dscache::read_coco_instances(write_json(tmp, j));
    CHECK(coco.path == tmp.file("ann.json"));
    CHECK(coco.categories == std::vector<std::string>{"cat", "dog", "bird"});
    CHECK(coco.category_ids == std::vector<int64_t>{7, 3, 90});
    REQUIRE(coco.images.size() == 2);
    CHECK(coco.images[0].id == 10);
    CHECK(coco.images[0].file_name == "a.png");
    CHECK(coco.images[0].width == 40);
    CHECK(coco.images[0].height == 30);
    CHECK(coco.images[0].bad.empty());
    const auto& a = coco.images[0].annotations;
    REQUIRE(a.size() == 2);
    CHECK(a[0].category == 0);
    CHECK(a[0].box[0] == 0.0f);
    CHECK(a[0].box[1] == 29.25f);
    CHECK(a[0].box[2] == 40.0f);
    CHECK(a[0].box[3] == 30.0f);
    CHECK(a[1].category == 1);
    CHECK(std::vector<float>(a[1].box, a[1].box + 4) == std::vector<float>{2, 3, 6, 8});
    REQUIRE(coco.images[1].annotations.size() == 1);
    CHECK(coco.images[1].annotations[0].category == 2);
    CHECK(!coco.images[1].annotations[0].crowd);
  }

  TEST_CASE("bad inputs: errors name the element; misfits make their image bad") {
    TempDir tmp;
    const json img = image(1, "a.png", 40, 30);
    struct Case {
      const char* what;
      json doc;
      const char* error;  // nullptr: parses, image 0 is bad with `bad`
      const char* bad;
    };
    const Case cases[] = {
        {"unknown category",
         {{"images", {img}},
          {"annotations", {annotation(17, 1, 5, {1, 1, 2, 2})}},
          {"categories", categories()}},
         nullptr,
         "annotation 17 (annotations[0]): category id 5 is not in categories"},
        {"box outside by more than a pixel",
         {{"images", {img}},
          {"annotations", {annotation(18, 1, 3, {30, 1, 11.5, 2})}},
          {"categories", categories()}},
         nullptr,
         "annotation 18 (annotations[0]), category id 3: box 30,1,41.5,3"},
        {"box left of the image",
         {{"images", {img}},
          {"annotations", {annotation(19, 1, 3, {-2, 1, 5, 2})}},
          {"categories", categories()}},
         nullptr,
         "lies outside the 40x30 image"},
        {"RLE of another size",
         {{"images", {img}},
          {"annotations",
           {annotation(20, 1, 3, {1, 1, 2, 2}, {{"size", {40, 30}}, {"counts", {1200}}})}},
          {"categories", categories()}},
         nullptr,
         "RLE size [40, 30] differs from the image's [30, 40]"},
        {"malformed RLE string",
         {{"images", {img}},
          {"annotations",
           {annotation(21, 1, 3, {1, 1, 2, 2}, {{"size", {30, 40}}, {"counts", "3 5"}})}},
          {"categories", categories()}},
         "annotations[0].segmentation.counts: byte 1",
         nullptr},
        {"RLE counts not covering the image",
         {{"images", {img}},
          {"annotations",
           {annotation(22, 1, 3, {1, 1, 2, 2}, {{"size", {30, 40}}, {"counts", {1000, 100}}})}},
          {"categories", categories()}},
         "annotations[0].segmentation.counts cover 1100 pixels",
         nullptr},
        {"unknown image id",
         {{"images", {img}},
          {"annotations", {annotation(1, 99, 3, {1, 1, 2, 2})}},
          {"categories", categories()}},
         "annotations[0] names image id 99, not in images",
         nullptr},
        {"bbox of 3 numbers",
         {{"images", {img}},
          {"annotations", {annotation(1, 1, 3, {1, 1, 2})}},
          {"categories", categories()}},
         "annotations[0].bbox has 3 numbers",
         nullptr},
        {"image without file_name",
         {{"images", {img, {{"id", 2}, {"width", 4}, {"height", 4}}}},
          {"annotations", json::array()},
          {"categories", categories()}},
         "images[1] has no file_name",
         nullptr},
        {"odd polygon",
         {{"images", {img}},
          {"annotations", {annotation(1, 1, 3, {1, 1, 2, 2}, json::array({{1, 2, 3, 4, 5}}))}},
          {"categories", categories()}},
         "annotations[0].segmentation[0] has an odd count of numbers (5)",
         nullptr},
        {"repeated category id",
         {{"images", {img}},
          {"annotations", json::array()},
          {"categories", {{{"id", 1}, {"name", "a"}}, {{"id", 1}, {"name", "b"}}}}},
         "categories[1] repeats category id 1",
         nullptr},
        {"no categories",
         {{"images", {img}}, {"annotations", json::array()}},
         "no \"categories\" array",
         nullptr},
        {"a JSON array", json::array({1, 2}), "not a JSON object", nullptr},
    };
    for (const Case& c : cases) {
      CAPTURE(c.what);
      const std::string path = write_json(tmp, c.doc);
      if (c.error != nullptr) {
        const Error e = expect_error([&] { dscache::read_coco_instances(path); },
                                     ErrorKind::kCorruption, c.error);
        CHECK(e.path() == path);
        continue;
      }
      const CocoInstances coco = dscache::read_coco_instances(path);
      REQUIRE(coco.images.size() == 1);
      CHECK(coco.images[0].bad.find(c.bad) != std::string::npos);
      CHECK(coco.images[0].annotations.empty());
    }
    write_all(tmp.file("broken.json"), "{\"images\": [");
    expect_error([&] { dscache::read_coco_instances(tmp.file("broken.json")); },
                 ErrorKind::kCorruption, {"broken.json", "not valid JSON"});
    REQUIRE(::mkfifo(tmp.file("fifo.json").c_str(), 0600) == 0);
    expect_error([&] { dscache::read_coco_instances(tmp.file("fifo.json")); },
                 ErrorKind::kCorruption, "FIFO");
    expect_error([&] { dscache::read_coco_instances(tmp.file("none.json")); }, ErrorKind::kNotFound,
                 "none.json");
  }

  TEST_CASE("streamed parse: errors name byte, line and column; masks refuse a changed file") {
    TempDir tmp;
    struct Case {
      const char* text;
      const char* error;
    };
    // Positions as the whole-text parser gave them (checked against it by hand; the file is
    // read in pieces now).
    const std::string deep = std::string(300, '[') + std::string(300, ']');
    const Case cases[] = {
        {"{\n  \"images\": [1,]\n}", "not valid JSON at byte 18 (line 2, column 16)"},
        {"{\"images\": [], \"x\": 1e400}", "not valid JSON at byte 25 (line 1, column 25)"},
        {"{\"images\": []} x", "not valid JSON at byte 16 (line 1, column 16)"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.text);
      write_all(tmp.file("e.json"), c.text);
      expect_error([&] { dscache::read_coco_instances(tmp.file("e.json")); },
                   ErrorKind::kCorruption, c.error);
    }
    write_all(tmp.file("e.json"), "{\"info\":\n" + deep + "}");
    expect_error([&] { dscache::read_coco_instances(tmp.file("e.json")); }, ErrorKind::kCorruption,
                 "JSON nested deeper than 256 arrays and objects (the limit) at byte 265 (line 2, "
                 "column 256)");
    // Masks read the polygons again from the file: one edited since (another size, or the same
    // size and another mtime) is refused by name, not rasterised from other bytes.
    json j = {
        {"images", {image(1, "a.png", 20, 10)}},
        {"annotations", {annotation(1, 1, 3, {1, 1, 8, 6}, json::array({{1, 1, 9, 1, 9, 7}}))}},
        {"categories", categories()}};
    const std::string path = write_json(tmp, j);
    const CocoInstances coco = dscache::read_coco_instances(path);
    std::vector<uint8_t> m(200);
    dscache::rasterize_semantic(coco, 0, m.data());
    CHECK(std::count(m.begin(), m.end(), 2) > 10);
    write_all(path, j.dump() + " ");
    expect_error([&] { dscache::rasterize_semantic(coco, 0, m.data()); }, ErrorKind::kCorruption,
                 {path, "changed since it was listed"});
    write_all(path, j.dump());
    const struct timespec times[2] = {{0, UTIME_OMIT}, {1000000, 0}};
    REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
    expect_error([&] { dscache::read_segmentations(coco, 0); }, ErrorKind::kCorruption,
                 "changed since it was listed");
  }

  TEST_CASE("list_coco streams the file in pieces, list_source parses its text: same listing") {
    // Past several 1 MiB pieces, elements cut at the piece boundaries: the byte ranges masks
    // are read from again, boxes, digest and masks agree between the two ways in.
    TempDir tmp;
    REQUIRE(::mkdir(tmp.file("img").c_str(), 0700) == 0);
    std::mt19937 rng(33);
    json imgs = json::array(), anns = json::array();
    for (int i = 1; i <= 40; ++i) imgs.push_back(image(i, std::to_string(i) + ".png", 48, 32));
    for (int k = 0; k < 6000; ++k) {
      const int i = 1 + static_cast<int>(rng() % 40);
      std::vector<double> poly;
      for (int p = 0; p < 40; ++p) {
        poly.push_back(static_cast<double>(rng() % 4700) / 100);
        poly.push_back(static_cast<double>(rng() % 3100) / 100);
      }
      anns.push_back(annotation(k + 1, i, k % 2 ? 7 : 90, {1, 2, 30, 20}, json::array({poly})));
    }
    const std::string path =
        write_json(tmp, {{"images", imgs}, {"annotations", anns}, {"categories", categories()}});
    REQUIRE(std::filesystem::file_size(path) > (uint64_t{3} << 20));
    dscache::SourceOptions opt;
    opt.image_root = tmp.file("img");
    opt.coco_mask = "semantic";
    const dscache::SourceListing streamed = dscache::list_coco(path, opt);
    const dscache::SourceListing whole = dscache::list_source(path, opt);
    CHECK(streamed.digest == whole.digest);
    CHECK(streamed.columns.values == whole.columns.values);
    REQUIRE(streamed.coco->images.size() == 40);
    std::vector<uint8_t> a(48 * 32), b(48 * 32);
    for (size_t k = 0; k < 40; ++k) {
      CAPTURE(k);
      const auto& sa = streamed.coco->images[k].annotations;
      const auto& wa = whole.coco->images[k].annotations;
      REQUIRE(sa.size() == wa.size());
      for (size_t j = 0; j < sa.size(); ++j) CHECK(sa[j].offset == wa[j].offset);
      dscache::rasterize_semantic(*streamed.coco, k, a.data());
      dscache::rasterize_semantic(*whole.coco, k, b.data());
      CHECK(a == b);
      CHECK(std::count(a.begin(), a.end(), 0) < 48 * 32);
    }
  }

  TEST_CASE("is_coco_instances tells COCO files from others without throwing or hanging") {
    TempDir tmp;
    const json full = {{"info", {{"year", 2017}}},
                       {"images", json::array()},
                       {"annotations", json::array()},
                       {"categories", categories()},
                       {"licenses", json::array()}};
    struct Case {
      std::string text;
      bool coco;
    };
    const Case cases[] = {
        {full.dump(), true},
        {"\xEF\xBB\xBF  \n" + full.dump(2), true},
        {R"({"images": [], "annotations": [], "categories": {}})", false},
        {R"({"images": [], "annotations": []})", false},
        {R"({"x": {"images": [], "annotations": [], "categories": []}})", false},
        {R"([{"images": [], "annotations": [], "categories": []}])", false},
        {R"({"images": [], "annotations": [], "categories": [)", true},  // told before the end
        {"path,label\na.png,0\n", false},
        {"", false},
        {"{not json", false},
    };
    for (const Case& c : cases) {
      CAPTURE(c.text);
      write_all(tmp.file("x.json"), c.text);
      CHECK(dscache::is_coco_instances(tmp.file("x.json")) == c.coco);
    }
    REQUIRE(::mkfifo(tmp.file("fifo.json").c_str(), 0600) == 0);
    CHECK(!dscache::is_coco_instances(tmp.file("fifo.json")));
    CHECK(!dscache::is_coco_instances(tmp.file("missing.json")));
    CHECK(!dscache::is_coco_instances(tmp.path()));
  }

  TEST_CASE("list_coco: one entry per image, fields column by column, digest") {
    TempDir tmp;
    REQUIRE(::mkdir(tmp.file("img").c_str(), 0700) == 0);
    cv::Mat pixels(30, 40, CV_8UC3, cv::Scalar(10, 200, 30));
    REQUIRE(cv::imwrite(tmp.file("img/a.png"), pixels));
    cv::Mat small(20, 50, CV_8UC3, cv::Scalar(90, 20, 130));
    REQUIRE(cv::imwrite(tmp.file("img/b.jpg"), small));
    json j = {{"images",
               {image(10, "a.png", 40, 30), image(11, "b.jpg", 50, 20), image(12, "gone.png", 8, 8),
                image(13, "a.png", 40, 30)}},
              {"annotations",
               {annotation(1, 10, 90, {1, 2, 3, 4}), annotation(2, 10, 7, {5, 6, 7, 8}, {}, 1),
                annotation(3, 13, 55, {1, 1, 1, 1})}},
              {"categories", categories()}};
    const std::string path = write_json(tmp, j);
    dscache::SourceOptions opt;
    expect_error([&] { dscache::list_coco(path, opt); }, ErrorKind::kInvalidArgument,
                 "--image-root");
    opt.image_root = tmp.file("img");
    opt.coco_mask = "instance";
    expect_error([&] { dscache::list_coco(path, opt); }, ErrorKind::kInvalidArgument,
                 "--coco-mask instance");
    opt.coco_mask = "";
    const dscache::SourceListing l = dscache::list_coco(path, opt);
    CHECK(l.kind == "coco");
    CHECK(l.root == path);
    CHECK(l.classes.empty());
    REQUIRE(l.coco != nullptr);
    CHECK(l.coco->images.size() == 4);
    REQUIRE(l.entries.size() == 4);
    struct stat st;
    REQUIRE(::stat(tmp.file("img/b.jpg").c_str(), &st) == 0);
    CHECK(l.entries[1].path == tmp.file("img/b.jpg"));
    CHECK(l.entries[1].name == "b.jpg");
    CHECK(l.entries[1].label == 0);
    CHECK(l.entries[1].size == static_cast<uint64_t>(st.st_size));
    CHECK(l.entries[1].mtime_ns != 0);
    CHECK(l.entries[2].size == 0);  // missing: the build skips it
    CHECK(l.entries[2].bad.empty());
    CHECK(l.entries[3].bad.find("category id 55") != std::string::npos);
    REQUIRE(l.fields.size() == 4);
    const char* names[] = {"boxes", "box_labels", "box_crowd", "image_id"};
    const dscache::FieldKind kinds[] = {dscache::FieldKind::kBoxes, dscache::FieldKind::kRows,
                                        dscache::FieldKind::kRows, dscache::FieldKind::kScalar};
    for (size_t f = 0; f < 4; ++f) {
      CHECK(l.fields[f].name == names[f]);
      CHECK(l.fields[f].kind == kinds[f]);
      CHECK(l.columns.offsets[f].size() == 5);
    }
    CHECK(l.fields[1].rows_of == "boxes");
    CHECK(l.fields[1].classes == std::vector<std::string>{"cat", "dog", "bird"});
    CHECK_NOTHROW(dscache::validate_fields(l.fields, "coco"));
    auto boxes = l.columns.get(0, 0);
    REQUIRE(boxes.bytes == 32);
    float b[8];
    std::memcpy(b, boxes.data, 32);
    CHECK(std::vector<float>(b, b + 8) == std::vector<float>{1, 2, 4, 6, 5, 6, 12, 14});
    auto labels = l.columns.get(1, 0);
    REQUIRE(labels.bytes == 16);
    int64_t lab[2];
    std::memcpy(lab, labels.data, 16);
    CHECK(lab[0] == 2);
    CHECK(lab[1] == 0);
    auto crowd = l.columns.get(2, 0);
    REQUIRE(crowd.bytes == 2);
    CHECK(static_cast<const uint8_t*>(crowd.data)[0] == 0);
    CHECK(static_cast<const uint8_t*>(crowd.data)[1] == 1);
    auto id = l.columns.get(3, 1);
    REQUIRE(id.bytes == 8);
    int64_t id_value;
    std::memcpy(&id_value, id.data, 8);
    CHECK(id_value == 11);
    CHECK(l.columns.get(0, 1).bytes == 0);  // no annotations: no boxes, still an id
    for (size_t f = 0; f < 4; ++f) CHECK(l.columns.get(f, 3).bytes == 0);  // bad: empty
    // The digest follows the annotation file and the images' stats.
    CHECK(dscache::list_coco(path, opt).digest == l.digest);
    opt.coco_mask = "semantic";
    const dscache::SourceListing masked = dscache::list_coco(path, opt);
    REQUIRE(masked.fields.size() == 5);
    CHECK(masked.fields[4].name == "mask");
    CHECK(masked.fields[4].kind == dscache::FieldKind::kMask);
    CHECK(masked.fields[4].dtype == dscache::FieldType::kUint8);
    CHECK(masked.fields[4].classes == std::vector<std::string>{"background", "cat", "dog", "bird"});
    CHECK(masked.columns.get(4, 0).bytes == 0);
    CHECK(masked.digest == l.digest);
    j["annotations"][0]["bbox"] = {1, 2, 3, 5};
    write_json(tmp, j);
    const uint64_t edited = dscache::list_coco(path, opt).digest;
    CHECK(edited != l.digest);
    REQUIRE(cv::imwrite(tmp.file("img/b.jpg"), pixels));  // another size
    CHECK(dscache::list_coco(path, opt).digest != edited);
    opt.coco_mask = "none";
    CHECK(dscache::list_coco(path, opt).fields.size() == 4);
    // A uint8 mask holds background and 255 classes.
    for (int c = 0; c < 252; ++c) j["categories"].push_back({{"id", 1000 + c}, {"name", "c"}});
    write_json(tmp, j);
    opt.coco_mask = "semantic";
    CHECK(dscache::list_coco(path, opt).fields[4].classes.size() == 256);
    j["categories"].push_back({{"id", 5000}, {"name", "one too many"}});
    write_json(tmp, j);
    expect_error([&] { dscache::list_coco(path, opt); }, ErrorKind::kUnsupported,
                 "256 categories: --coco-mask semantic stores uint8 masks (at most 255)");
    opt.coco_mask = "";
    CHECK(dscache::list_coco(path, opt).fields.size() == 4);
  }
}
