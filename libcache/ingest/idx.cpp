#include "dscache/ingest/idx.h"

#include <sys/stat.h>
#include <zlib.h>

#include <cstring>

#include "dscache/error.h"

namespace dscache {
namespace {

// Reads a whole file, transparently gunzipping it (zlib reads plain files as they are).
std::vector<uint8_t> read_maybe_gz(const std::string& path, size_t limit = SIZE_MAX) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) throw Error(ErrorKind::kNotFound, path, "no such file");
    throw_errno(path, "open");
  }
  gzbuffer(f, 1 << 20);
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  while (out.size() < limit) {
    int n = gzread(f, buf, sizeof buf);
    if (n < 0) {
      int err = 0;
      std::string msg = gzerror(f, &err);
      gzclose(f);
      throw Error(ErrorKind::kCorruption, path, "cannot decompress: " + msg);
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  gzclose(f);
  return out;
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

bool is_idx_images_file(const std::string& path) {
  try {
    auto head = read_maybe_gz(path, 4);
    return head.size() >= 4 && be32(head.data()) == 0x00000803;
  } catch (const Error&) {
    return false;
  }
}

IdxImages read_idx_images(const std::string& path) {
  auto data = read_maybe_gz(path);
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
  uint64_t need = uint64_t{img.count} * img.rows * img.cols;
  if (data.size() - 16 != need) {
    throw Error(ErrorKind::kCorruption, path,
                "header says " + std::to_string(img.count) + " images of " +
                    std::to_string(img.rows) + "x" + std::to_string(img.cols) + " (" +
                    std::to_string(need) + " bytes), file holds " +
                    std::to_string(data.size() - 16));
  }
  img.pixels.assign(data.begin() + 16, data.end());
  return img;
}

std::vector<uint8_t> read_idx_labels(const std::string& path) {
  auto data = read_maybe_gz(path);
  if (data.size() < 8 || be32(data.data()) != 0x00000801) {
    throw Error(ErrorKind::kCorruption, path, "not an idx1 ubyte labels file (magic 0x00000801)");
  }
  uint32_t n = be32(data.data() + 4);
  if (data.size() - 8 != n) {
    throw Error(ErrorKind::kCorruption, path,
                "header says " + std::to_string(n) + " labels, file holds " +
                    std::to_string(data.size() - 8));
  }
  return std::vector<uint8_t>(data.begin() + 8, data.end());
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
