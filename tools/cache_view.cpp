#include "cache_view.h"

#include <algorithm>

#include "dscache/atomic_file.h"
#include "dscache/error.h"
#include "dscache/file.h"
#include "dscache/jpeg.h"

namespace dscache {

namespace {

// Shard functions open the shard by its /proc/self/fd name; errors should name the shard.
template <typename F>
void as_shard(const File& file, F f) {
  try {
    f(file.fd_path());
  } catch (const Error& e) {
    if (e.path() == file.path()) throw;
    throw Error(e.kind(), file.path(), e.reason());
  }
}

}  // namespace

CacheView::CacheView(const std::string& dir) : files_(CacheDir::open(dir)) {}

FileEntry CacheView::hash(const std::string& name) const {
  return hash_file(files_->open_file(name));
}

const ShardLocation& CacheView::shard(size_t k) {
  auto it = shards_.find(k);
  if (it == shards_.end()) it = shards_.emplace(k, files_->open_shard(k).loc).first;
  return it->second;
}

const File& CacheView::open_shard(size_t k) {
  shard(k);  // checked once
  if (open_k_ != k) {
    open_file_ = File();
    open_k_ = SIZE_MAX;
    const ShardEntry& e = manifest().shards[k];
    open_file_ = files_->open_file(e.file, e.bytes);
    open_k_ = k;
  }
  return open_file_;
}

const std::vector<IndexRow>& CacheView::index() {
  if (!have_index_) {
    std::vector<uint64_t> data;
    // Byte shards (the only ones with an index): the header's count is the data bytes.
    for (size_t k = 0; k < manifest().shards.size(); ++k) data.push_back(shard(k).count);
    index_ = files_->index(data);
    have_index_ = true;
  }
  return index_;
}

const ShardEntry& CacheView::shard_of(uint64_t i) const {
  const auto& shards = manifest().shards;
  auto it = std::upper_bound(shards.begin(), shards.end(), i,
                             [](uint64_t v, const ShardEntry& s) { return v < s.first; });
  return *(it - 1);
}

void CacheView::read_field(uint64_t i, size_t f, std::vector<uint8_t>* out, uint64_t* rows) {
  const Manifest& m = manifest();
  const ShardEntry& s = shard_of(i);
  const size_t k = static_cast<size_t>(&s - m.shards.data());
  // open_field reads the shard's whole offsets file: keep the last shard's fields open, as a
  // grid or a run of samples reads several samples of one shard.
  if (field_k_ != k) {
    field_files_.clear();
    field_files_.resize(m.fields.size());
    field_open_.assign(m.fields.size(), false);
    field_k_ = k;
  }
  if (!field_open_[f]) {
    field_files_[f] = files_->open_field(k, f, m.has_index() ? &index() : nullptr);
    field_open_[f] = true;
  }
  const FieldShardFile& file = field_files_[f];
  const FieldSpec& spec = m.fields[f];
  const uint64_t j = i - s.first;
  const uint64_t row = spec.row_bytes();  // a mask: one pixel's bytes
  uint64_t at = 0, n = 0;
  if (file.offsets.empty()) {
    n = file.data_bytes / std::max<uint64_t>(1, s.count);  // checked by open_field
    at = j * n;
    *rows = spec.kind == FieldKind::kMask ? n / row : 1;
  } else {
    at = static_cast<uint64_t>(file.offsets[j]) * row;
    *rows = static_cast<uint64_t>(file.offsets[j + 1] - file.offsets[j]);
    n = *rows * row;
  }
  out->resize(n);
  if (n > 0) file.values.read_at(file.data_offset + at, n, out->data());
}

void CacheView::read_samples(size_t k, uint64_t first, uint64_t n, uint8_t* out) {
  const Manifest& m = manifest();
  const ShardLocation& loc = shard(k);
  const SampleShape shape{m.height, m.width, m.channels};
  as_shard(open_shard(k), [&](const std::string& used) {
    read_shard_samples(m.storage, used, loc, shape, first, n, out);
  });
}

void CacheView::read_sample(uint64_t i, std::vector<uint8_t>* out, uint32_t* height,
                            uint32_t* width) {
  const Manifest& m = manifest();
  if (m.codec != Codec::kJpeg) {
    read_stored(i, out, height, width);
    return;
  }
  std::vector<uint8_t> stored;
  read_stored(i, &stored, height, width);
  JpegScratch scratch;
  try {
    // The stream's own header first: the index row's size is only a claim, and a lying row
    // (65500x65500 over a 64x79 stream) must not size the buffer below.
    const JpegInfo info = jpeg_info(stored.data(), stored.size());
    if (info.height != *height || info.width != *width) {
      throw Error(ErrorKind::kCorruption, "",
                  "jpeg: stream is " + std::to_string(info.height) + "x" +
                      std::to_string(info.width) + ", the index says " + std::to_string(*height) +
                      "x" + std::to_string(*width));
    }
    out->resize(size_t{*height} * *width * m.channels);
    jpeg_decode(stored.data(), stored.size(), *height, *width, m.channels, out->data(), &scratch);
  } catch (const Error& e) {
    throw Error(e.kind(), path(shard_of(i).file),
                "sample " + std::to_string(i) + ": " + e.reason());
  }
}

void CacheView::read_stored(uint64_t i, std::vector<uint8_t>* out, uint32_t* height,
                            uint32_t* width) {
  const Manifest& m = manifest();
  if (i >= m.count) {
    throw Error(
        ErrorKind::kInvalidArgument, dir(),
        "sample " + std::to_string(i) + " out of range (count " + std::to_string(m.count) + ")");
  }
  const ShardEntry& e = shard_of(i);
  const size_t k = static_cast<size_t>(&e - m.shards.data());
  if (!m.has_index()) {
    *height = m.height;
    *width = m.width;
    out->resize(static_cast<size_t>(m.sample_bytes()));
    read_samples(k, i - e.first, 1, out->data());
    return;
  }
  const IndexRow& row = index()[static_cast<size_t>(i)];  // checked against the shard
  *height = row.height;
  *width = row.width;
  out->resize(static_cast<size_t>(row.length));
  const ShardLocation& loc = shard(k);
  as_shard(open_shard(k), [&](const std::string& used) {
    read_shard_bytes(m.storage, used, loc, row.offset, row.length, out->data());
  });
}

}  // namespace dscache
