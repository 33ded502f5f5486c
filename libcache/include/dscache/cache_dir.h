// CacheDir: the one validated reader of a cache directory's files, shared by Cache::open and the
// tools (`dscache verify`, `inspect`, `bench`), so that all of them accept and refuse the same
// caches.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dscache/file.h"
#include "dscache/manifest.h"
#include "dscache/shard.h"

namespace dscache {

namespace remote {
class HeldMirror;
}

// One line of skipped.jsonl.
struct SkipRecord {
  std::string source;  // the source entry as recorded
  std::string reason;  // why it was skipped
};

// One validated index row (raw ragged: ragged-index.npy; JPEG: jpeg-index.npy).
struct IndexRow {
  uint64_t offset = 0;  // byte offset inside its shard's data
  uint64_t length = 0;  // stored bytes (raw: height * width * C, checked; JPEG: the stream)
  uint32_t height = 0;  // decoded rows, > 0
  uint32_t width = 0;   // decoded columns, > 0
};

// An open shard whose header agrees with the manifest.
struct ShardFile {
  File file;                // the shard, opened inside the cache directory
  ShardLocation loc;        // from the shard's own header
  uint64_t data_bytes = 0;  // its sample bytes (fixed: count * sample bytes; byte shards: count)
};

// One field's files for one shard, opened and checked (docs/FORMAT.md "Fields").
struct FieldShardFile {
  File values;                   // <name>-NNNNN.npy, opened inside the cache directory
  uint64_t data_offset = 0;      // file offset of its first value byte
  uint64_t data_bytes = 0;       // value bytes (to the end of the file)
  uint64_t rows = 0;             // fixed kinds: the shard's samples; variable: the rows it holds
  std::vector<int64_t> offsets;  // kinds with offsets: count + 1 row offsets; empty otherwise
};

// What CacheDir::check_open() read and checked, for a reader to serve from.
struct CheckedCache {
  std::vector<ShardLocation> shards;       // each shard's own header, agreeing with the manifest
                                           // (empty for a streamed copy)
  std::vector<uint64_t> shard_data_bytes;  // each shard's sample bytes (ShardFile::data_bytes)
  std::vector<int64_t> labels;             // labels.npy, every label in range
  std::vector<IndexRow> index;             // raw ragged and JPEG caches: every row; else empty
};

// CacheDir::index's data size of a shard that is not at hand.
constexpr uint64_t kUnknownDataBytes = ~uint64_t{0};

// Receives shard k's field files (manifest field order), checked, before the next shard's are
// opened (a cache of thousands of shards must not hold all their descriptors at once).
using FieldFilesSink = std::function<void(size_t k, std::vector<FieldShardFile>* files)>;

// Opens the cache directory once (O_DIRECTORY) and reads every file relative to that
// descriptor (openat), for as long as the CacheDir lives: when the directory is swapped for a
// new build (rename), everything read through one CacheDir still comes from the same
// generation. Each file must be a regular file inside the directory: a symlink is followed only
// when it leads to a file inside it; a FIFO, device or symlink out is Error(kCorruption) naming
// it. Sizes are checked against the file before anything is allocated.
//
// Every accessor throws Error naming the file (and row or line) in dscache's words. Const
// methods are thread-safe (except for HDF5 shards, which the shard functions serialize).
class CacheDir {
 public:
  // NotFound when DIR or DIR/manifest.json is missing; Corruption for a bad manifest. DIR may
  // be remote (s3://, http(s)://): its verified local copy is opened (remote/mirror.h), whole,
  // or — with `allow_streaming` and a cache larger than the local cache's budget — without its
  // shards, which the reader then takes one by one (remote_copy()->acquire_shard; Cache::open).
  static std::shared_ptr<const CacheDir> open(const std::string& dir, bool allow_streaming = false);
  ~CacheDir();

  const Manifest& manifest() const;
  const std::string& dir() const;        // as given
  const std::string& real_path() const;  // resolved when it was opened
  int fd() const;                        // the directory descriptor (owned)
  // A remote cache's local copy (null for a local directory).
  const std::shared_ptr<remote::HeldMirror>& remote_copy() const;
  // True when the copy holds no shards until they are acquired (see open()).
  bool streamed() const;
  std::string path(const std::string& name) const;  // DIR/name, for messages

  // NAME inside the directory (see the class comment).
  File open_file(const std::string& name) const;
  // The same, and its size must be `expected_bytes`: "file holds 1000 bytes, manifest says 1024".
  File open_file(const std::string& name, uint64_t expected_bytes) const;

  // Every file the manifest names (shards, labels, checksums, sources, skips, index, then each
  // shard's field files), with its expected size and XXH64, in that order.
  std::vector<FileEntry> named_files() const;
  // Each of named_files() as open_file(name, bytes) checks it, one open at a time (a cache of
  // thousands of shards must not need thousands of descriptors). The first bad one throws.
  void check_files() const;

  // labels.npy: <i8, C order, (count,), exact size; each label in [0, classes) when the
  // manifest names classes (an unlabeled cache, classes [], takes any label).
  std::vector<int64_t> labels() const;
  // checksums.npy: <u8, C order, exact size, (count,) -- or (count, 1 + fields) for a cache with
  // fields (Manifest::checksum_columns()); returned row-major.
  std::vector<uint64_t> checksums() const;
  // sources.jsonl: exactly count lines, each a JSON string.
  std::vector<std::string> sources() const;
  // The same checks and errors, streamed: each(i, source) for sample i = 0, 1, ... in order,
  // holding one read buffer, not the file (a reader that needs each source once, or only checks
  // them, stays O(1) in the count). The line count is checked before the first call.
  void for_each_source(const std::function<void(uint64_t i, std::string&& source)>& each) const;
  // skipped.jsonl: exactly `skipped` lines, each {"source": string, "reason": string}.
  std::vector<SkipRecord> skips() const;
  // The same checks and errors, streamed as for_each_source() streams sources.jsonl.
  void for_each_skip(const std::function<void(SkipRecord&& skip)>& each) const;
  // Shard k (manifest order): size as the manifest says, header agreeing with it (dtype, shape,
  // count, data inside the file, sizes without overflow).
  ShardFile open_shard(size_t k) const;
  // The index (manifests with has_index()), every row checked against its shard whose data
  // holds `shard_data_bytes[k]` bytes: inside it, sides in (0, 2^32), h*w*C without overflow,
  // rows of a shard back to back covering its data exactly. kUnknownDataBytes for a shard not
  // at hand (streamed): its rows must still be back to back from 0, and where they end is what
  // its data must hold when it arrives.
  std::vector<IndexRow> index(const std::vector<uint64_t>& shard_data_bytes) const;
  // The same, opening every shard to learn its data bytes.
  std::vector<IndexRow> index() const;
  // Field f (manifest field order) of shard k: the values file of its manifest size, its npy
  // header (the field's dtype, C order, the shape FORMAT.md gives), and for the kinds with
  // offsets the offsets file: <i8 (count + 1,), offsets[0] = 0, non-decreasing, the last = the
  // values' rows. With `index` (raw ragged and JPEG caches: index()), a ragged mask's rows per
  // sample must equal its image's h * w. Corruption naming the file (and sample) otherwise.
  FieldShardFile open_field(size_t k, size_t f, const std::vector<IndexRow>* index = nullptr) const;

  // Every open-time check of docs/FORMAT.md "Opening a cache", in its order: each named file
  // regular, inside and of its manifest size (check_files); with `hash_files`, its XXH64; each
  // shard's header (open_shard); labels (labels()); checksums.npy's header and size
  // (check_checksums_header); the index; each field file (open_field) and a rows_of field's row
  // counts equal to its boxes'. The one validation that Cache::open, `dscache verify`, every
  // `dscache inspect` mode and Python's dscache.Cache go through, so that they accept and refuse
  // the same caches. Throws the first failure (Corruption naming the file, the sample where
  // there is one). `sink`, when given, receives each shard's field files. On a streamed copy
  // (streamed()) the shards are not there: every step but those on shard files runs, `shards`
  // is empty, and shard_data_bytes holds what each shard's data must measure (from the manifest
  // and the index), which the reader that acquires a shard checks with open_shard().
  CheckedCache check_open(bool hash_files = false, const FieldFilesSink& sink = nullptr) const;
  // checksums.npy's npy shape: (count,), or (count, 1 + fields) for a cache with fields.
  std::vector<uint64_t> checksums_shape() const;
  // checksums.npy's header: <u8, C order, checksums_shape(), the file exactly the header's size.
  // Reads no data (a reader that serves samples does not need the checksums).
  void check_checksums_header() const;

  struct Impl;

 private:
  explicit CacheDir(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dscache
