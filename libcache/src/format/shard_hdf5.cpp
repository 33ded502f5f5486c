// HDF5 shards: `images` (n, H, W, C) uint8 contiguous with early allocation, so its bytes sit at
// one file offset a reader can mmap; `labels` (n,) int64; `channel_order` attribute on images.
#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "dscache/atomic_file.h"
#include "dscache/error.h"
#include "format/shard_impl.h"
#include "util/io_util.h"

namespace dscache {
namespace detail {
namespace {

constexpr size_t kCopyBlock = size_t{8} << 20;  // 8 MiB: raw samples → .h5 copy

// The HDF5 error stack is per thread in thread-safe builds; silence it wherever we call in, so
// failures surface only as dscache::Error.
void quiet_hdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

// Owns one HDF5 identifier and closes it with the matching H5?close.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      closer_ = o.closer_;
      o.id_ = -1;
    }
    return *this;
  }
  ~Handle() { reset(); }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }
  void reset() {
    if (id_ >= 0 && closer_ != nullptr) closer_(id_);
    id_ = -1;
  }
  // Closes now and reports failure (H5Fclose flushes; its failure matters).
  herr_t close() {
    herr_t rc = 0;
    if (id_ >= 0 && closer_ != nullptr) rc = closer_(id_);
    id_ = -1;
    return rc;
  }

 private:
  hid_t id_ = -1;
  Closer closer_ = nullptr;
};

[[noreturn]] void fail(ErrorKind kind, const std::string& path, const std::string& what) {
  throw Error(kind, path, what);
}

// HDF5 reports no errno, but its POSIX driver's failed write leaves it set: name a lack of room
// (disk full, quota, file size limit) as throw_errno would, so callers can tell it apart.
[[noreturn]] void fail_hdf5(const std::string& path, const char* what) {
  const int err = errno;
  std::string reason = std::string("HDF5: ") + what + " failed";
  if (err == ENOSPC || err == EDQUOT || err == EFBIG)
    reason += std::string(": ") + std::strerror(err);
  fail(ErrorKind::kIOError, path, reason);
}

hid_t check(hid_t id, const std::string& path, const char* what) {
  if (id < 0) fail_hdf5(path, what);
  return id;
}

void check(herr_t rc, const std::string& path, const char* what, int /*tag*/) {
  if (rc < 0) fail_hdf5(path, what);
}

size_t pread_some(int fd, unsigned char* p, size_t size, uint64_t offset, const std::string& path) {
  for (;;) {
    const ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n >= 0) return static_cast<size_t>(n);
    if (errno != EINTR) throw_errno(path, "read");
  }
}

void fsync_parent(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string dir =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_errno(dir, "open directory");
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL && err != EROFS) {
    errno = err;
    throw_errno(dir, "fsync directory");
  }
}

// The shared half of both HDF5 writers: streams image bytes to a raw temp file (so memory stays
// flat), then at commit creates the .h5 with `images` of the given dims, contiguous and allocated
// early, copies the raw bytes into the space HDF5 reserved, and renames into place.
class Hdf5Builder {
 public:
  Hdf5Builder(const std::string& path, uint32_t channels)
      : path_(path),
        h5_temp_(path + ".tmp-" + std::to_string(::getpid())),
        raw_(std::make_unique<AtomicFile>(path + ".raw")),
        channels_(channels) {}

  ~Hdf5Builder() {
    if (!committed_) ::unlink(h5_temp_.c_str());
    // raw_'s destructor removes the raw samples' temp file.
  }

  const std::string& path() const { return path_; }
  bool committed() const { return committed_; }
  uint64_t count() const { return labels_.size(); }
  uint64_t bytes() const { return raw_ ? raw_->size() : bytes_at_commit_; }

  void append(const uint8_t* sample, uint64_t bytes, int64_t label) {
    raw_->write(sample, bytes);
    labels_.push_back(label);
  }

  // `image_dims`: the dims of `images`; their product must equal bytes().
  ShardEntry commit(const std::vector<hsize_t>& image_dims) {
    if (committed_) fail(ErrorKind::kInvalidArgument, path_, "commit called twice");
    const uint64_t n = labels_.size();
    const uint64_t data_bytes = raw_->size();
    haddr_t offset = HADDR_UNDEF;
    std::unique_lock<std::mutex> lock(hdf5_mutex());
    quiet_hdf5();
    {
      Handle file(check(H5Fcreate(h5_temp_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                        h5_temp_, "create file"),
                  H5Fclose);
      {
        Handle space(
            check(H5Screate_simple(static_cast<int>(image_dims.size()), image_dims.data(), nullptr),
                  h5_temp_, "create dataspace"),
            H5Sclose);
        Handle dcpl(check(H5Pcreate(H5P_DATASET_CREATE), h5_temp_, "create property list"),
                    H5Pclose);
        check(H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS), h5_temp_, "set layout", 0);
        check(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY), h5_temp_, "set alloc time", 0);
        check(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), h5_temp_, "set fill time", 0);
        // No modification times in object headers: a rebuild must be byte-identical.
        check(H5Pset_obj_track_times(dcpl.get(), false), h5_temp_, "set track times", 0);
        Handle images(check(H5Dcreate2(file.get(), "images", H5T_STD_U8LE, space.get(), H5P_DEFAULT,
                                       dcpl.get(), H5P_DEFAULT),
                            h5_temp_, "create dataset images"),
                      H5Dclose);
        write_channel_order(images.get());
        check(H5Fflush(file.get(), H5F_SCOPE_LOCAL), h5_temp_, "flush", 0);
        offset = H5Dget_offset(images.get());
        if (data_bytes > 0 && offset == HADDR_UNDEF) {
          fail(ErrorKind::kIOError, h5_temp_, "HDF5 did not allocate the images dataset");
        }
      }
      {
        const hsize_t dims[1] = {n};
        Handle space(check(H5Screate_simple(1, dims, nullptr), h5_temp_, "create dataspace"),
                     H5Sclose);
        Handle dcpl(check(H5Pcreate(H5P_DATASET_CREATE), h5_temp_, "create property list"),
                    H5Pclose);
        check(H5Pset_obj_track_times(dcpl.get(), false), h5_temp_, "set track times", 0);
        Handle labels(check(H5Dcreate2(file.get(), "labels", H5T_STD_I64LE, space.get(),
                                       H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                            h5_temp_, "create dataset labels"),
                      H5Dclose);
        if (n > 0) {
          check(H5Dwrite(labels.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                         labels_.data()),
                h5_temp_, "write labels", 0);
        }
      }
      if (file.close() < 0) fail(ErrorKind::kIOError, h5_temp_, "HDF5: close file failed");
    }
    lock.unlock();

    // Copy the streamed samples into the space HDF5 reserved for them.
    const int out = ::open(h5_temp_.c_str(), O_RDWR | O_CLOEXEC);
    if (out < 0) throw_errno(h5_temp_, "open");
    try {
      if (data_bytes > 0) copy_raw(out, offset, data_bytes);
      struct stat st;
      if (::fstat(out, &st) != 0) throw_errno(h5_temp_, "stat");
      if (data_bytes > 0 && static_cast<uint64_t>(st.st_size) < offset + data_bytes) {
        fail(ErrorKind::kIOError, h5_temp_, "images data ends past the end of the file");
      }
      if (::fsync(out) != 0) throw_errno(h5_temp_, "fsync");
    } catch (...) {
      ::close(out);
      throw;
    }
    if (::close(out) != 0) throw_errno(h5_temp_, "close");
    if (::rename(h5_temp_.c_str(), path_.c_str()) != 0)
      throw_errno(path_, "rename " + h5_temp_ + " to");
    committed_ = true;
    fsync_parent(path_);
    bytes_at_commit_ = data_bytes;
    raw_.reset();  // removes the raw temp file

    return shard_entry(hash_file(path_), n);
  }

 private:
  void write_channel_order(hid_t images) {
    const char* order = channel_order_for(channels_);
    // Variable-length UTF-8 so h5py returns a str, not bytes.
    Handle type(check(H5Tcopy(H5T_C_S1), h5_temp_, "copy string type"), H5Tclose);
    check(H5Tset_size(type.get(), H5T_VARIABLE), h5_temp_, "set string size", 0);
    check(H5Tset_cset(type.get(), H5T_CSET_UTF8), h5_temp_, "set string charset", 0);
    Handle space(check(H5Screate(H5S_SCALAR), h5_temp_, "create scalar space"), H5Sclose);
    Handle attr(check(H5Acreate2(images, "channel_order", type.get(), space.get(), H5P_DEFAULT,
                                 H5P_DEFAULT),
                      h5_temp_, "create attribute channel_order"),
                H5Aclose);
    check(H5Awrite(attr.get(), type.get(), &order), h5_temp_, "write attribute channel_order", 0);
  }

  void copy_raw(int out, uint64_t offset, uint64_t bytes) {
    const std::string& raw_path = raw_->temp_path();
    const int in = ::open(raw_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (in < 0) throw_errno(raw_path, "open");
    try {
      std::vector<unsigned char> buf(static_cast<size_t>(std::min<uint64_t>(bytes, kCopyBlock)));
      for (uint64_t at = 0; at < bytes;) {
        const size_t want = static_cast<size_t>(std::min<uint64_t>(bytes - at, kCopyBlock));
        const size_t got = pread_some(in, buf.data(), want, at, raw_path);
        if (got == 0) fail(ErrorKind::kIOError, raw_path, "raw samples file is short");
        detail::pwrite_all(out, buf.data(), got, offset + at, h5_temp_);
        at += got;
      }
    } catch (...) {
      ::close(in);
      throw;
    }
    ::close(in);
  }

  std::string path_;
  std::string h5_temp_;
  std::unique_ptr<AtomicFile> raw_;  // samples as appended; never committed
  uint32_t channels_;
  std::vector<int64_t> labels_;
  uint64_t bytes_at_commit_ = 0;
  bool committed_ = false;
};

class Hdf5ShardWriter : public ShardWriter {
 public:
  Hdf5ShardWriter(const std::string& path, SampleShape shape, uint64_t capacity)
      : builder_(path, shape.channels), shape_(shape), capacity_(capacity) {}

  void append(const uint8_t* sample, int64_t label) override {
    if (builder_.committed())
      fail(ErrorKind::kInvalidArgument, builder_.path(), "append after commit");
    if (builder_.count() >= capacity_) {
      fail(ErrorKind::kInvalidArgument, builder_.path(),
           "shard is full (capacity " + std::to_string(capacity_) + " samples)");
    }
    builder_.append(sample, shape_.bytes(), label);
  }

  uint64_t count() const override { return builder_.count(); }

  ShardEntry commit() override {
    return builder_.commit({builder_.count(), shape_.height, shape_.width, shape_.channels});
  }

 private:
  Hdf5Builder builder_;
  SampleShape shape_;
  uint64_t capacity_;
};

class Hdf5RaggedWriter : public RaggedShardWriter {
 public:
  Hdf5RaggedWriter(const std::string& path, uint32_t channels, uint64_t capacity_bytes)
      : builder_(path, channels), channels_(channels), capacity_bytes_(capacity_bytes) {}

  uint64_t append(const uint8_t* sample, uint32_t height, uint32_t width, int64_t label) override {
    if (builder_.committed())
      fail(ErrorKind::kInvalidArgument, builder_.path(), "append after commit");
    const uint64_t n = ragged_sample_bytes(builder_.path(), height, width, channels_,
                                           builder_.bytes(), capacity_bytes_);
    return append_bytes(sample, n, label);
  }

  uint64_t append_bytes(const uint8_t* data, uint64_t n, int64_t label) override {
    if (builder_.committed())
      fail(ErrorKind::kInvalidArgument, builder_.path(), "append after commit");
    check_ragged_room(builder_.path(), n, builder_.bytes(), capacity_bytes_);
    const uint64_t offset = builder_.bytes();
    builder_.append(data, n, label);
    return offset;
  }

  uint64_t count() const override { return builder_.count(); }
  uint64_t bytes() const override { return builder_.bytes(); }

  ShardEntry commit() override { return builder_.commit({builder_.bytes()}); }

 private:
  Hdf5Builder builder_;
  uint32_t channels_;
  uint64_t capacity_bytes_;
};

// Opens `images` in a shard read-only; Corruption for anything that is not one of ours.
struct OpenShard {
  Handle file;
  Handle images;
};

void open_images(const std::string& path, OpenShard* s) {
  quiet_hdf5();
  const htri_t is = H5Fis_hdf5(path.c_str());
  if (is <= 0) fail(ErrorKind::kCorruption, path, "not an HDF5 file");
  s->file = Handle(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!s->file.ok()) fail(ErrorKind::kCorruption, path, "not a readable HDF5 file");
  if (H5Lexists(s->file.get(), "images", H5P_DEFAULT) <= 0) {
    fail(ErrorKind::kCorruption, path, "no dataset 'images'");
  }
  s->images = Handle(H5Dopen2(s->file.get(), "images", H5P_DEFAULT), H5Dclose);
  if (!s->images.ok()) fail(ErrorKind::kCorruption, path, "'images' is not a dataset");
}

// Opens the uint8 `images` of `path` into `s` and reads its `rank` dimensions into `dims`;
// Corruption when it is not uint8 or has another rank (`expected` says which, for the message).
void open_u8_images(const std::string& path, OpenShard* s, int rank, hsize_t* dims,
                    const char* expected) {
  open_images(path, s);
  Handle type(H5Dget_type(s->images.get()), H5Tclose);
  if (!type.ok() || H5Tget_class(type.get()) != H5T_INTEGER || H5Tget_size(type.get()) != 1 ||
      H5Tget_sign(type.get()) != H5T_SGN_NONE) {
    fail(ErrorKind::kCorruption, path, "'images' is not uint8");
  }
  Handle space(H5Dget_space(s->images.get()), H5Sclose);
  if (!space.ok()) fail(ErrorKind::kCorruption, path, "'images' has no dataspace");
  const int got = H5Sget_simple_extent_ndims(space.get());
  if (got != rank || H5Sget_simple_extent_dims(space.get(), dims, nullptr) != rank) {
    fail(ErrorKind::kCorruption, path,
         "'images' has " + std::to_string(got) + " dimensions, expected " + expected);
  }
}

// Where a shard of `count` samples lies: `data` bytes of `images` at one file offset inside a file
// of `size` bytes, or a chunked/compressed dataset read through the library.
ShardLocation locate_data(const OpenShard& s, const std::string& path, uint64_t size,
                          uint64_t count, uint64_t data) {
  ShardLocation loc;
  loc.count = count;
  loc.file_bytes = size;
  Handle dcpl(H5Dget_create_plist(s.images.get()), H5Pclose);
  const bool contiguous_layout = dcpl.ok() && H5Pget_layout(dcpl.get()) == H5D_CONTIGUOUS;
  const haddr_t offset = H5Dget_offset(s.images.get());
  if (contiguous_layout && offset != HADDR_UNDEF) {
    if (offset > size || data > size - offset) {
      fail(ErrorKind::kCorruption, path,
           "file holds " + std::to_string(size) + " bytes, images data ends at " +
               (data > UINT64_MAX - offset ? std::string("past 2^64")
                                           : std::to_string(offset + data)));
    }
    loc.contiguous = true;
    loc.data_offset = offset;
  } else if (contiguous_layout && data == 0) {
    // An empty contiguous dataset has no storage and so no address; there is nothing to map.
    loc.contiguous = true;
    loc.data_offset = 0;
  } else {
    loc.contiguous = false;
    loc.data_offset = 0;
  }
  return loc;
}

}  // namespace

std::unique_ptr<ShardWriter> create_hdf5_writer(const std::string& path, SampleShape shape,
                                                uint64_t capacity) {
  return std::make_unique<Hdf5ShardWriter>(path, shape, capacity);
}

std::unique_ptr<RaggedShardWriter> create_hdf5_ragged_writer(const std::string& path,
                                                             uint32_t channels,
                                                             uint64_t capacity_bytes) {
  return std::make_unique<Hdf5RaggedWriter>(path, channels, capacity_bytes);
}

ShardLocation locate_hdf5_shard(const std::string& path, SampleShape shape) {
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  const uint64_t size = file_size(path);  // NotFound before HDF5 sees the path
  OpenShard s;
  hsize_t dims[4] = {0, 0, 0, 0};
  open_u8_images(path, &s, 4, dims, "4 (n, H, W, C)");
  if (dims[1] != shape.height || dims[2] != shape.width || dims[3] != shape.channels) {
    fail(ErrorKind::kCorruption, path,
         "'images' is (" + std::to_string(dims[0]) + ", " + std::to_string(dims[1]) + ", " +
             std::to_string(dims[2]) + ", " + std::to_string(dims[3]) + "), expected (n, " +
             std::to_string(shape.height) + ", " + std::to_string(shape.width) + ", " +
             std::to_string(shape.channels) + ")");
  }
  return locate_data(s, path, size, dims[0], checked_mul(dims[0], shape.bytes(), path));
}

ShardLocation locate_hdf5_ragged_shard(const std::string& path) {
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  const uint64_t size = file_size(path);  // NotFound before HDF5 sees the path
  OpenShard s;
  hsize_t dims[1] = {0};
  open_u8_images(path, &s, 1, dims, "1 (bytes,) for a ragged shard");
  return locate_data(s, path, size, dims[0], dims[0]);
}

namespace {

// Reads the hyperslab at `start` of `count` (each `rank` long) of `images` into `out`; `what`
// ("bytes" or "samples") names the unit the errors count in. A rank-1 read (a ragged shard's
// bytes) first checks that `images` is 1-d; a rank-4 read leaves a wrong rank to the hyperslab
// selection, which refuses it.
void read_images_slab(const std::string& path, int rank, const hsize_t* start, const hsize_t* count,
                      const std::string& what, uint8_t* out) {
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  OpenShard s;
  open_images(path, &s);
  Handle file_space(H5Dget_space(s.images.get()), H5Sclose);
  if (!file_space.ok()) fail(ErrorKind::kCorruption, path, "'images' has no dataspace");
  if (rank == 1 && H5Sget_simple_extent_ndims(file_space.get()) != 1) {
    fail(ErrorKind::kCorruption, path, "'images' is not 1-d");
  }
  if (H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr) < 0) {
    fail(ErrorKind::kInvalidArgument, path, what + " out of range");
  }
  Handle mem_space(H5Screate_simple(rank, count, nullptr), H5Sclose);
  if (!mem_space.ok()) fail(ErrorKind::kIOError, path, "HDF5: create dataspace failed");
  if (H5Dread(s.images.get(), H5T_NATIVE_UINT8, mem_space.get(), file_space.get(), H5P_DEFAULT,
              out) < 0) {
    fail(ErrorKind::kCorruption, path,
         "HDF5 could not read " + what + " [" + std::to_string(start[0]) + ", " +
             std::to_string(start[0] + count[0]) + ") of 'images'");
  }
}

}  // namespace

void read_hdf5_bytes(const std::string& path, uint64_t offset, uint64_t n, uint8_t* out) {
  const hsize_t start[1] = {offset};
  const hsize_t count[1] = {n};
  read_images_slab(path, 1, start, count, "bytes", out);
}

void read_hdf5_samples(const std::string& path, SampleShape shape, uint64_t first, uint64_t n,
                       uint8_t* out) {
  const hsize_t start[4] = {first, 0, 0, 0};
  const hsize_t count[4] = {n, shape.height, shape.width, shape.channels};
  read_images_slab(path, 4, start, count, "samples", out);
}

}  // namespace detail
}  // namespace dscache
