// TensorBoard event files: CRC-32C, TFRecord framing and hand-encoded Event/Summary messages.
#include "tensorboard.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "dscache/error.h"

namespace dscache {
namespace train {

namespace {

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

// ---- protobuf wire format: varints, fixed 32/64-bit and length-delimited fields ----

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void put_key(std::string* out, uint32_t field, WireType type) {
  put_varint(out, (uint64_t{field} << 3) | type);
}

void put_le(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_double(std::string* out, uint32_t field, double v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed64);
  put_le(out, bits, 8);
}

void put_float(std::string* out, uint32_t field, float v) {
  uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed32);
  put_le(out, bits, 4);
}

void put_bytes(std::string* out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out->append(bytes);
}

// Event's fields (event.proto); never renumbered upstream.
constexpr uint32_t kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5,
                   kEventSessionLog = 7;
constexpr uint32_t kSummaryValue = 1, kValueTag = 1, kValueSimpleValue = 2;
constexpr uint32_t kSessionLogStatus = 1, kSessionStart = 1;

std::string event_head(double wall_time, int64_t step) {
  std::string e;
  put_double(&e, kEventWallTime, wall_time);
  if (step != 0) {  // proto3: a zero is not written
    put_key(&e, kEventStep, kVarint);
    put_varint(&e, static_cast<uint64_t>(step));  // int64: two's complement, 10 bytes if < 0
  }
  return e;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(const std::string& data) {
  std::string r;
  put_le(&r, data.size(), 8);
  put_le(&r, masked_crc32c(r.data(), 8), 4);
  r.append(data);
  put_le(&r, masked_crc32c(data.data(), data.size()), 4);
  return r;
}

std::string event_file_version(double wall_time, const std::string& version) {
  std::string e = event_head(wall_time, 0);
  put_bytes(&e, kEventFileVersion, version);
  return e;
}

std::string event_scalar(double wall_time, int64_t step, const std::string& tag, float value) {
  std::string v;
  put_bytes(&v, kValueTag, tag);
  put_float(&v, kValueSimpleValue, value);
  std::string summary;
  put_bytes(&summary, kSummaryValue, v);
  std::string e = event_head(wall_time, step);
  put_bytes(&e, kEventSummary, summary);
  return e;
}

std::string event_session_start(double wall_time, int64_t step) {
  std::string log;
  put_key(&log, kSessionLogStatus, kVarint);
  put_varint(&log, kSessionStart);
  std::string e = event_head(wall_time, step);
  put_bytes(&e, kEventSessionLog, log);
  return e;
}

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

EventWriter::EventWriter(const std::string& dir, std::optional<int64_t> purge_from) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    throw_errno(dir, "TensorBoard directory: mkdir");
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) throw_errno(dir, "TensorBoard directory: stat");
  if (!S_ISDIR(st.st_mode)) {
    throw Error(
        ErrorKind::kInvalidArgument, dir,
        "TensorBoard directory: is " + describe_file_type(st.st_mode) + ", not a directory");
  }
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  for (char* c = host; *c; ++c) {
    if (*c == '/') *c = '_';
  }
  const double now = wall_time_now();
  path_ = dir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) + "." + host +
          "." + std::to_string(::getpid());
  fd_ = trainer_open_regular_file(path_, O_WRONLY | O_CREAT | O_TRUNC, "TensorBoard event file");
  pending_ = tfrecord(event_file_version(now, "brain.Event:2"));
  if (purge_from) pending_ += tfrecord(event_session_start(now, *purge_from));
  flush();
}

EventWriter::~EventWriter() {
  try {
    flush();
  } catch (const std::exception&) {  // a destructor does not throw; flush() already said it
  }
}

void EventWriter::scalar(const std::string& tag, int64_t step, double value, double wall_time) {
  pending_ += tfrecord(event_scalar(wall_time, step, tag, static_cast<float>(value)));
}

void EventWriter::flush() {
  const char* p = pending_.data();
  size_t left = pending_.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_.get(), p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      pending_.clear();  // the run stops on this error; the destructor must not retry it
      throw_errno(path_, "write");
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  pending_.clear();
}

}  // namespace train
}  // namespace dscache
