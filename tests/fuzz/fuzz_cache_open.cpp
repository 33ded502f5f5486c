// Fuzz target: Cache::open on a mutated cache directory, then reading every sample. A small
// valid npy cache (fixed, ragged, JPEG fixed or JPEG ragged) is written once per kind; each
// input replaces one of its files, updating the manifest's size for it (unless the file is the
// manifest) so the contents reach the checks behind the size check.
// Input: byte 0 = cache kind, byte 1 = which file (manifest.json, the shards, labels.npy,
// checksums.npy, sources.jsonl, skipped.jsonl, the index), byte 2 = options (bits 0-1 memory
// mode, bit 2 verify_checksums), the rest = the file's new contents.
// Seeds: each kind's every file unchanged (written with DSCACHE_FUZZ_SEEDS set).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dscache/cache.h"
#include "fuzz_util.h"

namespace {

using dscache::fuzz::CacheKind;

struct Base {
  std::string dir;
  dscache::Manifest manifest;
  std::vector<std::string> files;  // manifest.json first, then every file it names
  std::vector<std::vector<uint8_t>> bytes;
};

std::vector<Base>& bases() {
  static dscache::fuzz::TempDir root;
  static std::vector<Base> all = [] {
    std::vector<Base> v;
    const CacheKind kinds[] = {CacheKind::kFixed, CacheKind::kRagged, CacheKind::kJpegFixed,
                               CacheKind::kJpegRagged};
    for (CacheKind kind : kinds) {
      Base b;
      b.dir = root.file("kind" + std::to_string(v.size()));
      ::mkdir(b.dir.c_str(), 0755);
      try {
        b.manifest = dscache::fuzz::write_small_cache(b.dir, kind);
      } catch (const dscache::Error&) {
        continue;  // no JPEG support in this build
      }
      const dscache::Manifest& m = b.manifest;
      b.files.push_back("manifest.json");
      for (const dscache::ShardEntry& s : m.shards) b.files.push_back(s.file);
      for (const dscache::FileEntry* f : {&m.labels, &m.checksums, &m.sources, &m.skips, &m.index})
        if (!f->file.empty()) b.files.push_back(f->file);
      for (size_t k = 0; k < b.files.size(); ++k) {
        b.bytes.push_back(dscache::fuzz::read_bytes(b.dir + "/" + b.files[k]));
        std::vector<uint8_t> seed = {static_cast<uint8_t>(v.size()), static_cast<uint8_t>(k), 0};
        seed.insert(seed.end(), b.bytes.back().begin(), b.bytes.back().end());
        dscache::fuzz::write_seed("kind" + std::to_string(v.size()) + "-" + b.files[k], seed);
      }
      v.push_back(std::move(b));
    }
    return v;
  }();
  return all;
}

// Sets the manifest's recorded size of `file` to `bytes`.
void set_size(dscache::Manifest& m, const std::string& file, uint64_t bytes) {
  for (dscache::ShardEntry& s : m.shards)
    if (s.file == file) s.bytes = bytes;
  for (dscache::FileEntry* f : {&m.labels, &m.checksums, &m.sources, &m.skips, &m.index})
    if (f->file == file) f->bytes = bytes;
}

}  // namespace

// Writes the base caches before the first input (their fsyncs are not the input's time).
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  bases();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<Base>& all = bases();
  if (size < 3 || all.empty()) return 0;
  Base& b = all[data[0] % all.size()];
  const size_t k = data[1] % b.files.size();
  const std::string& file = b.files[k];
  const uint8_t* body = data + 3;
  const size_t n = size - 3;
  dscache::fuzz::write_bytes(b.dir + "/" + file, body, n);
  if (k != 0) {
    dscache::Manifest m = b.manifest;
    set_size(m, file, n);
    const std::string json = dscache::to_json(m);
    dscache::fuzz::write_bytes(b.dir + "/manifest.json", json.data(), json.size());
  }
  dscache::CacheOptions opt;
  const dscache::MemoryMode modes[] = {dscache::MemoryMode::kPageCache,
                                       dscache::MemoryMode::kInProcess, dscache::MemoryMode::kPread,
                                       dscache::MemoryMode::kAuto};
  opt.memory = modes[data[2] & 3];
  opt.verify_checksums = (data[2] & 4) != 0;
  try {
    std::shared_ptr<dscache::Cache> cache = dscache::Cache::open(b.dir, opt);
    dscache::fuzz::read_everything(*cache);
    std::vector<uint8_t> stored;
    for (uint64_t i = 0; i < cache->size(); ++i) {
      try {
        cache->stored_sample(i, &stored);
      } catch (const dscache::Error&) {
      }
    }
  } catch (const dscache::Error&) {
  }
  // Put the base cache back for the next input.
  dscache::fuzz::write_bytes(b.dir + "/" + file, b.bytes[k].data(), b.bytes[k].size());
  if (k != 0) {
    dscache::fuzz::write_bytes(b.dir + "/manifest.json", b.bytes[0].data(), b.bytes[0].size());
  }
  return 0;
}
