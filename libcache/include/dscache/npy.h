// Parse and format NumPy .npy headers (format versions 1.0, 2.0 and 3.0).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dscache {

class File;

// A parsed .npy header. Plain value type.
struct NpyHeader {
  int major = 1;                // format major version (1, 2 or 3)
  int minor = 0;                // format minor version (0)
  std::string descr;            // NumPy type string, e.g. "|u1", "<i8", "<u8"
  bool fortran_order = false;   // true for column-major data (we never write it)
  std::vector<uint64_t> shape;  // array dimensions, outermost first
  uint64_t data_offset = 0;     // bytes from file start to the first array byte

  uint64_t item_size() const;      // bytes per element, from descr
  uint64_t element_count() const;  // product of shape (1 for a 0-d array)
  uint64_t data_bytes() const;     // item_size() * element_count(); throws on overflow
};

// Parses the header at the start of `bytes` (which must hold at least the whole header).
// Throws Error(kCorruption, path, reason) on anything malformed or hostile: bad magic, unknown
// version, header length past `size`, dict syntax errors, unknown keys, missing keys, unknown or
// non-native-endian descr, negative/overflowing dimensions. `path` is used only in messages.
NpyHeader parse_npy_header(const void* bytes, size_t size, const std::string& path);

// Reads and parses the header of the file at `path` (at most the first 64 KiB + header length).
// Throws NotFound / IOError / Corruption. Does not check the file size; see check_npy_file.
NpyHeader read_npy_header(const std::string& path);
// The same on an open file (see file.h); errors name file.path().
NpyHeader read_npy_header(const File& file);

// Checks that a file of `file_bytes` bytes holds exactly the header's data_offset + data_bytes()
// (overflow included). Throws Corruption naming `path` ("file holds 80 bytes, header says 2048").
void check_npy_size(const NpyHeader& h, uint64_t file_bytes, const std::string& path);

// The data bytes of the npy file whose header is `h`. The file's size is checked against the
// header (check_npy_size) before anything is allocated, so a header that claims 2^40 elements is
// Corruption, never an allocation. Throws NotFound / IOError / Corruption naming the file.
std::vector<uint8_t> read_npy_data(const std::string& path, const NpyHeader& h);
std::vector<uint8_t> read_npy_data(const File& file, const NpyHeader& h);

// Returns the full header (magic, version, length, dict, space padding, '\n') for a C-order
// array. Its length is a multiple of 64 and at least `min_total` bytes, so a header rewritten
// later with a smaller shape can be padded to the same length. Version 1.0 unless the dict needs
// more than 65535 bytes. `descr` must be one parse_npy_header accepts.
std::string format_npy_header(const std::string& descr, const std::vector<uint64_t>& shape,
                              size_t min_total = 0);

// Writes a complete .npy file atomically (temp name in the same directory, fsync, rename).
void write_npy_file(const std::string& path, const std::string& descr,
                    const std::vector<uint64_t>& shape, const void* data, size_t bytes);

}  // namespace dscache
