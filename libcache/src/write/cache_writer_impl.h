// CacheWriter's state (internal): the Impl behind dscache/cache_writer.h, shared by
// cache_writer.cpp (the public calls and their checks) and cache_writer_shards.cpp (shards,
// sidecars, resume, side files).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "dscache/atomic_file.h"
#include "dscache/cache_writer.h"
#include "dscache/crash_point.h"
#include "dscache/lock.h"
#include "dscache/shard.h"
#include "format/field_files.h"
#include "write/partial_dir.h"

namespace dscache {

// The sidecar of committed shard `shard` in the partial directory: ".shard-00003.json".
inline std::string sidecar_name(uint64_t shard) {
  char buf[48];
  std::snprintf(buf, sizeof buf, ".shard-%05llu.json", static_cast<unsigned long long>(shard));
  return buf;
}

// Raw ragged and every JPEG cache write byte shards; raw fixed ones hold whole samples.
inline bool byte_shards(const CacheWriterOptions& o) {
  return o.layout == Layout::kRagged || o.codec == Codec::kJpeg;
}

// A partial directory whose manifest was written before a crash: removes what is left of the
// write's state but the fingerprint (sidecars, temp files) and returns the manifest.
Manifest finish_partial(const std::string& partial);

// Copies file `from` (open, `e.bytes` long) to `dst` through a temp file renamed into place,
// checking its size and XXH64 against `e`; a write error keeps its errno (ENOSPC, EDQUOT, EFBIG)
// and names the file.
void copy_file_checked(const File& from, const std::string& src, const std::string& dst,
                       const FileEntry& e);

struct CacheWriter::Impl {
  std::string output, partial;
  CacheWriterOptions opt;
  std::unique_ptr<PathLock> lock;
  OutputPlan plan;
  bool begun = false;
  bool complete = false;  // OUTPUT is already this write
  bool finished = false;  // manifest.json written
  bool published = false;
  Manifest manifest;  // once finished (or complete)

  uint64_t per_shard = 0;  // fixed layout: samples per shard
  std::unique_ptr<ShardWriter> fixed;
  std::unique_ptr<RaggedShardWriter> bytes;
  // The open shard's field files, one per opt.fields entry (empty until the shard opens).
  std::vector<std::unique_ptr<detail::FieldShardWriter>> field_writers;
  bool shard_open = false;  // cut_shard() opened none: an empty shard is still written
  uint64_t shard_index = 0;
  uint64_t next_first = 0;
  uint64_t position = 0;
  uint64_t resumed = 0;
  size_t shard_sample_begin = 0;
  size_t shard_skip_begin = 0;
  uint64_t transparent = 0;              // note_transparent()'s count, of recorded samples
  uint64_t pending_transparent = 0;      // noted, counted with the next sample or shard recorded
  uint64_t shard_transparent_begin = 0;  // the count at the last committed shard
  bool transparent_lost = false;         // a kept shard's sidecar has no count (an older writer's)
  std::vector<ShardEntry> shards;
  std::vector<int64_t> labels;
  std::vector<uint64_t> checksums;  // checksum_columns() per sample
  // The open shard's sources (since the last committed shard); those of committed shards are in
  // sources_file, not in memory: a source is a path, tens of bytes per sample.
  std::vector<std::string> sources;
  // sources.jsonl of the committed shards, appended as each commits (its temp file in the
  // partial directory; a resume writes the kept shards' lines again), renamed into place by
  // write_side_files(). Null until the first line.
  std::unique_ptr<AtomicFile> sources_file;
  std::vector<SkipRecord> skips;
  std::vector<int64_t> index;    // byte shards: (offset, [length,] height, width) per sample
  std::vector<uint8_t> encoded;  // append() with codec kJpeg: the stream

  uint64_t index_columns() const { return opt.codec == Codec::kJpeg ? 4 : 3; }
  uint64_t checksum_columns() const { return 1 + opt.fields.size(); }
  std::string path(const std::string& name) const { return partial + "/" + name; }

  void check_writable(const char* what) const {
    if (!begun)
      throw Error(ErrorKind::kInvalidArgument, output, std::string(what) + " before begin()");
    if (complete || finished) {
      throw Error(ErrorKind::kInvalidArgument, output,
                  std::string(what) + " after the cache was finished");
    }
  }

  // A sample's size: the recipe's in the fixed layout; each side 1..65500 (libjpeg's limit, and
  // what CacheDir accepts in an index row) in either layout.
  void check_shape(uint32_t height, uint32_t width, const std::string& source) const {
    const std::string size = std::to_string(height) + "x" + std::to_string(width);
    if (opt.layout == Layout::kFixed &&
        (height != opt.recipe.height || width != opt.recipe.width)) {
      throw Error(ErrorKind::kInvalidArgument, source.empty() ? output : source,
                  "sample is " + size + ", the cache's samples are " +
                      std::to_string(opt.recipe.height) + "x" + std::to_string(opt.recipe.width));
    }
    if (height == 0 || width == 0 || height > 65500 || width > 65500) {
      throw Error(ErrorKind::kInvalidArgument, source.empty() ? output : source,
                  "sample is " + size + ": each side must be 1..65500");
    }
  }

  void check_label(int64_t label, const std::string& source) const {
    if (opt.classes.empty()) return;  // an unlabeled cache takes any label
    if (label < 0 || static_cast<uint64_t>(label) >= opt.classes.size()) {
      throw Error(ErrorKind::kInvalidArgument, source.empty() ? output : source,
                  "label " + std::to_string(label) + " is not a class index (0.." +
                      std::to_string(opt.classes.size() - 1) + ")");
    }
  }

  void record(int64_t label, uint64_t checksum, const std::string& source) {
    labels.push_back(label);
    checksums.push_back(checksum);
    checksums.insert(checksums.end(), field_sums.begin(), field_sums.end());
    sources.push_back(source);
    transparent += pending_transparent;  // before any commit of the shard this sample is in
    pending_transparent = 0;
    ++position;
    crash_point("sample");
  }

  // One sample's field values, checked (check_fields) before anything of the sample is written.
  std::vector<uint64_t> field_rows;  // rows of each value
  std::vector<uint64_t> field_sums;  // XXH64 of each value
  void check_fields(const FieldData* fields, uint32_t height, uint32_t width,
                    const std::string& source);
  // Opens the field files of shard shard_index (when the cache has fields and they are not open).
  void open_field_writers();
  // Appends the values check_fields() passed to the open shard's field files.
  void write_fields(const FieldData* fields);

  // Appends `lines` (one source each) to sources_file.
  void write_sources(const std::vector<std::string>& lines);
  void adopt_finished();
  void commit_shard();
  // The shard now at shard_file_name(shard_index), holding the samples recorded since the
  // previous one: its sidecar, then the bookkeeping.
  void record_shard(ShardEntry e);
  void append_bytes(const uint8_t* data, uint64_t n, uint32_t height, uint32_t width, int64_t label,
                    const std::string& source, uint64_t checksum, const FieldData* fields);
  Manifest write_side_files();
};

}  // namespace dscache
