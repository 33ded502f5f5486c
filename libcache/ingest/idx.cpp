#include "dscache/ingest/idx.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "dscache/error.h"
#include "dscache/file.h"

namespace dscache {
namespace {

// Reads a file, transparently gunzipping it (zlib reads plain files as they are), in steps: the
// caller reads the header first and then only as much as the header declares (+1 byte, to see
// whether the file holds more), so a small gzip bomb is never inflated past what it claims.
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path) {
    File file = File::open(path);  // regular files only: a FIFO would block in gzopen
    f_ = gzdopen(file.fd(), "rb");
    if (f_ == nullptr) throw Error(ErrorKind::kIOError, path, "cannot open for decompression");
    file.release();  // gzclose closes it
    gzbuffer(f_, 1 << 16);
  }
  ~GzReader() { gzclose(f_); }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Appends up to `n` more bytes to *out; returns how many there were.
  uint64_t read(uint64_t n, std::vector<uint8_t>* out) {
    uint64_t got = 0;
    uint8_t buf[1 << 16];
    while (got < n) {
      const unsigned want = static_cast<unsigned>(std::min<uint64_t>(n - got, sizeof buf));
      const int r = gzread(f_, buf, want);
      if (r < 0) {
        int err = 0;
        const std::string msg = gzerror(f_, &err);
        throw Error(ErrorKind::kCorruption, path_, "cannot decompress: " + msg);
      }
      if (r == 0) break;
      out->insert(out->end(), buf, buf + r);
      got += static_cast<uint64_t>(r);
    }
    return got;
  }

 private:
  std::string path_;
  gzFile f_ = nullptr;
};

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

bool is_idx_images_file(const std::string& path) {
  try {
    GzReader r(path);
    std::vector<uint8_t> head;
    r.read(4, &head);
    return head.size() >= 4 && be32(head.data()) == 0x00000803;
  } catch (const Error&) {
    return false;
  }
}

IdxImages read_idx_images(const std::string& path) { return read_idx_images(path, UINT64_MAX); }

IdxImages read_idx_images(const std::string& path, uint64_t max_images) {
  GzReader r(path);
  std::vector<uint8_t> data;
  r.read(16, &data);
  if (data.size() < 16) throw Error(ErrorKind::kCorruption, path, "too short for an idx3 header");
  if (be32(data.data()) != 0x00000803) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%08x", be32(data.data()));
    throw Error(
        ErrorKind::kCorruption, path,
        std::string("not an idx3 ubyte images file (magic ") + hex + ", expected 0x00000803)");
  }
  IdxImages img;
  img.count = be32(data.data() + 4);
  img.rows = be32(data.data() + 8);
  img.cols = be32(data.data() + 12);
  if (img.rows == 0 || img.cols == 0 || img.rows > 65536 || img.cols > 65536) {
    throw Error(
        ErrorKind::kCorruption, path,
        "implausible image size " + std::to_string(img.rows) + "x" + std::to_string(img.cols));
  }
  const uint64_t need = uint64_t{img.count} * img.rows * img.cols;  // < 2^64: 2^32 * 2^16 * 2^16
  if (need > std::numeric_limits<size_t>::max() / 2) {
    throw Error(ErrorKind::kUnsupported, path,
                "header says " + std::to_string(need) + " pixel bytes, more than memory can hold");
  }
  if (max_images < img.count) {  // a prefix: inflate only its bytes
    const uint64_t want = uint64_t{static_cast<uint32_t>(max_images)} * img.rows * img.cols;
    const uint64_t got = r.read(want, &img.pixels);
    if (got != want) {
      throw Error(ErrorKind::kCorruption, path,
                  "header says " + std::to_string(img.count) + " images of " +
                      std::to_string(img.rows) + "x" + std::to_string(img.cols) +
                      ", file ends after " + std::to_string(got) + " pixel bytes");
    }
    img.count = static_cast<uint32_t>(max_images);
    return img;
  }
  // Inflate what the header declares and one byte more, never the whole stream.
  const uint64_t got = r.read(need + 1, &img.pixels);
  if (got != need) {
    throw Error(ErrorKind::kCorruption, path,
                "header says " + std::to_string(img.count) + " images of " +
                    std::to_string(img.rows) + "x" + std::to_string(img.cols) + " (" +
                    std::to_string(need) + " bytes), file holds " +
                    (got > need ? "more" : std::to_string(got)));
  }
  return img;
}

std::vector<uint8_t> read_idx_labels(const std::string& path) {
  GzReader r(path);
  std::vector<uint8_t> data;
  r.read(8, &data);
  if (data.size() < 8 || be32(data.data()) != 0x00000801) {
    throw Error(ErrorKind::kCorruption, path, "not an idx1 ubyte labels file (magic 0x00000801)");
  }
  const uint32_t n = be32(data.data() + 4);
  std::vector<uint8_t> labels;
  const uint64_t got = r.read(uint64_t{n} + 1, &labels);
  if (got != n) {
    throw Error(ErrorKind::kCorruption, path,
                "header says " + std::to_string(n) + " labels, file holds " +
                    (got > n ? "more" : std::to_string(got)));
  }
  return labels;
}

std::string idx_labels_sibling(const std::string& images_path) {
  auto slash = images_path.find_last_of('/');
  std::string dir = slash == std::string::npos ? "" : images_path.substr(0, slash + 1);
  std::string name = slash == std::string::npos ? images_path : images_path.substr(slash + 1);
  auto replace = [](std::string s, const std::string& from, const std::string& to) {
    auto p = s.find(from);
    if (p != std::string::npos) s.replace(p, from.size(), to);
    return s;
  };
  std::string guess = replace(replace(name, "idx3", "idx1"), "images", "labels");
  if (guess == name) return "";
  std::string base = guess;
  if (base.size() > 3 && base.compare(base.size() - 3, 3, ".gz") == 0) base.resize(base.size() - 3);
  for (const std::string& cand : {guess, base, base + ".gz"}) {
    struct stat st;
    if (::stat((dir + cand).c_str(), &st) == 0 && S_ISREG(st.st_mode)) return dir + cand;
  }
  return "";
}

}  // namespace dscache
