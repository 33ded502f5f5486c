// TensorBoard event files (no torch, no libprotobuf): the few protobuf fields of Event and
// Summary encoded by hand, framed as TFRecords, so `tensorboard --logdir OUTPUT/tb` draws a run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "safety.h"

namespace dscache {
namespace train {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `n` bytes: crc32c("123456789") is
// 0xE3069283.
uint32_t crc32c(const void* data, size_t n);

// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8, of crc32c(data).
uint32_t masked_crc32c(const void* data, size_t n);

// One TFRecord: uint64 length (little-endian), uint32 masked_crc32c(length's 8 bytes), the data,
// uint32 masked_crc32c(data).
std::string tfrecord(const std::string& data);

// The protobuf bytes of an Event (tensorflow/core/util/event.proto) holding what is named; the
// field numbers are fixed by the published definitions: Event{wall_time = 1 double, step = 2
// int64, file_version = 3 string, summary = 5 Summary, session_log = 7 SessionLog}, Summary{value
// = 1 repeated Value}, Value{tag = 1 string, simple_value = 2 float}, SessionLog{status = 1 enum,
// START = 1}.
std::string event_file_version(double wall_time, const std::string& version);
std::string event_scalar(double wall_time, int64_t step, const std::string& tag, float value);
std::string event_session_start(double wall_time, int64_t step);

// Seconds since the epoch, as TensorBoard's wall_time.
double wall_time_now();

// Writes DIR/events.out.tfevents.<unix seconds>.<hostname>.<pid>: a new file for each writer
// (TensorBoard reads every file of the directory, in name order), whose first record is an Event
// with file_version "brain.Event:2". Records wait in memory until flush(), which writes them with
// one write(2), so a killed process leaves whole records behind. Owns its file; not thread-safe.
class EventWriter {
 public:
  // Creates `dir` when missing (it must be a directory) and the event file (only ever a regular
  // file: a FIFO cannot block the open). With `purge_from`, the file starts with a SessionLog
  // START at that step: TensorBoard then drops what earlier files of the directory logged at
  // that step and after (a resumed run replays those steps). Throws dscache::Error naming the
  // directory or the file.
  explicit EventWriter(const std::string& dir, std::optional<int64_t> purge_from = std::nullopt);
  ~EventWriter();  // flushes what is pending, quietly
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // Queues a scalar `value` for `tag` at `step` (float32, as TensorBoard keeps it).
  void scalar(const std::string& tag, int64_t step, double value, double wall_time);
  // Writes what is queued. Throws Error(kIOError) naming the file when the write fails.
  void flush();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  Fd fd_;
  std::string pending_;
};

}  // namespace train
}  // namespace dscache
