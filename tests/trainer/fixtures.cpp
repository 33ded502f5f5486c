// Fixtures for the trainer tests (no LibTorch here: this file compiles fast).
#include "fixtures.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

#ifdef DSCACHE_TEST_HAVE_ZLIB
#include <zlib.h>
#endif

#include "dscache/atomic_file.h"
#include "dscache/cache_writer.h"
#include "dscache/checksum.h"
#include "dscache/manifest.h"
#include "dscache/npy.h"
#include "dscache/shard.h"

extern char** environ;

namespace trainer_test {

Dataset synthetic(uint64_t n, uint32_t h, uint32_t w, uint32_t c, uint32_t classes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Dataset d;
  d.height = h;
  d.width = w;
  d.channels = c;
  d.classes = classes;
  d.images.resize(n * h * w * c);
  for (uint64_t i = 0; i < n; ++i) {
    const int64_t label = static_cast<int64_t>(rng() % classes);
    d.labels.push_back(label);
    // Class k: a bright square at a class-specific position, on noise.
    const uint32_t cy = static_cast<uint32_t>((label * 5) % h),
                   cx = static_cast<uint32_t>((label * 3) % w);
    uint8_t* img = d.images.data() + i * h * w * c;
    for (uint32_t y = 0; y < h; ++y) {
      for (uint32_t x = 0; x < w; ++x) {
        const bool on = (y - cy + h) % h < h / 3 && (x - cx + w) % w < w / 3;
        for (uint32_t ch = 0; ch < c; ++ch) {
          const int v = (on ? 160 : 40) + static_cast<int>(rng() % 64);
          img[(y * w + x) * c + ch] = static_cast<uint8_t>(v);
        }
      }
    }
  }
  return d;
}

void write_cache(const std::string& dir, const Dataset& d, uint64_t shard_samples) {
  dscache::CacheWriterOptions o;
  o.recipe.height = d.height;
  o.recipe.width = d.width;
  o.recipe.channels = d.channels;
  o.recipe.shard_bytes = shard_samples * d.height * d.width * d.channels;
  for (uint32_t k = 0; k < d.classes; ++k) {
    o.classes.push_back(d.class_names.empty() ? "class" + std::to_string(k) : d.class_names.at(k));
  }
  o.source = {"idx", "/test/fixture", "", d.count(), 0};
  o.tool_version = "test";
  o.created_utc = "2024-01-01T00:00:00Z";
  o.force = true;
  auto w = dscache::CacheWriter::open(dir, o);
  const uint64_t bytes = uint64_t{d.height} * d.width * d.channels;
  for (uint64_t i = 0; i < d.count(); ++i) {
    w->append(d.images.data() + i * bytes, d.height, d.width, d.labels[i],
              "sample/" + std::to_string(i));
  }
  w->publish();
}

#ifdef DSCACHE_TEST_HAVE_ZLIB
namespace {
std::string gunzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot open " + path);
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  gzclose(f);
  if (n < 0) throw std::runtime_error("cannot gunzip " + path);
  return out;
}
uint32_t be32(const std::string& s, size_t off) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data() + off);
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}
}  // namespace
#endif

Dataset read_idx_gz(const std::string& images_gz, const std::string& labels_gz, uint64_t first,
                    uint64_t n) {
#ifdef DSCACHE_TEST_HAVE_ZLIB
  const std::string im = gunzip(images_gz), lb = gunzip(labels_gz);
  if (im.size() < 16 || be32(im, 0) != 0x803 || lb.size() < 8 || be32(lb, 0) != 0x801) {
    throw std::runtime_error("not idx files: " + images_gz + ", " + labels_gz);
  }
  const uint64_t count = be32(im, 4), h = be32(im, 8), w = be32(im, 12);
  if (first + n > count || be32(lb, 4) != count) throw std::runtime_error("idx: too few samples");
  Dataset d;
  d.height = static_cast<uint32_t>(h);
  d.width = static_cast<uint32_t>(w);
  d.channels = 1;
  d.classes = 10;
  d.images.assign(im.begin() + 16 + first * h * w, im.begin() + 16 + (first + n) * h * w);
  for (uint64_t i = first; i < first + n; ++i) {
    d.labels.push_back(static_cast<unsigned char>(lb[8 + i]));
  }
  return d;
#else
  throw std::runtime_error("read_idx_gz: built without zlib");
#endif
}

std::vector<std::string> cat(std::vector<std::string> head, const std::vector<std::string>& flags) {
  head.insert(head.end(), flags.begin(), flags.end());
  return head;
}

int run_process(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
                const std::string& log_path) {
  return wait_process(spawn_process(argv, extra_env, log_path));
}

int wait_process(int pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  return status;
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw std::runtime_error("free_port: no socket");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::vector<int> spawn_ranks(const std::vector<std::string>& argv, int world,
                             const std::vector<int>& ranks, const std::string& log_path,
                             const std::vector<std::string>& extra_env) {
  const std::string port = std::to_string(free_port());
  std::vector<int> pids;
  for (int r : ranks) {
    std::vector<std::string> env = {
        "RANK=" + std::to_string(r), "WORLD_SIZE=" + std::to_string(world),
        "LOCAL_RANK=" + std::to_string(r), "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port};
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    pids.push_back(spawn_process(argv, env, log_path));
  }
  return pids;
}

std::vector<int> run_ranks(const std::vector<std::string>& argv, int world,
                           const std::vector<int>& ranks, const std::string& log_path,
                           const std::vector<std::string>& extra_env) {
  std::vector<int> statuses;
  for (int pid : spawn_ranks(argv, world, ranks, log_path, extra_env)) {
    statuses.push_back(wait_process(pid));
  }
  return statuses;
}

int spawn_process(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
                  const std::string& log_path) {
  // dscache-train's default precision is auto: bf16 on a CPU with native bf16, fp32 elsewhere.
  // The tests pin fp32 unless they name a precision, so what they compare (weights bit for bit,
  // K x b against K*b) means the same on every x86-64 CPU.
  std::vector<std::string> full = argv;
  const bool trainer = std::any_of(full.begin(), full.end(), [](const std::string& a) {
    return a.size() >= 13 && a.compare(a.size() - 13, 13, "dscache-train") == 0;
  });
  const bool named = std::any_of(full.begin(), full.end(), [](const std::string& a) {
    return a.rfind("--precision", 0) == 0;
  });
  if (trainer && !named) {
    full.emplace_back("--precision");
    full.emplace_back("fp32");
  }
  std::vector<char*> args;
  for (const auto& a : full) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_store(extra_env);
  for (char** e = environ; *e; ++e) env_store.emplace_back(*e);
  std::vector<char*> env;
  for (auto& e : env_store) env.push_back(e.data());
  env.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (!log_path.empty()) {
    posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
  }
  pid_t pid;
  const int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), env.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("posix_spawn " + argv[0] + ": " + std::strerror(rc));
  return pid;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace trainer_test
