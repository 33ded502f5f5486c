// metrics.jsonl and the epoch summary.
#include "metrics.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "dscache/error.h"
#include "safety.h"
#include "tensorboard.h"
#include "terminal.h"

namespace dscache {
namespace train {

MetricsLog::~MetricsLog() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsLog::open_tensorboard(const std::string& dir, std::optional<int64_t> purge_from) {
  events_ = std::make_unique<EventWriter>(dir, purge_from);
}

void MetricsLog::open(const std::string& path, std::optional<uint64_t> resume_bytes) {
  path_ = path;
  Fd fd = trainer_open_regular_file(path, O_WRONLY | O_CREAT, "metrics log");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw_errno(path, "fstat");
  // Resuming drops what the interrupted run logged after its last checkpoint: it is replayed.
  const uint64_t keep =
      resume_bytes ? std::min<uint64_t>(*resume_bytes, static_cast<uint64_t>(st.st_size)) : 0;
  if (static_cast<uint64_t>(st.st_size) != keep &&
      ::ftruncate(fd.get(), static_cast<off_t>(keep)) != 0) {
    throw_errno(path, "truncate");
  }
  if (::lseek(fd.get(), static_cast<off_t>(keep), SEEK_SET) < 0) throw_errno(path, "seek");
  bytes_ = keep;
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd.release();
}

void MetricsLog::write(const nlohmann::json& line) {
  if (fd_ < 0) return;
  const std::string text = line.dump() + "\n";
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_errno(path_, "write");
    p += n;
    left -= static_cast<size_t>(n);
  }
  bytes_ += text.size();
  if (!events_) return;
  const int64_t step = line.value("step", int64_t{0});
  const double now = wall_time_now();
  for (const auto& [tag, value] : tensorboard_scalars(line)) events_->scalar(tag, step, value, now);
  events_->flush();
}

std::vector<std::pair<std::string, double>> tensorboard_scalars(const nlohmann::json& line) {
  std::vector<std::pair<std::string, double>> out;
  const std::string kind = line.value("kind", std::string());
  if (kind != "step" && kind != "epoch") return out;
  for (const auto& [key, value] : line.items()) {
    if (!value.is_number() || key == "step" || key == "epoch") continue;
    std::string tag = "train/" + key;
    if (kind == "epoch") tag = key.rfind("val_", 0) == 0 ? "val/" + key.substr(4) : "epoch/" + key;
    out.emplace_back(tag, value.get<double>());
  }
  return out;
}

void print_epoch_summary(const nlohmann::json& line, uint32_t epochs) {
  end_progress_line();  // stdout and stderr are often the same terminal
  std::printf("epoch %llu/%u: loss %.4f", line.at("epoch").get<unsigned long long>() + 1, epochs,
              line.at("loss").get<double>());
  if (!line.at("val_loss").is_null()) {
    std::printf("  val_loss %.4f", line.at("val_loss").get<double>());
    for (const char* k : {"val_acc", "val_map", "val_micro_f1", "val_mae", "val_rmse", "val_r2",
                          "val_miou", "val_pixel_acc"}) {
      if (line.contains(k) && line.at(k).is_number()) {
        std::printf("  %s %.4f", k, line.at(k).get<double>());
      }
    }
  }
  std::printf("  %.1f s  %.0f samples/s  data_wait %.1f%%  skipped %lld\n",
              line.at("seconds").get<double>(), line.at("samples_per_s").get<double>(),
              100 * line.at("data_wait").get<double>(), line.at("skipped_steps").get<long long>());
  std::fflush(stdout);
}

}  // namespace train
}  // namespace dscache
