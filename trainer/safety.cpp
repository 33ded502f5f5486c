// Regular-file opens, the output lock and the stop signals (no torch: compiles fast).
#include "safety.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "dscache/error.h"
#include "terminal.h"

namespace dscache {
namespace train {

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

std::string describe_file_type(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

Fd trainer_open_regular_file(const std::string& path, int flags, const std::string& what,
                             mode_t mode) {
  Fd fd(::open(path.c_str(), flags | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, mode));
  if (fd.get() < 0) {
    const int err = errno;
    if (err == ENOENT) throw Error(ErrorKind::kNotFound, path, what + ": no such file");
    // A FIFO opened for writing without a reader fails (ENXIO), a directory for writing (EISDIR):
    // name what it is rather than the errno.
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
      throw Error(ErrorKind::kInvalidArgument, path,
                  what + ": is " + describe_file_type(st.st_mode) + ", not a regular file");
    }
    errno = err;
    throw_errno(path, what + ": open");
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw_errno(path, what + ": fstat");
  if (!S_ISREG(st.st_mode)) {
    throw Error(ErrorKind::kInvalidArgument, path,
                what + ": is " + describe_file_type(st.st_mode) + ", not a regular file");
  }
  const int fl = ::fcntl(fd.get(), F_GETFL);
  if (fl < 0 || ::fcntl(fd.get(), F_SETFL, fl & ~O_NONBLOCK) != 0) {
    throw_errno(path, what + ": fcntl");
  }
  return fd;
}

std::string trainer_read_regular_file(const std::string& path, const std::string& what) {
  const Fd fd = trainer_open_regular_file(path, O_RDONLY, what);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw_errno(path, what + ": fstat");
  std::string out;
  out.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_errno(path, what + ": read");
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

void check_regular_if_exists(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;
  if (!S_ISREG(st.st_mode)) {
    throw Error(ErrorKind::kInvalidArgument, path,
                what + ": is " + describe_file_type(st.st_mode) + ", not a regular file");
  }
}

void check_directory(const std::string& path, const std::string& what, bool or_file) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) throw Error(ErrorKind::kNotFound, path, what + ": no such directory");
    throw_errno(path, what + ": stat");
  }
  if (S_ISDIR(st.st_mode) || (or_file && S_ISREG(st.st_mode))) return;
  throw Error(ErrorKind::kInvalidArgument, path,
              what + ": is " + describe_file_type(st.st_mode) + ", not a " +
                  (or_file ? "directory or a list file" : "cache directory"));
}

OutputLock::OutputLock(const std::string& dir) {
  const std::string path = dir + "/" + kFileName;
  fd_ = trainer_open_regular_file(path, O_RDWR | O_CREAT, "lock file");
  if (::flock(fd_.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) throw_errno(path, "lock file: flock");
    std::string holder(256, '\0');
    const ssize_t n = ::pread(fd_.get(), holder.data(), holder.size(), 0);
    holder.resize(n > 0 ? static_cast<size_t>(n) : 0);
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
    throw OutputLockedError("--output " + dir + " is in use by another dscache-train (" +
                            (holder.empty() ? std::string("holder not yet recorded") : holder) +
                            "; lock " + path +
                            "); wait for it to finish, stop it, or choose another --output");
  }
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  char when[32] = "?";
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  if (::gmtime_r(&now, &tm)) std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  const std::string text =
      "pid " + std::to_string(::getpid()) + " on host " + host + ", started " + when + "\n";
  // Best effort: the lock itself is the flock; the text only names the holder.
  if (::ftruncate(fd_.get(), 0) == 0) {
    (void)!::pwrite(fd_.get(), text.data(), text.size(), 0);
  }
}

std::vector<std::string> run_files_present(const std::string& dir) {
  std::vector<std::string> out;
  for (const char* name :
       {"checkpoint.pt", "checkpoint.prev.pt", "metrics.jsonl", "model.pt", "model.json"}) {
    struct stat st {};
    if (::lstat((dir + "/" + name).c_str(), &st) == 0) out.push_back(name);
  }
  return out;
}

// ---- stop signals ----

namespace {

enum Phase : int { kSetup = 0, kTraining = 1, kExiting = 2 };
std::atomic<int> g_phase{kSetup};
std::atomic<int> g_stop{0};
std::atomic<long long> g_first_ns{0};
char g_who[96] = "";  // "rank 1 of 2: ", written before the handlers are installed

long long now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

// Async-signal-safe output: write(2) of fixed pieces.
void say(const char* s) { (void)!::write(STDERR_FILENO, s, std::strlen(s)); }
const char* short_name(int sig) { return sig == SIGINT ? "SIGINT" : "SIGTERM"; }

// "dscache-train: " WHO, then `before`, the signal's name and `after`; async-signal-safe.
void say_about(const char* before, int sig, const char* after) {
  end_progress_line();  // the message starts a line of its own, not the progress line's end
  say("dscache-train: ");
  say(g_who);
  say(before);
  say(short_name(sig));
  say(after);
}

void on_stop_signal(int sig) {
  const int phase = g_phase.load();
  if (phase == kExiting) return;
  if (phase == kSetup) {
    say_about("stopped by ", sig, " before training started; nothing to save\n");
    ::_exit(128 + sig);
  }
  int expected = 0;
  if (g_stop.compare_exchange_strong(expected, sig)) {
    g_first_ns.store(now_ns());
    say_about("got ", sig,
              ": stopping after the current optimizer step and writing a checkpoint (send it "
              "again to exit at once)\n");
    return;
  }
  if (now_ns() - g_first_ns.load() < 1000000000LL) return;  // the same request, delivered twice
  say_about("second ", sig,
            " while stopping: exiting at once, without a checkpoint (the previous ones are "
            "intact)\n");
  ::_exit(128 + sig);
}

}  // namespace

void install_stop_signals(const std::string& who) {
  std::snprintf(g_who, sizeof g_who, "%s", who.c_str());
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM}) ::sigaction(sig, &sa, nullptr);
  ::signal(SIGXFSZ, SIG_IGN);  // a file-size limit: write() fails with EFBIG, named by the caller
}

void stop_signals_training() { g_phase.store(kTraining); }
void stop_signals_exiting() { g_phase.store(kExiting); }
int stop_requested() { return g_stop.load(); }

std::string signal_name(int sig) {
  if (sig == SIGINT) return "SIGINT";
  if (sig == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(sig);
}

}  // namespace train
}  // namespace dscache
