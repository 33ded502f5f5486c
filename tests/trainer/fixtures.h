// Fixtures for the trainer tests: temp dirs, caches written with libcache's own writers,
// Fashion-MNIST idx files, and running the dscache-train binary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "../temp_dir.h"

namespace trainer_test {

using dscache::test::TempDir;  // the tests' one temp dir (tests/temp_dir.h)

// Samples in HWC uint8 plus labels in [0, classes).
struct Dataset {
  uint32_t height = 0, width = 0, channels = 0;
  uint32_t classes = 0;
  std::vector<std::string> class_names;  // write_cache's names; empty: class0, class1, ...
  std::vector<uint8_t> images;           // count * height * width * channels
  std::vector<int64_t> labels;
  uint64_t count() const { return labels.size(); }
};

// `n` samples of h x w x c: each class is a distinct blob pattern plus noise, so a model can
// learn something, but every pixel is seeded data.
Dataset synthetic(uint64_t n, uint32_t h, uint32_t w, uint32_t c, uint32_t classes, uint64_t seed);

// Writes `d` as a complete fixed-layout npy cache in `dir` (created), `shard_samples` per shard.
void write_cache(const std::string& dir, const Dataset& d, uint64_t shard_samples = 1000);

// Reads samples [first, first + n) of a gzipped idx image file and its label file. Throws
// std::runtime_error when they cannot be read (or zlib was not available at build time).
Dataset read_idx_gz(const std::string& images_gz, const std::string& labels_gz, uint64_t first,
                    uint64_t n);

// `head` then `flags`: a command line whose computed parts (executable, paths) come first, so
// that its literal flags pack into a few lines.
std::vector<std::string> cat(std::vector<std::string> head, const std::vector<std::string>& flags);

// Runs `argv` (argv[0] a path) with extra "NAME=value" environment entries; returns the raw
// wait status. stdout/stderr go to `log_path` when non-empty.
int run_process(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
                const std::string& log_path = "");

// The same, without waiting: returns the child's pid for wait_process().
int spawn_process(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
                  const std::string& log_path = "");
int wait_process(int pid);  // the raw wait status

// A TCP port on 127.0.0.1 that was free a moment ago.
int free_port();

// Starts `argv` by hand (as a scheduler would) as each rank in `ranks` of a `world`-rank job on
// a free port of 127.0.0.1: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT, then
// `extra_env`; all log to `log_path`. Returns their pids, in the order of `ranks`.
std::vector<int> spawn_ranks(const std::vector<std::string>& argv, int world,
                             const std::vector<int>& ranks, const std::string& log_path,
                             const std::vector<std::string>& extra_env = {});

// spawn_ranks(), then waits for each: their raw wait statuses, in the order of `ranks`.
std::vector<int> run_ranks(const std::vector<std::string>& argv, int world,
                           const std::vector<int>& ranks, const std::string& log_path,
                           const std::vector<std::string>& extra_env = {});

std::string read_file(const std::string& path);

}  // namespace trainer_test
