// PathLock: flock(LOCK_EX | LOCK_NB) on a file beside the target that names its holder.
#include "dscache/lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace dscache {
namespace {

// A JSON string literal (the command line may hold quotes or backslashes).
std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string holder_text(const std::string& command) {
  char host[HOST_NAME_MAX + 1] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return "{\"pid\": " + std::to_string(::getpid()) + ", \"host\": " + json_quote(host) +
         ", \"started_utc\": \"" + when + "\", \"command\": " + json_quote(command) + "}\n";
}

std::string read_all(int fd) {
  std::string text;
  char buf[4096];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    at += n;
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  return text;
}

// "pid 123 on host h since T (command)" from the holder's JSON, without a JSON library: the
// file is ours and flat. Falls back to the raw text.
std::string describe(const std::string& holder) {
  auto field = [&](const std::string& key) -> std::string {
    const std::string k = "\"" + key + "\": ";
    const size_t at = holder.find(k);
    if (at == std::string::npos) return "";
    size_t v = at + k.size();
    if (v < holder.size() && holder[v] == '"') {
      std::string out;
      for (++v; v < holder.size() && holder[v] != '"'; ++v) {
        if (holder[v] == '\\' && v + 1 < holder.size()) ++v;
        out += holder[v];
      }
      return out;
    }
    const size_t end = holder.find_first_of(",}", v);
    return holder.substr(v, end == std::string::npos ? std::string::npos : end - v);
  };
  const std::string pid = field("pid");
  if (pid.empty()) return holder.empty() ? "another process" : holder;
  return "pid " + pid + " on host " + field("host") + " since " + field("started_utc") + " (" +
         field("command") + ")";
}

}  // namespace

std::string lock_path_for(const std::string& target) {
  std::string t = target;
  while (t.size() > 1 && t.back() == '/') t.pop_back();
  const size_t slash = t.find_last_of('/');
  if (slash == std::string::npos) return "." + t + ".lock";
  return t.substr(0, slash + 1) + "." + t.substr(slash + 1) + ".lock";
}

LockedError::LockedError(std::string lock_path, std::string holder, std::string reason)
    : Error(ErrorKind::kBusy, std::move(lock_path), std::move(reason)),
      holder_(std::move(holder)) {}

std::unique_ptr<PathLock> PathLock::acquire(const std::string& target, const std::string& command) {
  const std::string path = lock_path_for(target);
  // The holder removes the file on release; whoever locked the removed inode retries on the
  // file now at `path`, so two processes never both believe they hold the lock.
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) throw_errno(path, "cannot create the lock file");
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err == EINTR) {
        ::close(fd);
        continue;
      }
      if (err != EWOULDBLOCK) {
        ::close(fd);
        errno = err;
        throw_errno(path, "cannot lock");
      }
      const std::string holder = read_all(fd);
      ::close(fd);
      throw LockedError(path, holder,
                        "locked by " + describe(holder) + ": another dscache process is writing " +
                            target +
                            "; wait for it to finish (a lock whose holder died is released "
                            "with it)");
    }
    struct stat held, now;
    if (::fstat(fd, &held) != 0 || ::stat(path.c_str(), &now) != 0 || held.st_dev != now.st_dev ||
        held.st_ino != now.st_ino) {
      ::close(fd);  // released and removed meanwhile: lock the file that is there now
      continue;
    }
    // Best effort: the flock is the lock; the text only names the holder (a full disk must
    // not stop a build from reporting that it is full).
    const std::string text = holder_text(command);
    if (::ftruncate(fd, 0) == 0) {
      [[maybe_unused]] const ssize_t n = ::pwrite(fd, text.data(), text.size(), 0);
    }
    return std::unique_ptr<PathLock>(new PathLock(path, fd));
  }
  throw Error(ErrorKind::kIOError, path, "cannot lock: the lock file keeps being replaced");
}

PathLock::~PathLock() {
  ::unlink(path_.c_str());
  ::close(fd_);
}

}  // namespace dscache
