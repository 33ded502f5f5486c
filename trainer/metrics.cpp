// metrics.jsonl, the progress line and the epoch summary.
#include "metrics.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "dscache/error.h"

namespace dscache {
namespace train {

namespace fs = std::filesystem;

void MetricsLog::open(const std::string& path, std::optional<uint64_t> resume_bytes) {
  path_ = path;
  if (resume_bytes) {
    // Drop what the interrupted run logged after its last checkpoint: it is replayed.
    if (fs::exists(path) && fs::file_size(path) > *resume_bytes) {
      fs::resize_file(path, *resume_bytes);
    }
    out_.open(path, std::ios::app);
    bytes_ = fs::exists(path) ? fs::file_size(path) : 0;
  } else {
    out_.open(path, std::ios::trunc);
  }
  if (!out_) throw Error(ErrorKind::kIOError, path, "cannot open for writing");
}

void MetricsLog::write(const nlohmann::json& line) {
  if (!out_.is_open()) return;
  const std::string text = line.dump() + "\n";
  out_ << text;
  out_.flush();
  if (!out_) throw Error(ErrorKind::kIOError, path_, "write failed");
  bytes_ += text.size();
}

ProgressLine::ProgressLine(bool wanted, uint32_t epochs)
    : enabled_(wanted && ::isatty(STDERR_FILENO)), epochs_(epochs) {}

void ProgressLine::show(uint64_t epoch, uint64_t b, uint64_t batches, double loss, double lr,
                        double rate, bool final_line) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!final_line && now - last_ < std::chrono::milliseconds(250)) return;
  last_ = now;
  std::fprintf(stderr, "\repoch %llu/%u  batch %llu/%llu  loss %.4f  lr %.3g  %.0f samples/s   ",
               static_cast<unsigned long long>(epoch + 1), epochs_,
               static_cast<unsigned long long>(b), static_cast<unsigned long long>(batches), loss,
               lr, rate);
  if (final_line) std::fputc('\n', stderr);
  std::fflush(stderr);
}

void print_epoch_summary(const nlohmann::json& line, uint32_t epochs) {
  std::printf("epoch %llu/%u: loss %.4f", line.at("epoch").get<unsigned long long>() + 1, epochs,
              line.at("loss").get<double>());
  if (!line.at("val_loss").is_null()) {
    std::printf("  val_loss %.4f  val_acc %.4f", line.at("val_loss").get<double>(),
                line.at("val_acc").get<double>());
  }
  std::printf("  %.1f s  %.0f samples/s  data_wait %.1f%%  skipped %lld\n",
              line.at("seconds").get<double>(), line.at("samples_per_s").get<double>(),
              100 * line.at("data_wait").get<double>(), line.at("skipped_steps").get<long long>());
  std::fflush(stdout);
}

}  // namespace train
}  // namespace dscache
