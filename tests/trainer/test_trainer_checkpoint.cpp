// dscache-train's checkpoints (suite cli, issue 11): damaged checkpoints are caught and resume
// falls back or refuses; --resume says where it resumes and refuses a changed cache. No LibTorch
// here: runs are compared through train_runs.h.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "cli_fixtures.h"
#include "fixtures.h"
#include "lazy_source.h"
#include "options.h"
#include "precision.h"
#include "train_runs.h"

namespace {

using namespace dscache::train;
using trainer_test::code_of;
using trainer_test::read_metrics;
using trainer_test::resume;
using trainer_test::Resumed;
using trainer_test::run_with_timeout;
using trainer_test::seconds_since;
using trainer_test::TempDir;
using trainer_test::tiny_args;
using trainer_test::write_bytes;

// A finished reference run in WORK/ref and, in WORK/tmpl, the same run killed (SIGKILL) after
// step 6 of 8 with a checkpoint every step: checkpoint.pt holds step 6, checkpoint.prev.pt 5.
void interrupted_run(const std::string& work, const std::string& train) {
  trainer_test::write_cache(train, trainer_test::synthetic(64, 8, 8, 1, 4, 3));
  const std::string log = work + "/setup.txt";
  const auto args = [&](const std::string& out) {
    return tiny_args(train, out, {"--epochs", "2", "--checkpoint-every", "1"});
  };
  int st = trainer_test::run_process(args(work + "/ref"), {}, log);
  INFO(trainer_test::read_file(log));
  REQUIRE(code_of(st) == 0);
  st = trainer_test::run_process(args(work + "/tmpl"), {"DSCACHE_TEST_KILL_AFTER_STEPS=6"}, log);
  REQUIRE(code_of(st) == 128 + SIGKILL);
  REQUIRE(std::filesystem::exists(work + "/tmpl/checkpoint.pt"));
  REQUIRE(std::filesystem::exists(work + "/tmpl/checkpoint.prev.pt"));
}

// A fresh copy of WORK/tmpl in WORK/NAME.
std::string copy_of_template(const std::string& work, const std::string& name) {
  const std::string dir = work + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::copy(work + "/tmpl", dir, std::filesystem::copy_options::recursive);
  return dir;
}

// `bytes` with the byte at `pos` flipped.
std::string flipped(std::string bytes, size_t pos) {
  bytes[pos] = static_cast<char>(bytes[pos] ^ 0xff);
  return bytes;
}

}  // namespace

TEST_SUITE("cli") {
  TEST_CASE("checkpoint: 40 single-byte flips are each caught; resume falls back or refuses") {
    TempDir tmp;
    const std::string w = tmp.path(), train = w + "/train", log = w + "/log.txt";
    interrupted_run(w, train);
    const std::string good = trainer_test::read_file(w + "/tmpl/checkpoint.pt");
    REQUIRE(good.size() > 1000);
    const std::string want = trainer_test::read_file(w + "/ref/model.pt");
    // Every field of the 32-byte header, then 27 positions evenly over the archive (the last
    // byte included).
    std::vector<size_t> positions = {0, 3, 7, 8, 11, 12, 15, 16, 19, 23, 24, 28, 31};
    for (size_t i = 0; i < 27; ++i) positions.push_back(32 + (good.size() - 33) * i / 26);
    REQUIRE(positions.size() >= 40);
    int fell_back = 0;
    for (size_t pos : positions) {
      CAPTURE(pos);
      const std::string dir = copy_of_template(w, "flip");
      write_bytes(dir + "/checkpoint.pt", flipped(good, pos));
      const Resumed r = resume(train, dir, log, 120);
      CAPTURE(r.text);
      REQUIRE(code_of(r.status) == 0);
      CHECK(r.text.find(dir + "/checkpoint.pt: ") != std::string::npos);
      CHECK(r.text.find("falling back to the older " + dir + "/checkpoint.prev.pt") !=
            std::string::npos);
      CHECK(trainer_test::read_file(dir + "/model.pt") == want);  // the uninterrupted weights
      fell_back += r.text.find("falling back") != std::string::npos;
    }
    MESSAGE(fell_back << " of " << positions.size() << " flips fell back to checkpoint.prev.pt");
    // Without the older checkpoint a flip is refused: exit 5, naming the file and the reason.
    for (size_t pos :
         {size_t{0}, size_t{20}, size_t{24}, size_t{40}, good.size() / 2, good.size() - 1}) {
      CAPTURE(pos);
      const std::string dir = copy_of_template(w, "flip");
      std::filesystem::remove(dir + "/checkpoint.prev.pt");
      write_bytes(dir + "/checkpoint.pt", flipped(good, pos));
      const Resumed r = resume(train, dir, log, 120);
      CAPTURE(r.text);
      CHECK(code_of(r.status) == 5);
      CHECK(r.text.find("no usable checkpoint in " + dir) != std::string::npos);
      CHECK_FALSE(std::filesystem::exists(dir + "/model.pt"));
    }
  }

  TEST_CASE(
      "checkpoint: FIFO, directory, device, text, bare archive, truncated: refused or fall back") {
    TempDir tmp;
    const std::string w = tmp.path(), train = w + "/train", log = w + "/log.txt";
    interrupted_run(w, train);
    const std::string good = trainer_test::read_file(w + "/tmpl/checkpoint.pt");
    struct Row {
      std::string name;
      std::function<void(const std::string&)> make;  // creates the bad checkpoint.pt
      bool keep_previous;
      int code;
      std::string needle;
    };
    const auto fifo = [](const std::string& p) { REQUIRE(::mkfifo(p.c_str(), 0644) == 0); };
    const std::vector<Row> rows = {
        {"a FIFO", fifo, false, 5, "is a FIFO (named pipe), not a regular file"},
        {"a FIFO, the older one intact", fifo, true, 0, "falling back to the older"},
        {"a directory", [](const std::string& p) { std::filesystem::create_directory(p); }, false,
         5, "is a directory, not a regular file"},
        {"a link to /dev/zero",
         [](const std::string& p) { std::filesystem::create_symlink("/dev/zero", p); }, false, 5,
         "is a character device"},
        {"text",
         [](const std::string& p) { write_bytes(p, "this is not a checkpoint, only some text\n"); },
         false, 5, "not a dscache-train checkpoint (no checkpoint header)"},
        {"a bare LibTorch archive (format 1, no header)",
         [&](const std::string& p) { std::filesystem::copy_file(w + "/ref/model.pt", p); }, false,
         5, "a bare LibTorch archive"},
        {"truncated",
         [&](const std::string& p) { write_bytes(p, good.substr(0, good.size() / 2)); }, false, 5,
         "(truncated or damaged)"},
        {"empty", [](const std::string& p) { write_bytes(p, ""); }, false, 5,
         "0 bytes, shorter than the header"},
        {"missing, the older one intact", [](const std::string&) {}, true, 0,
         "checkpoint.pt is missing; falling back to the older"},
    };
    for (const Row& row : rows) {
      CAPTURE(row.name);
      const std::string dir = copy_of_template(w, "bad");
      std::filesystem::remove(dir + "/checkpoint.pt");
      if (!row.keep_previous) std::filesystem::remove(dir + "/checkpoint.prev.pt");
      row.make(dir + "/checkpoint.pt");
      const auto t0 = std::chrono::steady_clock::now();
      const Resumed r = resume(train, dir, log, 60);
      CAPTURE(r.text);
      CHECK(code_of(r.status) == row.code);
      CHECK(r.text.find(row.needle) != std::string::npos);
      CHECK(seconds_since(t0) < 60);
      if (row.code == 0) {
        CHECK(trainer_test::read_file(dir + "/model.pt") ==
              trainer_test::read_file(w + "/ref/model.pt"));
      }
    }
  }

  TEST_CASE("--resume says where it resumes, refuses meaning changes and names the rest") {
    TempDir tmp;
    const std::string train = tmp.path() + "/train", out = tmp.path() + "/out";
    const std::string log = tmp.path() + "/log.txt";
    trainer_test::write_cache(train, trainer_test::synthetic(64, 8, 8, 1, 4, 3));
    REQUIRE(code_of(trainer_test::run_process(tiny_args(train, out), {}, log)) == 0);
    std::filesystem::remove(log);
    auto changed = tiny_args(
        train, out, {"--resume", "--normalize", "half", "--model", "resnet18", "--lr", "0.1"});
    // tiny_args gives --batch 16 and --seed 1: change their values (--batch 8 keeps the global
    // batch of 16 with --accum-steps 2: not refused, elastic.h)
    *(std::find(changed.begin(), changed.end(), "--batch") + 1) = "8";
    *(std::find(changed.begin(), changed.end(), "--seed") + 1) = "9";
    int st = run_with_timeout(changed, {}, log, 120);
    std::string text = trainer_test::read_file(log);
    CAPTURE(text);
    CHECK(code_of(st) == 2);
    for (const char* needle :
         {"was made with other settings that change the run's meaning: ",
          "--model cnn (this run: resnet18)", "--seed 1 (this run: 9)",
          "--normalize dataset (this run: half)", "or --force to start over"}) {
      CHECK(text.find(needle) != std::string::npos);
    }
    CHECK(text.find("--batch 16") == std::string::npos);
    std::filesystem::remove(log);
    st = run_with_timeout(tiny_args(train, out,
                                    {"--resume", "--epochs", "2", "--lr", "0.1", "--precision",
                                     "bf16", "--schedule", "cosine", "--clip-grad", "1"}),
                          {}, log, 120);
    text = trainer_test::read_file(log);
    CHECK(code_of(st) == 0);
    for (const char* needle :
         {"at the end of epoch 1/2, step 4 (64 samples seen)",
          "options that differ from the checkpoint's take effect from now: ",
          "--lr 0.1 (checkpoint: 0.05)", "--schedule cosine (checkpoint: constant)",
          "--clip-grad 1 (checkpoint: 0)", "--epochs 2 (checkpoint: 1)",
          "--precision bf16 (checkpoint: fp32)"}) {
      CHECK(text.find(needle) != std::string::npos);
    }
    CHECK(text.find("--batch") == std::string::npos);  // what did not change is not named
    CHECK(read_metrics(out + "/metrics.jsonl").size() == 2 * (4 + 1));
  }

  TEST_CASE("--resume refuses a cache rebuilt with other samples unless --allow-data-change") {
    TempDir tmp;
    const std::string train = tmp.path() + "/train", out = tmp.path() + "/out";
    const std::string log = tmp.path() + "/log.txt";
    trainer_test::write_cache(train, trainer_test::synthetic(64, 8, 8, 1, 4, 3));
    REQUIRE(code_of(run_with_timeout(tiny_args(train, out), {}, log, 120)) == 0);
    // The same count, shape and classes, other pixels: what a rebuild from another source gives.
    std::filesystem::remove_all(train);
    trainer_test::write_cache(train, trainer_test::synthetic(64, 8, 8, 1, 4, 4));
    std::filesystem::remove(log);
    int st = run_with_timeout(tiny_args(train, out, {"--resume", "--epochs", "2"}), {}, log, 120);
    std::string text = trainer_test::read_file(log);
    CAPTURE(text);
    CHECK(code_of(st) == 2);
    CHECK(text.find("was made on other training data: ") != std::string::npos);
    CHECK(text.find("content digest ") != std::string::npos);
    CHECK(text.find("--allow-data-change") != std::string::npos);
    std::filesystem::remove(log);
    st = run_with_timeout(
        tiny_args(train, out, {"--resume", "--epochs", "2", "--allow-data-change"}), {}, log, 120);
    text = trainer_test::read_file(log);
    CHECK(code_of(st) == 0);
    CHECK(text.find("warning: --allow-data-change: continuing") != std::string::npos);
    // The checkpoint now records the new data: a plain resume of it is accepted.
    std::filesystem::remove(log);
    st = run_with_timeout(tiny_args(train, out, {"--resume", "--epochs", "3"}), {}, log, 120);
    text = trainer_test::read_file(log);
    CHECK(code_of(st) == 0);
    CHECK(text.find("other training data") == std::string::npos);
  }
}  // TEST_SUITE cli
