// dscache-train on bad targets, a doomed run and a bad rendezvous host (suite cli, issue 38):
// non-finite and non-0/1 targets are named errors (exit 2), a run whose every step was skipped
// exits 9 without a model, an unresolvable MASTER_ADDR fails in seconds (exit 8), "precision
// auto" is said only once the run starts, and a mask column built as text names the fix.
// No LibTorch here (this file compiles fast): caches come from libcache's CacheWriter.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "dscache/cache_writer.h"
#include "dscache/checksum.h"
#include "dscache/exit_codes.h"
#include "dscache/fields.h"
#include "dscache/npy.h"
#include "fixtures.h"
#include "task_caches.h"
#include "train_runs.h"

namespace {

using dscache::ExitCode;
using trainer_test::TempDir;
namespace fs = std::filesystem;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void spill(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Sets float32 scalar field `field` of `sample` to `value` in the cache at `dir`, as a cache
// written before the Writer refused non-finite values would hold it: the field file, its
// checksums.npy column and both files' XXH64 in the manifest agree with the new bytes.
void set_float_field(const std::string& dir, const std::string& field, uint64_t sample,
                     float value) {
  nlohmann::json m = nlohmann::json::parse(slurp(dir + "/manifest.json"));
  size_t j = 0;
  while (m["fields"][j]["name"] != field) ++j;
  for (auto& shard : m["shards"]) {
    const uint64_t first = shard["first"], count = shard["count"];
    if (sample < first || sample >= first + count) continue;
    auto& entry = shard["fields"][field]["values"];
    const std::string path = dir + "/" + entry["file"].get<std::string>();
    std::string bytes = slurp(path);
    const dscache::NpyHeader h = dscache::parse_npy_header(bytes.data(), bytes.size(), path);
    std::memcpy(&bytes[h.data_offset + (sample - first) * 4], &value, 4);
    spill(path, bytes);
    entry["xxh64"] = dscache::hex64(dscache::xxh64(bytes.data(), bytes.size()));
  }
  auto& sums = m["files"]["checksums"];
  const std::string path = dir + "/" + sums["file"].get<std::string>();
  std::string bytes = slurp(path);
  const dscache::NpyHeader h = dscache::parse_npy_header(bytes.data(), bytes.size(), path);
  const uint64_t column = dscache::xxh64(&value, 4);  // little-endian, as the file
  std::memcpy(&bytes[h.data_offset + (sample * h.shape[1] + 1 + j) * 8], &column, 8);
  spill(path, bytes);
  sums["xxh64"] = dscache::hex64(dscache::xxh64(bytes.data(), bytes.size()));
  spill(dir + "/manifest.json", m.dump(2) + "\n");
}

dscache::CacheWriterOptions options_with(std::vector<dscache::FieldSpec> fields) {
  dscache::CacheWriterOptions o;
  o.recipe.height = o.recipe.width = 8;
  o.recipe.channels = 3;
  o.recipe.shard_bytes = 1 << 20;
  o.classes = {"x", "y"};
  o.tool_version = "test";
  o.created_utc = "2024-01-01T00:00:00Z";
  o.force = true;
  o.fields = std::move(fields);
  return o;
}

// `n` 8x8 noise images; field y (float32) = `y` for every sample.
void constant_target_cache(const std::string& dir, uint64_t n, float y) {
  dscache::FieldSpec f;
  f.name = "y", f.dtype = dscache::FieldType::kFloat32;
  dscache::CacheWriterOptions o = options_with({f});
  o.source = {"idx", "/test/constant", "", n, 0};
  auto w = dscache::CacheWriter::open(dir, o);
  std::vector<uint8_t> img(8 * 8 * 3);
  for (uint64_t i = 0; i < n; ++i) {
    for (size_t p = 0; p < img.size(); ++p) img[p] = static_cast<uint8_t>((i * 37 + p * 11) % 251);
    const dscache::FieldData v[1] = {{&y, 4}};
    w->append(img.data(), 8, 8, static_cast<int64_t>(i % 2), "s/" + std::to_string(i), nullptr, v);
  }
  w->publish();
}

// A table's mask column built without `--field mask_path=mask`: text paths of mask images.
void text_mask_cache(const std::string& dir, uint64_t n) {
  dscache::FieldSpec f;
  f.name = "mask_path", f.kind = dscache::FieldKind::kText, f.dtype = dscache::FieldType::kUint8;
  dscache::CacheWriterOptions o = options_with({f});
  o.source = {"idx", "/test/text-mask", "", n, 0};
  auto w = dscache::CacheWriter::open(dir, o);
  std::vector<uint8_t> img(8 * 8 * 3, 90);
  for (uint64_t i = 0; i < n; ++i) {
    const std::string path = "masks/" + std::to_string(100 + i) + ".png";
    const dscache::FieldData v[1] = {{path.data(), path.size()}};
    w->append(img.data(), 8, 8, 0, "s/" + std::to_string(i), nullptr, v);
  }
  w->publish();
}

struct Result {
  int code = -1;  // the exit code as a shell reports it; -1: killed after the time limit
  double seconds = 0;
  std::string text;  // stdout and stderr
};

// Runs dscache-train with `flags` (after a tiny run's defaults), extra environment `env`, for at
// most `limit_s` seconds.
Result run_train(const TempDir& tmp, const std::vector<std::string>& flags,
                 const std::vector<std::string>& env = {}, double limit_s = 120) {
  const std::string log = tmp.path() + "/log.txt";
  fs::remove(log);
  const auto t0 = std::chrono::steady_clock::now();
  const auto since = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const int pid = trainer_test::spawn_process(
      trainer_test::cat({trainer_test::train_exe(), "--no-progress", "--threads", "1", "--seed",
                         "1", "--batch", "16"},
                        flags),
      env, log);
  Result r;
  for (;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (since() > limit_s) {
      ::kill(pid, SIGKILL);
      trainer_test::wait_process(pid);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  r.seconds = since();
  r.text = trainer_test::read_file(log);
  return r;
}

constexpr int kUsage = static_cast<int>(ExitCode::kUsage);

}  // namespace

TEST_SUITE("cli") {
  TEST_CASE("faults: a non-finite regression target is named (field, sample, cache), exit 2") {
    TempDir tmp;
    const std::string train = tmp.path() + "/train", val = tmp.path() + "/val";
    trainer_test::brightness_cache(train, 48, 1);
    trainer_test::brightness_cache(val, 16, 2);
    set_float_field(train, "r", 29, std::numeric_limits<float>::quiet_NaN());
    set_float_field(train, "g", 7, std::numeric_limits<float>::infinity());
    set_float_field(val, "r", 3, -std::numeric_limits<float>::infinity());
    const std::string fine = tmp.path() + "/fine";
    trainer_test::brightness_cache(fine, 48, 1);
    struct Case {
      std::vector<std::string> flags;
      std::string says;
    };
    const Case cases[] = {
        // every batch's targets (the first bad sample the shuffled epoch meets)
        {{"--train", train, "--targets", "r"},
         "--targets: field 'r' of sample 29 in --train " + train + " is nan"},
        {{"--train", train, "--targets", "g"},
         "--targets: field 'g' of sample 7 in --train " + train + " is inf"},
        // --target-norm's pass over the training set, before any step
        {{"--train", train, "--targets", "g,r", "--target-norm"},
         "field 'g' of sample 7 in --train " + train + " is inf"},
        // the validation batches
        {{"--train", fine, "--val", val, "--targets", "r"},
         "field 'r' of sample 3 in --val " + val + " is -inf"},
    };
    for (const Case& c : cases) {
      auto flags = c.flags;
      const std::string out = tmp.path() + "/out" + std::to_string(&c - cases);
      flags.insert(flags.end(), {"--task", "regress", "--output", out});
      const Result r = run_train(tmp, flags);
      CAPTURE(r.text);
      CHECK(r.code == kUsage);
      CHECK(r.text.find(c.says + "; --task regress needs finite targets") != std::string::npos);
      CHECK(!fs::exists(out + "/model.pt"));
    }
  }

  TEST_CASE("faults: a multilabel target other than 0/1 exits 2 (a bad value), naming it") {
    TempDir tmp;
    const std::string train = tmp.path() + "/train";
    trainer_test::brightness_cache(train, 4, 1);  // id: 0, 1, 2, 3
    const Result r = run_train(tmp, {"--train", train, "--task", "multilabel", "--targets", "id"});
    CAPTURE(r.text);
    CHECK(r.code == kUsage);
    CHECK(r.text.find(" in --train " + train + " is ") != std::string::npos);
    CHECK(r.text.find("; --task multilabel needs targets of 0 or 1") != std::string::npos);
  }

  TEST_CASE("faults: a run whose every step was skipped exits 9 and writes no model") {
    TempDir tmp;
    // Targets near float32's largest: every squared error overflows, so every step's loss (and,
    // with a loss scaler, every gradient) is inf. 64 samples of batch 16: 4 steps an epoch,
    // fewer in a row than the 5 that stop a run without a scaler.
    const std::string train = tmp.path() + "/train";
    constant_target_cache(train, 64, 3e38f);
    struct Case {
      std::vector<std::string> flags;
      std::string says;
    };
    const Case cases[] = {
        {{}, "all 4 optimizer steps were skipped"},
        {{"--loss-scaling", "on", "--epochs", "3"}, "all 12 optimizer steps were skipped"},
    };
    for (const Case& c : cases) {
      const std::string out = tmp.path() + "/out" + std::to_string(&c - cases);
      auto flags = trainer_test::cat({"--train", train, "--task", "regress", "--targets", "y",
                                      "--output", out, "--precision", "fp32"},
                                     c.flags);
      const Result r = run_train(tmp, flags);
      CAPTURE(r.text);
      CHECK(r.code == static_cast<int>(ExitCode::kDiverged));
      CHECK(r.text.find(c.says) != std::string::npos);
      CHECK(r.text.find("no model written") != std::string::npos);
      CHECK(!fs::exists(out + "/model.pt"));
      CHECK(!fs::exists(out + "/model.json"));
    }
  }

  TEST_CASE("faults: a rendezvous host that does not resolve fails in seconds, exit 8") {
    // Before the fix every rank waited for the whole --dist-timeout (600 s by default), c10d
    // warning once a second. The limit here is generous; the bug took the timeout.
    TempDir tmp;
    trainer_test::write_cache(tmp.path() + "/train", trainer_test::synthetic(32, 8, 8, 1, 2, 3));
    const std::string port = "MASTER_PORT=" + std::to_string(trainer_test::free_port());
    struct Case {
      std::vector<std::string> env;
      std::string says;
    };
    const Case cases[] = {
        {{"WORLD_SIZE=2", "RANK=1", "MASTER_ADDR=no-such-host.invalid", port},
         "rendezvous: MASTER_ADDR=no-such-host.invalid does not resolve ("},
        {{"WORLD_SIZE=2", "RANK=0", "MASTER_ADDR=no-such-host.invalid", port},
         "rendezvous: MASTER_ADDR=no-such-host.invalid does not resolve ("},
        {{"SLURM_JOB_ID=77", "SLURM_STEP_NUM_TASKS=2", "SLURM_PROCID=1", "SLURM_LOCALID=1",
          "SLURM_STEP_NODELIST=nohost[1-2].invalid", port},
         "SLURM_STEP_NODELIST's first host 'nohost1.invalid' (rank 0's host) does not resolve"},
    };
    for (const Case& c : cases) {
      const Result r =
          run_train(tmp, {"--train", tmp.path() + "/train", "--dist-timeout", "120"}, c.env, 100);
      CAPTURE(r.text);
      CHECK(r.code == static_cast<int>(ExitCode::kDistributed));
      CHECK(r.text.find(c.says) != std::string::npos);
      CHECK(r.text.find("set MASTER_ADDR to rank 0's address") != std::string::npos);
      CHECK(r.seconds < 60);
    }
  }

  TEST_CASE("faults: 'precision auto' is said once the run starts, not before a usage error") {
    TempDir tmp;
    const std::string train = tmp.path() + "/train", out = tmp.path() + "/out";
    trainer_test::brightness_cache(train, 16, 1);
    // The run itself says it.
    Result r = run_train(tmp, {"--train", train, "--output", out, "--precision", "auto"});
    CHECK(r.code == 0);
    CHECK(r.text.find("precision auto: ") != std::string::npos);
    // Errors found once the cache is read, or in --output: the error alone.
    const std::vector<std::string> bad[] = {
        {"--task", "regress", "--targets", "nope"},  // usage, 2
        {"--output", out},                           // holds a run, 4
    };
    for (const auto& flags : bad) {
      r = run_train(tmp, trainer_test::cat({"--train", train, "--precision", "auto"}, flags));
      CAPTURE(r.text);
      CHECK(r.code != 0);
      CHECK(r.text.find("precision") == std::string::npos);
    }
  }

  TEST_CASE("faults: --task segment on a mask column built as text names --field COL=mask") {
    TempDir tmp;
    const std::string train = tmp.path() + "/train";
    text_mask_cache(train, 8);
    Result r = run_train(tmp, {"--train", train, "--task", "segment"});
    CAPTURE(r.text);
    CHECK(r.code == kUsage);
    CHECK(r.text.find("--task segment: --train " + train +
                      " has no mask field, but its text "
                      "field 'mask_path' holds image paths ('masks/100.png')") !=
          std::string::npos);
    CHECK(r.text.find("rebuild the cache with --field mask_path=mask") != std::string::npos);
    // Named with --targets: the same fix.
    r = run_train(tmp, {"--train", train, "--task", "segment", "--targets", "mask_path"});
    CHECK(r.code == kUsage);
    CHECK(r.text.find("rebuild with --field mask_path=mask") != std::string::npos);
    // No text field that looks like one: how to build a mask field at all.
    const std::string plain = tmp.path() + "/plain";
    constant_target_cache(plain, 8, 1.0f);
    r = run_train(tmp, {"--train", plain, "--task", "segment"});
    CHECK(r.code == kUsage);
    CHECK(r.text.find("has no mask field: rebuild it with --field COL=mask") != std::string::npos);
  }
}
