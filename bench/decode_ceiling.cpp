// The decode-only ceiling of `dscache build`: every file of a folder read into memory first, then
// decoded and resized in parallel (same decode_image call and options as the build) with nothing
// written. `dscache build` images/s divided by this figure is the share the pipeline keeps.
//
// Usage: decode_ceiling DIR --size N|HxW [--threads T] [--no-reduced-decode] [--repeat R]
//                       [--resize crop|pad|stretch]
// Prints one JSON line: {"files":N,"bytes":B,"repeat":R,"threads":T,...,"ok":K,"failed":F,
// "reduced":D (decodes that used JPEG DCT scaling),"seconds":S (wall, decode loop only),
// "cpu_seconds":C (user+sys of the loop),"images_per_s":X}. Exit status 1 if any file failed.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>

#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "dscache/ingest/image_decode.h"

namespace fs = std::filesystem;

namespace {

struct Args {
  std::string dir;
  uint32_t height = 0;
  uint32_t width = 0;
  int threads = 0;  // 0 = all cores
  int repeat = 1;
  bool reduced_decode = true;
  dscache::ResizePolicy resize = dscache::ResizePolicy::kCrop;
};

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "decode_ceiling: " << why << "\n"
            << "usage: decode_ceiling DIR --size N|HxW [--threads T] [--no-reduced-decode]"
               " [--repeat R] [--resize crop|pad|stretch]\n";
  std::exit(2);
}

uint32_t parse_positive(const std::string& s, const char* what) {
  try {
    size_t used = 0;
    long v = std::stol(s, &used);
    if (used == s.size() && v > 0 && v <= 1'000'000) return static_cast<uint32_t>(v);
  } catch (const std::exception&) {
  }
  usage(std::string(what) + " must be a positive integer, got '" + s + "'");
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--size") {
      const std::string v = value();
      const size_t x = v.find('x');
      if (x == std::string::npos) {
        a.height = a.width = parse_positive(v, "--size");
      } else {
        a.height = parse_positive(v.substr(0, x), "--size height");
        a.width = parse_positive(v.substr(x + 1), "--size width");
      }
    } else if (arg == "--threads") {
      a.threads = static_cast<int>(parse_positive(value(), "--threads"));
    } else if (arg == "--repeat") {
      a.repeat = static_cast<int>(parse_positive(value(), "--repeat"));
    } else if (arg == "--no-reduced-decode") {
      a.reduced_decode = false;
    } else if (arg == "--resize") {
      const std::string v = value();
      const std::optional<dscache::ResizePolicy> policy = dscache::kResizePolicyNames.find(v);
      if (!policy) usage(dscache::kResizePolicyNames.unknown(v, "--resize"));
      a.resize = *policy;
    } else if (!arg.empty() && arg[0] == '-') {
      usage("unknown option " + arg);
    } else if (a.dir.empty()) {
      a.dir = arg;
    } else {
      usage("more than one DIR given");
    }
  }
  if (a.dir.empty()) usage("DIR is required");
  if (a.height == 0) usage("--size is required");
  if (a.threads == 0)
    a.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return a;
}

// User + system CPU seconds of this process so far (all threads).
double cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

std::vector<std::string> list_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  dscache::set_decode_threads(0);  // as `dscache build`: TBB threads are the parallelism

  std::vector<std::string> files;
  std::vector<std::vector<uint8_t>> bytes;
  try {
    files = list_files(a.dir);
    bytes.reserve(files.size());
    for (const auto& f : files) bytes.push_back(read_all(f));
  } catch (const std::exception& e) {
    std::cerr << "decode_ceiling: " << e.what() << "\n";
    return 1;
  }
  uint64_t total_bytes = 0;
  for (const auto& b : bytes) total_bytes += b.size();

  dscache::DecodeOptions opt;
  opt.height = a.height;
  opt.width = a.width;
  opt.channels = 3;
  opt.resize = a.resize;
  opt.reduced_decode = a.reduced_decode;
  const size_t sample_bytes = size_t{opt.height} * opt.width * opt.channels;

  // One output buffer per worker thread, allocated before the clock starts.
  tbb::enumerable_thread_specific<std::vector<uint8_t>> out_buf(
      [&] { return std::vector<uint8_t>(sample_bytes); });
  std::atomic<uint64_t> ok{0};
  std::atomic<uint64_t> failed{0};
  std::atomic<uint64_t> reduced{0};  // decodes that used DCT scaling (factor > 1)

  tbb::task_arena arena(a.threads);
  arena.initialize();  // worker threads exist before the clock starts
  const double cpu0 = cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  arena.execute([&] {
    for (int r = 0; r < a.repeat; ++r) {
      tbb::parallel_for(tbb::blocked_range<size_t>(0, bytes.size(), 1),
                        [&](const tbb::blocked_range<size_t>& range) {
                          std::vector<uint8_t>& out = out_buf.local();
                          for (size_t i = range.begin(); i != range.end(); ++i) {
                            const dscache::DecodeResult res = dscache::decode_image(
                                bytes[i].data(), bytes[i].size(), opt, out.data());
                            if (res.ok) {
                              ok.fetch_add(1, std::memory_order_relaxed);
                              if (res.reduction > 1)
                                reduced.fetch_add(1, std::memory_order_relaxed);
                            } else {
                              failed.fetch_add(1, std::memory_order_relaxed);
                            }
                          }
                        });
    }
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = cpu_seconds() - cpu0;
  const double decoded = double(files.size()) * a.repeat;

  std::printf(
      "{\"files\":%zu,\"bytes\":%llu,\"repeat\":%d,\"threads\":%d,\"height\":%u,\"width\":%u,"
      "\"reduced_decode\":%s,\"ok\":%llu,\"failed\":%llu,\"reduced\":%llu,\"seconds\":%.6f,"
      "\"cpu_seconds\":%.6f,\"images_per_s\":%.3f}\n",
      files.size(), static_cast<unsigned long long>(total_bytes), a.repeat, a.threads, a.height,
      a.width, a.reduced_decode ? "true" : "false", static_cast<unsigned long long>(ok.load()),
      static_cast<unsigned long long>(failed.load()),
      static_cast<unsigned long long>(reduced.load()), seconds, cpu,
      seconds > 0 ? decoded / seconds : 0.0);
  return failed.load() == 0 ? 0 : 1;
}
