// npy shards: (n, H, W, C) uint8 in C order (fixed) or (bytes,) uint8 (ragged), header sized for
// the capacity and rewritten at commit.
#include <cstdint>
#include <string>
#include <vector>

#include "dscache/atomic_file.h"
#include "dscache/error.h"
#include "dscache/npy.h"
#include "format/shard_impl.h"

namespace dscache {
namespace detail {
namespace {

std::vector<uint64_t> npy_shape(uint64_t n, SampleShape s) {
  return {n, s.height, s.width, s.channels};
}

// Puts the final header in place (same length as the one written at create), commits the file
// and describes the shard. A full shard's header is already right: leaving it alone keeps the
// streamed checksum valid, so commit does not re-read the whole file to hash it.
ShardEntry commit_npy_shard(AtomicFile& file, const std::string& initial_header,
                            const std::string& header, uint64_t count) {
  if (header.size() != initial_header.size()) {
    throw Error(ErrorKind::kInvalidArgument, file.temp_path(), "npy header grew at commit");
  }
  if (header != initial_header) file.pwrite(header.data(), header.size(), 0);
  return shard_entry(file.commit(), count);
}

class NpyShardWriter : public ShardWriter {
 public:
  NpyShardWriter(const std::string& path, SampleShape shape, uint64_t capacity)
      : file_(path),
        shape_(shape),
        capacity_(capacity),
        header_size_(format_npy_header("|u1", npy_shape(capacity, shape)).size()) {
    const std::string header = format_npy_header("|u1", npy_shape(capacity, shape));
    initial_header_ = header;
    file_.write(header.data(), header.size());
  }

  void append(const uint8_t* sample, int64_t /*label*/) override {
    if (committed_)
      throw Error(ErrorKind::kInvalidArgument, file_.temp_path(), "append after commit");
    if (count_ >= capacity_) {
      throw Error(ErrorKind::kInvalidArgument, file_.temp_path(),
                  "shard is full (capacity " + std::to_string(capacity_) + " samples)");
    }
    file_.write(sample, shape_.bytes());
    ++count_;
  }

  uint64_t count() const override { return count_; }

  ShardEntry commit() override {
    if (committed_)
      throw Error(ErrorKind::kInvalidArgument, file_.temp_path(), "commit called twice");
    // A smaller count never needs a longer dict, so padding to the capacity's size always fits.
    ShardEntry e =
        commit_npy_shard(file_, initial_header_,
                         format_npy_header("|u1", npy_shape(count_, shape_), header_size_), count_);
    committed_ = true;
    return e;
  }

 private:
  AtomicFile file_;
  SampleShape shape_;
  uint64_t capacity_;
  size_t header_size_;
  uint64_t count_ = 0;
  bool committed_ = false;
  std::string initial_header_;  // as written at create; rewritten at commit only if different
};

// Ragged: a 1-d (bytes,) |u1 array of the samples back to back; labels live in labels.npy.
class NpyRaggedWriter : public RaggedShardWriter {
 public:
  NpyRaggedWriter(const std::string& path, uint32_t channels, uint64_t capacity_bytes)
      : file_(path),
        channels_(channels),
        capacity_bytes_(capacity_bytes),
        header_size_(format_npy_header("|u1", {capacity_bytes}).size()) {
    const std::string header = format_npy_header("|u1", {capacity_bytes});
    initial_header_ = header;
    file_.write(header.data(), header.size());
  }

  uint64_t append(const uint8_t* sample, uint32_t height, uint32_t width,
                  int64_t /*label*/) override {
    if (committed_)
      throw Error(ErrorKind::kInvalidArgument, file_.temp_path(), "append after commit");
    const uint64_t n =
        ragged_sample_bytes(file_.temp_path(), height, width, channels_, bytes_, capacity_bytes_);
    return append_bytes(sample, n, 0);
  }

  uint64_t append_bytes(const uint8_t* data, uint64_t n, int64_t /*label*/) override {
    if (committed_)
      throw Error(ErrorKind::kInvalidArgument, file_.temp_path(), "append after commit");
    check_ragged_room(file_.temp_path(), n, bytes_, capacity_bytes_);
    file_.write(data, n);
    const uint64_t offset = bytes_;
    bytes_ += n;
    ++count_;
    return offset;
  }

  uint64_t count() const override { return count_; }
  uint64_t bytes() const override { return bytes_; }

  ShardEntry commit() override {
    if (committed_)
      throw Error(ErrorKind::kInvalidArgument, file_.temp_path(), "commit called twice");
    ShardEntry e = commit_npy_shard(file_, initial_header_,
                                    format_npy_header("|u1", {bytes_}, header_size_), count_);
    committed_ = true;
    return e;
  }

 private:
  AtomicFile file_;
  uint32_t channels_;
  uint64_t capacity_bytes_;
  size_t header_size_;
  uint64_t count_ = 0;
  uint64_t bytes_ = 0;
  bool committed_ = false;
  std::string initial_header_;  // as written at create; rewritten at commit only if different
};

std::string dims_text(const std::vector<uint64_t>& s) {
  std::string t = "(";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + (s.size() == 1 ? ",)" : ")");
}

NpyHeader read_u8_header(const std::string& path) {
  const NpyHeader h = read_npy_header(path);
  if (h.descr != "|u1" && h.descr != "<u1") {
    throw Error(ErrorKind::kCorruption, path, "dtype is '" + h.descr + "', expected '|u1'");
  }
  if (h.fortran_order) throw Error(ErrorKind::kCorruption, path, "array is in Fortran order");
  return h;
}

// Where an npy shard's `data` bytes lie: right after the header `h`, ending the file of `size`
// bytes (Corruption otherwise); `unit` names what the header's first dimension counts.
ShardLocation contiguous_location(const std::string& path, uint64_t size, const NpyHeader& h,
                                  uint64_t data, const char* unit) {
  if (data > UINT64_MAX - h.data_offset) {
    throw Error(ErrorKind::kCorruption, path, "array size overflows 64 bits");
  }
  const uint64_t expected = h.data_offset + data;
  if (expected != size) {
    throw Error(ErrorKind::kCorruption, path,
                "file holds " + std::to_string(size) + " bytes, header says " +
                    std::to_string(expected) + " (" + std::to_string(h.shape[0]) + " " + unit +
                    ")");
  }
  ShardLocation loc;
  loc.count = h.shape[0];
  loc.data_offset = h.data_offset;
  loc.file_bytes = size;
  loc.contiguous = true;
  return loc;
}

}  // namespace

std::unique_ptr<RaggedShardWriter> create_npy_ragged_writer(const std::string& path,
                                                            uint32_t channels,
                                                            uint64_t capacity_bytes) {
  return std::make_unique<NpyRaggedWriter>(path, channels, capacity_bytes);
}

ShardLocation locate_npy_ragged_shard(const std::string& path) {
  const uint64_t size = file_size(path);  // NotFound first, before any parsing
  const NpyHeader h = read_u8_header(path);
  if (h.shape.size() != 1) {
    throw Error(ErrorKind::kCorruption, path,
                "shape is " + dims_text(h.shape) + ", expected (bytes,) for a ragged shard");
  }
  return contiguous_location(path, size, h, h.shape[0], "image bytes");
}

std::unique_ptr<ShardWriter> create_npy_writer(const std::string& path, SampleShape shape,
                                               uint64_t capacity) {
  return std::make_unique<NpyShardWriter>(path, shape, capacity);
}

ShardLocation locate_npy_shard(const std::string& path, SampleShape shape) {
  const uint64_t size = file_size(path);  // NotFound first, before any parsing
  const NpyHeader h = read_u8_header(path);
  const auto dims = dims_text;
  if (h.shape.size() != 4 || h.shape[1] != shape.height || h.shape[2] != shape.width ||
      h.shape[3] != shape.channels) {
    throw Error(ErrorKind::kCorruption, path,
                "shape is " + dims(h.shape) + ", expected (n, " + std::to_string(shape.height) +
                    ", " + std::to_string(shape.width) + ", " + std::to_string(shape.channels) +
                    ")");
  }
  return contiguous_location(path, size, h, checked_mul(h.shape[0], shape.bytes(), path),
                             "samples");
}

}  // namespace detail
}  // namespace dscache
