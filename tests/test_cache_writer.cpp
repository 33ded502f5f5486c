// CacheWriter: what it writes reads back through Cache::open, each crash state of its header
// resumes as documented, and bad input is a named error that loses nothing.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "dscache/cache.h"
#include "dscache/cache_dir.h"
#include "dscache/cache_writer.h"
#include "dscache/error.h"
#include "dscache/jpeg.h"
#include "test_util.h"

using dscache::Cache;
using dscache::CacheDir;
using dscache::CacheWriter;
using dscache::CacheWriterOptions;
using dscache::Error;
using dscache::ErrorKind;
using dscache::Layout;
using dscache::Manifest;
using namespace dscache::test;

namespace fs = std::filesystem;

namespace {

// 4x3x3 samples, 5 per shard; sample i is filled with byte i.
CacheWriterOptions small_options() {
  CacheWriterOptions o;
  o.recipe.height = 4;
  o.recipe.width = 3;
  o.recipe.channels = 3;
  o.recipe.shard_bytes = 5 * 4 * 3 * 3;
  o.classes = {"a", "b"};
  o.tool_version = "test";
  o.created_utc = "2024-01-01T00:00:00Z";
  return o;
}

std::vector<uint8_t> pixels(uint64_t i) { return std::vector<uint8_t>(4 * 3 * 3, uint8_t(i)); }

void append_range(CacheWriter& w, uint64_t from, uint64_t to) {
  for (uint64_t i = from; i < to; ++i) {
    w.append(pixels(i).data(), 4, 3, int64_t(i % 2), "s" + std::to_string(i));
  }
}

void check_serves(const std::string& dir, uint64_t n) {
  auto c = Cache::open(dir);
  REQUIRE(c->size() == n);
  for (uint64_t i = 0; i < n; ++i) {
    std::vector<uint8_t> got(4 * 3 * 3);
    c->copy_sample(i, got.data());
    CHECK(got == pixels(i));
    CHECK(c->label(i) == int64_t(i % 2));
  }
}

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
}  // namespace

TEST_SUITE("cache writer") {
  TEST_CASE("shards are cut by shard_bytes; the cache serves what was appended") {
    TempDir tmp;
    const std::string out = tmp.path() + "/c";
    auto w = CacheWriter::open(out, small_options());
    append_range(*w, 0, 12);
    w->skip("bad.png", "not an image");
    const Manifest m = w->publish();
    CHECK(m.count == 12);
    CHECK(m.skipped == 1);
    REQUIRE(m.shards.size() == 3);
    CHECK(m.shards[0].count == 5);
    CHECK(m.shards[2].count == 2);
    CHECK(m.class_counts == std::vector<uint64_t>{6, 6});
    CHECK_FALSE(fs::exists(CacheWriter::partial_dir_for(out)));
    CHECK_FALSE(fs::exists(out + "/.build.json"));
    check_serves(out, 12);
    CHECK(read(out + "/skipped.jsonl") == "{\"reason\":\"not an image\",\"source\":\"bad.png\"}\n");
  }

  TEST_CASE("cut_shard ends a shard where told, an empty one too") {
    TempDir tmp;
    auto w = CacheWriter::open(tmp.path() + "/c", small_options());
    append_range(*w, 0, 2);
    w->cut_shard();
    w->cut_shard();  // nothing since: an empty shard
    append_range(*w, 2, 3);
    const Manifest m = w->publish();
    REQUIRE(m.shards.size() == 3);
    CHECK(m.shards[0].count == 2);
    CHECK(m.shards[1].count == 0);
    CHECK(m.shards[2].count == 1);
    check_serves(tmp.path() + "/c", 3);
  }

  TEST_CASE("a resume keeps the finished shards and continues at position()") {
    TempDir tmp;
    const std::string out = tmp.path() + "/c";
    {
      auto w = CacheWriter::open(out, small_options());
      append_range(*w, 0, 13);  // two shards finished, three samples in the open one
    }                           // destroyed unpublished: the partial directory stays
    CHECK_FALSE(fs::exists(out));
    CacheWriterOptions o = small_options();
    expect_error([&] { CacheWriter::open(out, o); }, ErrorKind::kInvalidArgument, "--resume");
    o.resume = true;
    auto w = CacheWriter::open(out, o);
    CHECK(w->position() == 10);
    CHECK(w->resumed() == 10);
    CHECK(w->shard_count() == 2);
    append_range(*w, w->position(), 13);
    w->publish();
    check_serves(out, 13);
  }

  TEST_CASE("note_transparent: counted in the manifest, kept by a resume, absent unless asked") {
    TempDir tmp;
    // Transparent samples: 1, 4, 5 (shard 0, the one in which shard 0 fills up) and 11, 12
    // (shard 2, which a resume redoes).
    const std::vector<uint64_t> transparent = {1, 4, 5, 11, 12};
    const auto write = [&](CacheWriter& w, uint64_t from, uint64_t to) {
      for (uint64_t i = from; i < to; ++i) {
        for (uint64_t t : transparent) {
          if (t == i) w.note_transparent();
        }
        append_range(w, i, i + 1);
      }
    };
    CacheWriterOptions o = small_options();
    o.count_transparent = true;
    const std::string out = tmp.path() + "/c";
    {
      auto w = CacheWriter::open(out, o);
      write(*w, 0, 13);  // two shards finished, three samples in the open one
    }
    o.resume = true;
    auto w = CacheWriter::open(out, o);
    REQUIRE(w->position() == 10);
    write(*w, 10, 13);
    Manifest m = w->publish();
    CHECK(m.transparent_known);
    CHECK(m.transparent == 5);
    CHECK(dscache::read_manifest(out).transparent == 5);

    auto plain = CacheWriter::open(tmp.path() + "/p", small_options());
    write(*plain, 0, 3);
    m = plain->publish();
    CHECK_FALSE(m.transparent_known);
    CHECK(read(tmp.path() + "/p/manifest.json").find("transparent") == std::string::npos);
  }

  TEST_CASE("4 channels (RGBA) go with recipe.alpha keep; keep needs a raw codec") {
    TempDir tmp;
    CacheWriterOptions o = small_options();
    o.recipe.channels = 4;
    expect_error([&] { CacheWriter::open(tmp.path() + "/a", o); }, ErrorKind::kInvalidArgument,
                 "4 channels (RGBA) go with recipe.alpha keep");
    o.recipe.alpha = dscache::AlphaMode::kKeep;
    o.recipe.shard_bytes = 5 * 4 * 3 * 4;
    auto w = CacheWriter::open(tmp.path() + "/k", o);
    std::vector<uint8_t> rgba(4 * 3 * 4);
    for (size_t i = 0; i < rgba.size(); ++i) rgba[i] = uint8_t(i * 5);
    for (int i = 0; i < 7; ++i) w->append(rgba.data(), 4, 3, 0, "s" + std::to_string(i));
    const Manifest m = w->publish();
    CHECK(m.channel_order == "RGBA");
    CHECK(m.shards.size() == 2);
    auto c = Cache::open(tmp.path() + "/k");
    CHECK(c->shape().channels == 4);
    std::vector<uint8_t> got(rgba.size());
    c->copy_sample(6, got.data());
    CHECK(got == rgba);
    o.recipe.channels = 3;
    expect_error([&] { CacheWriter::open(tmp.path() + "/b", o); }, ErrorKind::kInvalidArgument,
                 "go with recipe.alpha keep, and only they");
    if (dscache::jpeg_supported()) {
      o.recipe.channels = 4;
      o.codec = dscache::Codec::kJpeg;
      o.recipe.quality = 90;
      expect_error([&] { CacheWriter::open(tmp.path() + "/j", o); }, ErrorKind::kInvalidArgument,
                   "jpeg cannot store an alpha channel");
    }
  }

  TEST_CASE("a torn sidecar redoes its shard; another fingerprint is refused") {
    TempDir tmp;
    const std::string out = tmp.path() + "/c";
    const std::string partial = CacheWriter::partial_dir_for(out);
    { append_range(*CacheWriter::open(out, small_options()), 0, 15); }
    std::ofstream(partial + "/.shard-00001.json") << "{\"shard\": ";  // torn
    CacheWriterOptions o = small_options();
    o.resume = true;
    {
      auto w = CacheWriter::open(out, o);
      CHECK(w->position() == 5);  // shard 0 only: 1 is torn, so 2 does not continue anything
      CHECK_FALSE(fs::exists(partial + "/images-00002.npy"));
    }
    o.classes = {"a", "b", "c"};  // another write
    expect_error([&] { CacheWriter::open(out, o); }, ErrorKind::kInvalidArgument, "other options");
    o.force = true;  // starts over
    auto w = CacheWriter::open(out, o);
    CHECK(w->position() == 0);
  }

  TEST_CASE("killed after the manifest: only the publish is left") {
    TempDir tmp;
    const std::string out = tmp.path() + "/c";
    {
      auto w = CacheWriter::open(out, small_options());
      append_range(*w, 0, 7);
      w->finish();
    }
    CacheWriterOptions o = small_options();
    o.resume = true;
    auto w = CacheWriter::open(out, o);
    CHECK(w->finished());
    CHECK(w->count() == 7);
    expect_error([&] { append_range(*w, 7, 8); }, ErrorKind::kInvalidArgument, "finished");
    w->publish();
    check_serves(out, 7);
  }

  TEST_CASE("resume with the cache already published: complete() when it is this write") {
    TempDir tmp;
    const std::string out = tmp.path() + "/c";
    {
      auto w = CacheWriter::open(out, small_options());
      append_range(*w, 0, 6);
      w->publish();
    }
    CacheWriterOptions o = small_options();
    o.resume = true;
    expect_error([&] { CacheWriter::open(out, o); }, ErrorKind::kInvalidArgument, "already exists");
    o.is_this_write = [](const Manifest& m) { return m.count == 6; };
    auto w = CacheWriter::open(out, o);
    CHECK(w->complete());
    CHECK(w->publish().count == 6);
  }

  TEST_CASE("bad samples are named errors and lose nothing") {
    TempDir tmp;
    const std::string out = tmp.path() + "/c";
    auto w = CacheWriter::open(out, small_options());
    append_range(*w, 0, 3);
    const auto px = pixels(0);
    expect_error([&] { w->append(px.data(), 4, 4, 0, "wide.png"); }, ErrorKind::kInvalidArgument,
                 "wide.png: sample is 4x4, the cache's samples are 4x3");
    expect_error([&] { w->append(px.data(), 4, 3, 2, "l.png"); }, ErrorKind::kInvalidArgument,
                 "label 2 is not a class index");
    expect_error([&] { w->append_encoded(px.data(), 3, 4, 3, 0, "j"); },
                 ErrorKind::kInvalidArgument, "needs a JPEG cache");
    w->publish();
    check_serves(out, 3);
  }

#ifdef DSCACHE_HAVE_JPEG  // (libcache built with libjpeg: the internal dependency says so)
  TEST_CASE("an encoded sample's sides are checked as a raw one's") {
    TempDir tmp;
    CacheWriterOptions o = small_options();
    o.layout = Layout::kRagged;
    o.codec = dscache::Codec::kJpeg;
    o.recipe.height = o.recipe.width = 0;
    o.recipe.quality = 90;
    auto w = CacheWriter::open(tmp.path() + "/c", o);
    const std::vector<uint8_t> px(5 * 6 * 3, 100);
    std::vector<uint8_t> stream;
    dscache::jpeg_encode(px.data(), 5, 6, 3, 90, &stream);
    for (const auto& [h, wd] : {std::pair<uint32_t, uint32_t>{0, 6}, {70000, 6}, {5, 65501}}) {
      CAPTURE(h);
      CAPTURE(wd);
      expect_error([&] { w->append_encoded(stream.data(), stream.size(), h, wd, 0, "j.jpg"); },
                   ErrorKind::kInvalidArgument, "each side must be 1..65500");
    }
    w->append_encoded(stream.data(), stream.size(), 5, 6, 1, "ok.jpg");
    CHECK(w->publish().count == 1);
    CHECK(Cache::open(tmp.path() + "/c")->sample_shape(0).width == 6);
  }
#endif

  TEST_CASE("bad options are refused before anything is written") {
    TempDir tmp;
    struct Row {
      const char* what;
      void (*edit)(CacheWriterOptions&);
      const char* part;
    };
    const Row rows[] = {
        {"no size", [](CacheWriterOptions& o) { o.recipe.height = 0; }, "height and width"},
        {"2 channels", [](CacheWriterOptions& o) { o.recipe.channels = 2; }, "expected 1, 3 or 4"},
        {"no shard size", [](CacheWriterOptions& o) { o.recipe.shard_bytes = 0; }, "shard_bytes"},
        {"quality 0",
         [](CacheWriterOptions& o) {
           o.codec = dscache::Codec::kJpeg;
           o.recipe.quality = 0;
         },
         "quality"},
        {"fingerprint", [](CacheWriterOptions& o) { o.fingerprint = "{"; }, "not JSON"},
    };
    for (const Row& r : rows) {
      CAPTURE(r.what);
      CacheWriterOptions o = small_options();
      r.edit(o);
      expect_error([&] { CacheWriter::open(tmp.path() + "/c", o); }, ErrorKind::kInvalidArgument,
                   r.part);
      CHECK_FALSE(fs::exists(CacheWriter::partial_dir_for(tmp.path() + "/c")));
    }
  }

  TEST_CASE("an unlabeled cache takes any label; a ragged one records its bound") {
    TempDir tmp;
    CacheWriterOptions o = small_options();
    o.classes.clear();
    o.layout = Layout::kRagged;
    o.recipe.height = o.recipe.width = 0;
    auto w = CacheWriter::open(tmp.path() + "/c", o);
    const std::vector<uint8_t> px(7 * 9 * 3, 1);
    w->append(px.data(), 7, 9, -5, "a");
    w->append(px.data(), 9, 7, 123456789, "b");
    const Manifest m = w->publish();
    CHECK(m.class_counts.empty());
    CHECK(m.recipe.max_side == 7);
    auto c = Cache::open(tmp.path() + "/c");
    CHECK(c->label(0) == -5);
    CHECK(c->label(1) == 123456789);
    CHECK(c->sample_shape(1).height == 9);
  }

  TEST_CASE("add_shard takes another cache's shard whole (hard link) with its records") {
    TempDir tmp;
    {
      auto w = CacheWriter::open(tmp.path() + "/a", small_options());
      append_range(*w, 0, 10);
      w->publish();
    }
    auto part = CacheDir::open(tmp.path() + "/a");
    auto w = CacheWriter::open(tmp.path() + "/b", small_options());
    for (size_t k = 0; k < 2; ++k) {
      dscache::ShardRecords r;
      for (uint64_t i = 5 * k; i < 5 * k + 5; ++i) {
        r.labels.push_back(int64_t(i % 2));
        r.checksums.push_back(part->checksums()[i]);
        r.sources.push_back("s" + std::to_string(i));
      }
      CHECK_FALSE(w->add_shard(*part, k, r));  // same filesystem: linked, not copied
    }
    dscache::ShardRecords wrong;
    wrong.labels = {0};
    expect_error([&] { w->add_shard(*part, 0, wrong); }, ErrorKind::kInvalidArgument,
                 "records do not match");
    w->publish();
    check_serves(tmp.path() + "/b", 10);
    struct stat a, b;
    REQUIRE(::stat((tmp.path() + "/a/images-00000.npy").c_str(), &a) == 0);
    REQUIRE(::stat((tmp.path() + "/b/images-00000.npy").c_str(), &b) == 0);
    CHECK(a.st_ino == b.st_ino);
    CHECK(read(tmp.path() + "/a/labels.npy") == read(tmp.path() + "/b/labels.npy"));
    CHECK(read(tmp.path() + "/a/sources.jsonl") == read(tmp.path() + "/b/sources.jsonl"));
  }
}
