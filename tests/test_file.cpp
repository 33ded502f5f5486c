// File (regular files only), CacheDir (the one validated reader), size checks before allocation,
// one generation per open, and a shard truncated under a running Loader.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "dscache/cache.h"
#include "dscache/cache_dir.h"
#include "dscache/error.h"
#include "dscache/file.h"
#include "dscache/loader.h"
#include "dscache/npy.h"
#include "test_util.h"

using dscache::CacheDir;
using dscache::Error;
using dscache::ErrorKind;
using dscache::File;
using dscache::FollowSymlinks;
using namespace dscache::test;

namespace {

// Runs f on another thread; fails (instead of hanging the suite) when it takes over 5 s.
template <typename F>
void within_5s(F f) {
  auto done = std::async(std::launch::async, f);
  REQUIRE_MESSAGE(done.wait_for(std::chrono::seconds(5)) == std::future_status::ready,
                  "hung: opening a FIFO must not block");
  done.get();
}

using Spec = SmallCacheSpec;

// One shard of `count` samples of 32x32: enough that a Loader is still reading when it is cut.
Spec one_shard_of_32x32(uint64_t count) {
  Spec spec;
  spec.shard_counts = {count};
  spec.height = 32;
  spec.width = 32;
  return spec;
}

// A Loader of two workers with `lo`'s other options over the cache in `dir`, opened mapped
// (kPageCache), so that a shard cut under it faults.
std::unique_ptr<dscache::Loader> mapped_loader(const std::string& dir, dscache::LoaderOptions lo) {
  dscache::CacheOptions co;
  co.memory = dscache::MemoryMode::kPageCache;
  lo.workers = 2;
  return std::make_unique<dscache::Loader>(dscache::Cache::open(dir, co), lo);
}

void replace_with_fifo(const std::string& path) {
  REQUIRE(::unlink(path.c_str()) == 0);
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
}

void replace_with_symlink(const std::string& path, const std::string& target) {
  REQUIRE(::unlink(path.c_str()) == 0);
  REQUIRE(::symlink(target.c_str(), path.c_str()) == 0);
}

}  // namespace

TEST_SUITE("file") {
  TEST_CASE("File::open takes regular files and refuses FIFOs, devices, directories at once") {
    TempDir dir;
    write_all(dir.file("plain"), "hello");
    const File f = File::open(dir.file("plain"));
    CHECK(f.size() == 5);
    CHECK((::fcntl(f.fd(), F_GETFL) & O_NONBLOCK) == 0);  // cleared after the check
    std::string text = f.read_all(100);
    CHECK(text == "hello");
    expect_error([&] { f.read_all(4); }, ErrorKind::kCorruption, "more than the 4 allowed");
    char buf[8];
    expect_error([&] { f.read_at(2, 8, buf); }, ErrorKind::kCorruption, "file ends at 5");

    REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0600) == 0);
    within_5s([&] {
      expect_error([&] { File::open(dir.file("fifo")); }, ErrorKind::kCorruption,
                   "fifo: not a regular file (a FIFO)");
    });
    expect_error([&] { File::open("/dev/zero"); }, ErrorKind::kCorruption,
                 "/dev/zero: not a regular file (a character device)");
    expect_error([&] { File::open(dir.path()); }, ErrorKind::kCorruption, "(a directory)");
    expect_error([&] { File::open(dir.file("missing")); }, ErrorKind::kNotFound, "missing");
    REQUIRE(::symlink("/dev/zero", dir.file("zero").c_str()) == 0);
    expect_error([&] { File::open(dir.file("zero")); }, ErrorKind::kCorruption,
                 "(a character device)");
    REQUIRE(::symlink("plain", dir.file("link").c_str()) == 0);
    CHECK(File::open(dir.file("link")).size() == 5);
    expect_error([&] { File::open(dir.file("link"), FollowSymlinks::kNo); }, ErrorKind::kCorruption,
                 "is a symlink");
  }

  TEST_CASE("File::open_inside follows a symlink only to a file inside the directory") {
    TempDir dir;
    REQUIRE(::mkdir(dir.file("c").c_str(), 0700) == 0);
    write_all(dir.file("c/a"), "abc");
    write_all(dir.file("outside"), "secret");
    REQUIRE(::symlink("a", dir.file("c/in").c_str()) == 0);
    REQUIRE(::symlink("../outside", dir.file("c/out").c_str()) == 0);
    REQUIRE(::symlink("/etc/passwd", dir.file("c/passwd").c_str()) == 0);
    REQUIRE(::symlink("nothing", dir.file("c/dangling").c_str()) == 0);
    REQUIRE(::mkfifo(dir.file("c/fifo").c_str(), 0600) == 0);
    const int dfd = ::open(dir.file("c").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    REQUIRE(dfd >= 0);
    char* resolved = ::realpath(dir.file("c").c_str(), nullptr);
    REQUIRE(resolved != nullptr);
    const std::string real = resolved;
    std::free(resolved);
    CHECK(File::open_inside(dfd, real, "in", "c/in").size() == 3);
    expect_error([&] { File::open_inside(dfd, real, "out", "c/out"); }, ErrorKind::kCorruption,
                 "c/out: symlink leads outside the cache directory");
    expect_error([&] { File::open_inside(dfd, real, "passwd", "c/passwd"); },
                 ErrorKind::kCorruption, "(to /etc/passwd)");
    expect_error([&] { File::open_inside(dfd, real, "dangling", "c/dangling"); },
                 ErrorKind::kCorruption, "dangling");
    within_5s([&] {
      expect_error([&] { File::open_inside(dfd, real, "fifo", "c/fifo"); }, ErrorKind::kCorruption,
                   "not a regular file (a FIFO)");
    });
    expect_error([&] { File::open_inside(dfd, real, "../outside", "x"); }, ErrorKind::kCorruption,
                 "not a plain file name");
    ::close(dfd);
  }

  TEST_CASE("read_npy_data checks the file size before allocating what the header claims") {
    TempDir dir;
    // A header claiming 2^28 int64 (2 GiB) over 80 bytes of data: Corruption, no allocation.
    const std::string header = dscache::format_npy_header("<i8", {uint64_t{1} << 28});
    write_all(dir.file("big.npy"), header + std::string(80, '\0'));
    const dscache::NpyHeader h = dscache::read_npy_header(dir.file("big.npy"));
    expect_error([&] { dscache::read_npy_data(dir.file("big.npy"), h); }, ErrorKind::kCorruption,
                 "big.npy: file holds " + std::to_string(header.size() + 80) +
                     " bytes, header says " + std::to_string(header.size() + (uint64_t{8} << 28)));
    REQUIRE(::mkfifo(dir.file("fifo.npy").c_str(), 0600) == 0);
    within_5s([&] {
      expect_error([&] { dscache::read_npy_header(dir.file("fifo.npy")); }, ErrorKind::kCorruption,
                   "not a regular file");
    });
  }

  // Every side file and shard, swapped for a FIFO, /dev/zero, or a symlink out of the cache:
  // Cache::open and every CacheDir reader refuse it, naming it, within seconds.
  TEST_CASE("CacheDir and Cache::open refuse FIFOs, devices and symlinks out for every file") {
    const std::vector<std::string> names = {"manifest.json", "labels.npy",    "checksums.npy",
                                            "sources.jsonl", "skipped.jsonl", "images-00001.npy"};
    struct Attack {
      const char* what;
      std::function<void(const std::string&)> apply;
      const char* reason;
    };
    const std::vector<Attack> attacks = {
        {"fifo", replace_with_fifo, "not a regular file (a FIFO)"},
        {"/dev/zero symlink", [](const std::string& p) { replace_with_symlink(p, "/dev/zero"); },
         "symlink leads outside the cache directory (to /dev/zero)"},
        {"/etc/passwd symlink",
         [](const std::string& p) { replace_with_symlink(p, "/etc/passwd"); },
         "symlink leads outside the cache directory (to /etc/passwd)"},
    };
    for (const Attack& a : attacks) {
      for (const std::string& name : names) {
        CAPTURE(a.what);
        CAPTURE(name);
        TempDir dir;
        const WrittenCache f = write_test_cache(dir.path(), Spec{});
        a.apply(f.path(name));
        within_5s([&] {
          expect_error([&] { dscache::Cache::open(dir.path()); }, ErrorKind::kCorruption,
                       name + ": " + a.reason);
          if (name == "manifest.json") return;
          const auto files = CacheDir::open(dir.path());
          expect_error(
              [&] {
                if (name == "labels.npy") files->labels();
                if (name == "checksums.npy") files->checksums();
                if (name == "sources.jsonl") files->sources();
                if (name == "skipped.jsonl") files->skips();
                if (name == "images-00001.npy") files->open_shard(1);
              },
              ErrorKind::kCorruption, name + ": " + a.reason);
        });
      }
    }
  }

  TEST_CASE("CacheDir's readers: Fortran labels, malformed jsonl, unlabeled caches") {
    TempDir dir;
    WrittenCache f = write_test_cache(dir.path(), Spec{});
    const auto files = CacheDir::open(dir.path());
    CHECK(files->labels() == f.labels);
    CHECK(files->sources().size() == f.manifest.count);
    CHECK(files->skips().empty());

    // Fortran order: same bytes, the header says so.
    std::string labels = read_all(f.path("labels.npy"));
    const size_t at = labels.find("'fortran_order': False");
    REQUIRE(at != std::string::npos);
    labels.replace(at, 22, "'fortran_order': True ");
    write_all(f.path("labels.npy"), labels);
    expect_error([&] { files->labels(); }, ErrorKind::kCorruption,
                 "labels.npy: array is in Fortran order");

    // sources.jsonl: a line that is not a JSON string (same size, so the size check passes).
    std::string sources = read_all(f.path("sources.jsonl"));
    sources[0] = '{';
    write_all(f.path("sources.jsonl"), sources);
    expect_error([&] { files->sources(); }, ErrorKind::kCorruption,
                 "sources.jsonl: line 1 is not a JSON string");
  }

  TEST_CASE("an unlabeled cache (classes []) takes any label; a labeled one checks the range") {
    TempDir dir;
    Spec spec;
    WrittenCache f = write_test_cache(dir.path(), spec);
    f.manifest.classes.clear();
    f.manifest.class_counts.clear();
    dscache::write_manifest(f.dir, f.manifest);
    CHECK(CacheDir::open(dir.path())->labels() == f.labels);
    CHECK(dscache::Cache::open(dir.path())->size() == f.manifest.count);
  }

  TEST_CASE("one generation per open: a Cache keeps serving its files after DIR is swapped") {
    TempDir dir;
    const std::string a = dir.file("a"), b = dir.file("b"), live = dir.file("live");
    REQUIRE(::mkdir(a.c_str(), 0700) == 0);
    REQUIRE(::mkdir(b.c_str(), 0700) == 0);
    Spec sa, sb;
    sb.seed = 99;
    sb.shard_counts = {3, 3};
    const WrittenCache fa = write_test_cache(a, sa);
    const WrittenCache fb = write_test_cache(b, sb);
    REQUIRE(::rename(a.c_str(), live.c_str()) == 0);
    const auto files = CacheDir::open(live);
    // Swap in the other generation before any side file or shard is read.
    REQUIRE(::rename(live.c_str(), a.c_str()) == 0);
    REQUIRE(::rename(b.c_str(), live.c_str()) == 0);
    CHECK(files->manifest().count == fa.manifest.count);
    CHECK(files->labels() == fa.labels);
    CHECK(files->open_shard(2).loc.count == 2);  // b has no third shard
    // And a Cache opened on the new one serves the new one.
    CHECK(dscache::Cache::open(live)->size() == fb.manifest.count);
  }

  TEST_CASE("a shard truncated while a Loader serves it is Corruption naming it, not SIGBUS") {
    TempDir dir;
    const WrittenCache f = write_test_cache(dir.path(), one_shard_of_32x32(4000));
    dscache::LoaderOptions lo;
    lo.batch_size = 64;
    lo.prefetch = 2;
    const auto loader = mapped_loader(dir.path(), lo);
    loader->start_epoch(1, 0);
    REQUIRE(loader->next() != nullptr);
    // Cut the shard to its header while the workers keep reading from the mapping.
    REQUIRE(::truncate(f.path("images-00000.npy").c_str(), 128) == 0);
    bool corrupt = false;
    try {
      for (int i = 0; i < 100 && loader->next() != nullptr; ++i) {
      }
    } catch (const Error& e) {
      corrupt = e.kind() == ErrorKind::kCorruption &&
                std::string(e.what()).find("images-00000.npy") != std::string::npos &&
                std::string(e.what()).find("truncated") != std::string::npos;
      CHECK_MESSAGE(corrupt, e.what());
    }
    CHECK(corrupt);
  }

  TEST_CASE("a shard truncated under an open Cache: the Loader's crop path is Corruption") {
    // Every layout and storage the crop path reads through view() memory: npy and HDF5, fixed
    // and ragged, kCenter and kRandomResized. The shard is cut to 128 bytes after the Cache
    // mapped it, before the epoch starts: every sample past the first page faults.
    for (dscache::Storage storage : storages()) {
      for (dscache::Layout layout : {dscache::Layout::kFixed, dscache::Layout::kRagged}) {
        for (dscache::CropMode crop :
             {dscache::CropMode::kCenter, dscache::CropMode::kRandomResized}) {
          CAPTURE(dscache::to_string(storage));
          CAPTURE(dscache::to_string(layout));
          TempDir dir;
          Spec spec = one_shard_of_32x32(200);
          spec.storage = storage;
          spec.layout = layout;
          spec.ragged_min_side = 24;
          spec.ragged_max_side = 40;
          const WrittenCache f = write_test_cache(dir.path(), spec);
          dscache::LoaderOptions lo;
          lo.batch_size = 16;
          lo.prefetch = 1;
          lo.transform.crop = crop;
          lo.transform.height = 16;
          lo.transform.width = 16;
          const auto loader = mapped_loader(dir.path(), lo);
          const std::string shard = f.manifest.shards[0].file;
          REQUIRE(::truncate((dir.path() + "/" + shard).c_str(), 128) == 0);
          loader->start_epoch(1, 0);
          expect_error(
              [&] {
                while (loader->next() != nullptr) {
                }
              },
              ErrorKind::kCorruption, shard + ": file shrank while mapped (truncated");
        }
      }
    }
  }
}
