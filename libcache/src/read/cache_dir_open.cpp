// CacheDir::check_open: docs/FORMAT.md's open-time checks in one function, which Cache::open,
// `dscache verify`, every `dscache inspect` mode and Python's dscache.Cache all call.
#include <string>
#include <utility>
#include <vector>

#include "dscache/atomic_file.h"
#include "dscache/cache_dir.h"
#include "dscache/checksum.h"
#include "dscache/error.h"
#include "dscache/npy.h"

namespace dscache {

namespace {

std::string shape_text(const std::vector<uint64_t>& s) {
  std::string t = "(";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + (s.size() == 1 ? ",)" : ")");
}

// A rows_of field's rows follow its boxes: shard k's offsets must be the same, sample by sample.
void check_rows_of(const CacheDir& dir, size_t k, const std::vector<FieldShardFile>& files) {
  const Manifest& m = dir.manifest();
  for (size_t f = 0; f < m.fields.size(); ++f) {
    const FieldSpec& spec = m.fields[f];
    if (spec.rows_of.empty()) continue;
    for (size_t b = 0; b < m.fields.size(); ++b) {
      if (m.fields[b].name != spec.rows_of) continue;
      const std::vector<int64_t>& rows = files[f].offsets;
      const std::vector<int64_t>& boxes = files[b].offsets;
      for (size_t j = 0; j + 1 < rows.size() && j + 1 < boxes.size(); ++j) {
        const int64_t got = rows[j + 1] - rows[j], want = boxes[j + 1] - boxes[j];
        if (got == want) continue;
        throw Error(ErrorKind::kCorruption, dir.path(m.shards[k].fields[f].offsets.file),
                    "sample " + std::to_string(m.shards[k].first + j) + ": field '" + spec.name +
                        "' has " + std::to_string(got) + " rows, its boxes '" + spec.rows_of +
                        "' " + std::to_string(want) + " (" + m.shards[k].fields[b].offsets.file +
                        "; one row per box)");
      }
    }
  }
}

}  // namespace

std::vector<uint64_t> CacheDir::checksums_shape() const {
  const Manifest& m = manifest();
  if (m.fields.empty()) return {m.count};
  return {m.count, m.checksum_columns()};
}

void CacheDir::check_checksums_header() const {
  const Manifest& m = manifest();
  const File f = open_file(m.checksums.file, m.checksums.bytes);
  const NpyHeader h = read_npy_header(f);
  if (h.descr != "<u8") {
    throw Error(ErrorKind::kCorruption, f.path(), "dtype is '" + h.descr + "', expected '<u8'");
  }
  if (h.fortran_order) throw Error(ErrorKind::kCorruption, f.path(), "array is in Fortran order");
  const std::vector<uint64_t> want = checksums_shape();
  if (h.shape != want) {
    throw Error(ErrorKind::kCorruption, f.path(),
                "shape is " + shape_text(h.shape) + ", expected " + shape_text(want) +
                    (m.fields.empty() ? "" : " (the image and each field a column)"));
  }
  check_npy_size(h, f.size(), f.path());
}

CheckedCache CacheDir::check_open(bool hash_files, const FieldFilesSink& sink) const {
  const Manifest& m = manifest();
  CheckedCache out;
  // A streamed copy has no shards yet (named_files() lists them first): the steps on them are
  // the acquiring reader's.
  const bool streamed = this->streamed();
  std::vector<FileEntry> named = named_files();
  if (streamed) named.erase(named.begin(), named.begin() + static_cast<long>(m.shards.size()));
  // 2. Every named file: inside the directory, regular, exactly the manifest's size; nothing
  //    is mapped before all of them pass, so a short file is an error, never a SIGBUS later.
  for (const FileEntry& e : named) open_file(e.file, e.bytes);
  // 3. Their XXH64, when asked.
  if (hash_files) {
    for (const FileEntry& e : named) {
      const File file = open_file(e.file, e.bytes);
      const FileEntry got = hash_file(file);
      if (got.xxh64 != e.xxh64) {
        throw Error(ErrorKind::kCorruption, file.path(),
                    "XXH64 is " + hex64(got.xxh64) + ", manifest says " + hex64(e.xxh64));
      }
    }
  }
  // 4. Each shard's own header (one descriptor at a time, however many shards); streamed: the
  //    data bytes the manifest implies (fixed), or unknown until the index says (byte shards).
  const uint64_t sample_bytes = uint64_t{m.height} * m.width * m.channels;
  for (size_t k = 0; k < m.shards.size(); ++k) {
    if (streamed) {
      out.shard_data_bytes.push_back(m.has_index() ? kUnknownDataBytes
                                                   : m.shards[k].count * sample_bytes);
      continue;
    }
    const ShardFile s = open_shard(k);
    out.shards.push_back(s.loc);
    out.shard_data_bytes.push_back(s.data_bytes);
  }
  // 5. Labels, checksums (header and size), the index.
  out.labels = labels();
  check_checksums_header();
  if (m.has_index()) {
    out.index = index(out.shard_data_bytes);
    for (size_t k = 0; k < m.shards.size() && streamed; ++k) {  // where its rows end
      const ShardEntry& s = m.shards[k];
      const IndexRow* last = s.count == 0 ? nullptr : &out.index[s.first + s.count - 1];
      out.shard_data_bytes[k] = last == nullptr ? 0 : last->offset + last->length;
    }
  }
  // Fields: each file's size, header and offsets; ragged masks against the index; rows_of.
  std::vector<FieldShardFile> files;
  for (size_t k = 0; k < m.shards.size() && !m.fields.empty(); ++k) {
    files.clear();
    for (size_t f = 0; f < m.fields.size(); ++f) {
      files.push_back(open_field(k, f, out.index.empty() ? nullptr : &out.index));
    }
    check_rows_of(*this, k, files);
    if (sink) sink(k, &files);
  }
  return out;
}

// Declared in manifest.h; defined here since it opens the directory as every reader does
// (format/ sits below read/ and names no CacheDir).
Manifest read_manifest(const std::string& dir) {
  // The same checks as every other reader: a regular file inside DIR, size bounded.
  return CacheDir::open(dir)->manifest();
}

}  // namespace dscache
