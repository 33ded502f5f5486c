// TensorBoard event files: CRC-32C vectors, TFRecord framing and the hand-encoded Event fields,
// read back by a small decoder here; and the tags of metrics.jsonl lines. No LibTorch: builds
// in seconds. (tests/cli/test_tensorboard.py reads a real run's files with python3-protobuf.)
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "../temp_dir.h"
#include "dscache/error.h"
#include "metrics.h"
#include "tensorboard.h"

namespace {

using namespace dscache::train;

uint64_t le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(s[at + i])} << (8 * i);
  return v;
}

// The records of a TFRecord stream, both CRCs of each checked; fails the test on a bad frame.
std::vector<std::string> records(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < s.size()) {
    REQUIRE(s.size() - at >= 12);
    const uint64_t n = le(s, at, 8);
    REQUIRE(le(s, at + 8, 4) == masked_crc32c(s.data() + at, 8));
    REQUIRE(s.size() - at - 12 >= n + 4);
    const std::string data = s.substr(at + 12, n);
    REQUIRE(le(s, at + 12 + n, 4) == masked_crc32c(data.data(), data.size()));
    out.push_back(data);
    at += 12 + n + 4;
  }
  return out;
}

// One protobuf field: its number, wire type, and value (varint/fixed as an integer, or bytes).
struct Field {
  uint32_t number;
  uint32_t type;
  uint64_t integer = 0;
  std::string bytes;
};

uint64_t varint(const std::string& s, size_t* at) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    REQUIRE(*at < s.size());
    const auto b = static_cast<unsigned char>(s[(*at)++]);
    v |= uint64_t{b & 0x7fu} << shift;
    if (!(b & 0x80)) return v;
  }
  FAIL("varint longer than 10 bytes");
  return 0;
}

std::vector<Field> fields(const std::string& s) {
  std::vector<Field> out;
  size_t at = 0;
  while (at < s.size()) {
    const uint64_t key = varint(s, &at);
    Field f{static_cast<uint32_t>(key >> 3), static_cast<uint32_t>(key & 7), 0, {}};
    if (f.type == 0) {
      f.integer = varint(s, &at);
    } else if (f.type == 1 || f.type == 5) {
      const int n = f.type == 1 ? 8 : 4;
      REQUIRE(s.size() - at >= static_cast<size_t>(n));
      f.integer = le(s, at, n);
      at += n;
    } else {
      REQUIRE(f.type == 2);
      const uint64_t n = varint(s, &at);
      REQUIRE(s.size() - at >= n);
      f.bytes = s.substr(at, n);
      at += n;
    }
    out.push_back(f);
  }
  return out;
}

double as_double(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

float as_float(uint64_t bits) {
  const auto b = static_cast<uint32_t>(bits);
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The one event file in `dir`.
std::string event_file(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path());
  REQUIRE(names.size() == 1);
  CHECK(names[0].find("/events.out.tfevents.") != std::string::npos);
  return names[0];
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("crc32c: the Castagnoli check values") {
    struct Case {
      std::string data;
      uint32_t crc;
    };
    const std::vector<Case> cases = {
        {"", 0x00000000u},
        {"123456789", 0xE3069283u},
        {std::string(32, '\0'), 0x8A9136AAu},  // RFC 3720 B.4
        {std::string(32, '\xff'), 0x62A8AB43u},
    };
    for (const auto& c : cases) {
      CAPTURE(c.data.size());
      CHECK(crc32c(c.data.data(), c.data.size()) == c.crc);
    }
    const uint32_t c = 0xE3069283u;
    CHECK(masked_crc32c("123456789", 9) == ((c >> 15) | (c << 17)) + 0xa282ead8u);
  }

  TEST_CASE("tfrecord frames the data with its length and both masked CRCs") {
    const std::string data = "hello";
    const std::string r = tfrecord(data);
    REQUIRE(r.size() == 8 + 4 + 5 + 4);
    CHECK(le(r, 0, 8) == 5);
    CHECK(records(r) == std::vector<std::string>{data});
    std::string bad = r;
    bad[12] ^= 1;  // the data's CRC no longer matches
    CHECK(le(bad, 17, 4) != masked_crc32c(bad.data() + 12, 5));
  }

  TEST_CASE("an event file: file_version first, then scalars at their steps") {
    dscache::test::TempDir tmp;
    const std::string dir = tmp.path() + "/tb";
    {
      EventWriter w(dir);
      w.scalar("train/loss", 50, 0.25, 1000.5);
      w.scalar("train/lr", 300, 1e-3, 1001.0);
      // Before flush() nothing but the first record is in the file.
      CHECK(records(read_all(w.path())).size() == 1);
      w.flush();
    }
    const std::vector<std::string> recs = records(read_all(event_file(dir)));
    REQUIRE(recs.size() == 3);
    const std::vector<Field> first = fields(recs[0]);
    REQUIRE(first.size() == 2);
    CHECK(first[0].number == 1);  // wall_time, a double near now
    CHECK(first[0].type == 1);
    CHECK(as_double(first[0].integer) > 1.6e9);
    CHECK(first[1].number == 3);
    CHECK(first[1].bytes == "brain.Event:2");

    struct Want {
      int64_t step;
      std::string tag;
      float value;
      double wall;
    };
    const std::vector<Want> want = {{50, "train/loss", 0.25f, 1000.5},
                                    {300, "train/lr", 1e-3f, 1001.0}};
    for (size_t i = 0; i < want.size(); ++i) {
      CAPTURE(i);
      const std::vector<Field> ev = fields(recs[i + 1]);
      REQUIRE(ev.size() == 3);
      CHECK(ev[0].number == 1);
      CHECK(as_double(ev[0].integer) == want[i].wall);
      CHECK(ev[1].number == 2);
      CHECK(ev[1].type == 0);
      CHECK(static_cast<int64_t>(ev[1].integer) == want[i].step);
      REQUIRE(ev[2].number == 5);  // summary
      const std::vector<Field> summary = fields(ev[2].bytes);
      REQUIRE(summary.size() == 1);
      REQUIRE(summary[0].number == 1);  // value
      const std::vector<Field> value = fields(summary[0].bytes);
      REQUIRE(value.size() == 2);
      CHECK(value[0].number == 1);
      CHECK(value[0].bytes == want[i].tag);
      CHECK(value[1].number == 2);
      CHECK(value[1].type == 5);
      CHECK(as_float(value[1].integer) == want[i].value);
    }
  }

  TEST_CASE("a resumed writer starts its file with a SessionLog START at the purge step") {
    dscache::test::TempDir tmp;
    { EventWriter w(tmp.path(), int64_t{301}); }
    const std::vector<std::string> recs = records(read_all(event_file(tmp.path())));
    REQUIRE(recs.size() == 2);
    const std::vector<Field> ev = fields(recs[1]);
    REQUIRE(ev.size() == 3);
    CHECK(ev[1].number == 2);
    CHECK(ev[1].integer == 301);
    CHECK(ev[2].number == 7);  // session_log
    const std::vector<Field> log = fields(ev[2].bytes);
    REQUIRE(log.size() == 1);
    CHECK(log[0].number == 1);   // status
    CHECK(log[0].integer == 1);  // START
  }

  TEST_CASE("the event directory must be a directory, and a FIFO is never opened") {
    dscache::test::TempDir tmp;
    const std::string file = tmp.path() + "/file";
    std::ofstream(file) << "x";
    const std::string fifo = tmp.path() + "/fifo";
    REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
    for (const std::string& dir : {file, fifo}) {
      CAPTURE(dir);
      try {
        EventWriter w(dir);
        FAIL("opened");
      } catch (const dscache::Error& e) {
        CHECK(e.kind() == dscache::ErrorKind::kInvalidArgument);
        CHECK(std::string(e.what()).find(dir) != std::string::npos);
        CHECK(std::string(e.what()).find("not a directory") != std::string::npos);
      }
    }
  }

  TEST_CASE("metrics.jsonl lines: their numbers as tags, step and epoch left out") {
    struct Case {
      nlohmann::json line;
      std::map<std::string, double> tags;
    };
    const std::vector<Case> cases = {
        {{{"kind", "step"},
          {"step", 50},
          {"epoch", 0},
          {"loss", 2.5},
          {"lr", 0.1},
          {"scale", 1.0},
          {"samples_per_s", 800.0}},
         {{"train/loss", 2.5},
          {"train/lr", 0.1},
          {"train/scale", 1.0},
          {"train/samples_per_s", 800.0}}},
        {{{"kind", "epoch"},
          {"step", 64},
          {"epoch", 1},
          {"loss", 1.5},
          {"val_loss", 1.75},
          {"val_acc", 0.5},
          {"data_wait", 0.125},
          {"skipped_steps", 0},
          {"complete", true}},
         {{"epoch/loss", 1.5},
          {"val/loss", 1.75},
          {"val/acc", 0.5},
          {"epoch/data_wait", 0.125},
          {"epoch/skipped_steps", 0.0}}},
        {{{"kind", "epoch"}, {"step", 64}, {"loss", 1.5}, {"val_loss", nullptr}},
         {{"epoch/loss", 1.5}}},
        {{{"kind", "other"}, {"loss", 1.0}}, {}},
    };
    for (const auto& c : cases) {
      CAPTURE(c.line.dump());
      std::map<std::string, double> got;
      for (const auto& [tag, value] : tensorboard_scalars(c.line)) got[tag] = value;
      CHECK(got == c.tags);
    }
  }

  TEST_CASE("MetricsLog writes each line's scalars to the event file at the line's step") {
    dscache::test::TempDir tmp;
    {
      MetricsLog log;
      log.open(tmp.path() + "/metrics.jsonl", std::nullopt);
      log.open_tensorboard(tmp.path() + "/tb", std::nullopt);
      log.write({{"kind", "step"}, {"step", 7}, {"loss", 0.5}});
      // Written at once, not at exit: a killed run keeps its curves.
      CHECK(records(read_all(event_file(tmp.path() + "/tb"))).size() == 2);
    }
    const std::vector<std::string> recs = records(read_all(event_file(tmp.path() + "/tb")));
    REQUIRE(recs.size() == 2);
    const std::vector<Field> ev = fields(recs[1]);
    REQUIRE(ev.size() == 3);
    CHECK(ev[1].integer == 7);
    const std::vector<Field> value = fields(fields(ev[2].bytes)[0].bytes);
    CHECK(value[0].bytes == "train/loss");
    CHECK(as_float(value[1].integer) == 0.5f);
  }
}
