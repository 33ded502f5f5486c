// The single-node launcher: fork/exec of the ranks and their supervision.
#include "launch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace dscache {
namespace train {

namespace {

volatile sig_atomic_t g_signal = 0;  // the first SIGINT/SIGTERM/SIGHUP the launcher got
volatile sig_atomic_t g_again = 0;   // a later one, at least 1 s after it
long long g_first_ns = 0;

long long now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

void on_signal(int sig) {
  if (!g_signal) {
    g_first_ns = now_ns();
    g_signal = sig;
  } else if (now_ns() - g_first_ns >= 1000000000LL) {
    g_again = sig;
  }
}

// A TCP port on 127.0.0.1 free a moment ago (rank 0's TCPStore binds it next).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    throw std::runtime_error("cannot find a free port on 127.0.0.1: " + why);
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string random_run_id() {
  std::random_device rd;
  char buf[33];
  std::snprintf(buf, sizeof buf, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return buf;
}

// "exited with code 3" / "was killed by signal 9 (Killed)", and the launcher's exit code for it.
std::string describe(int status, int* code) {
  if (WIFEXITED(status)) {
    *code = WEXITSTATUS(status);
    return "exited with code " + std::to_string(*code);
  }
  const int sig = WTERMSIG(status);
  *code = 128 + sig;
  return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
}

// What a launched rank is told: torchrun's variables for rank `rank` of `world` on one node.
struct RankEnv {
  std::string world;   // WORLD_SIZE and the other sizes
  std::string port;    // MASTER_PORT
  std::string run_id;  // TORCHELASTIC_RUN_ID
};

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

// In the forked child: becomes rank `r` (exec of /proc/self/exe with `argv`); never returns.
[[noreturn]] void exec_rank(int r, const RankEnv& env, pid_t launcher, char* const* argv) {
  // A rank must not outlive its launcher (SIGKILLed launcher: no one else would stop it).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(1);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_DFL);
  const std::string rs = std::to_string(r);
  for (const char* name : {"RANK", "LOCAL_RANK", "ROLE_RANK"}) ::setenv(name, rs.c_str(), 1);
  for (const char* name : {"WORLD_SIZE", "LOCAL_WORLD_SIZE", "ROLE_WORLD_SIZE"}) {
    ::setenv(name, env.world.c_str(), 1);
  }
  ::setenv("GROUP_RANK", "0", 1);
  ::setenv("GROUP_WORLD_SIZE", "1", 1);
  ::setenv("ROLE_NAME", "default", 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", env.port.c_str(), 1);
  ::setenv("TORCHELASTIC_RUN_ID", env.run_id.c_str(), 1);
  ::setenv("TORCHELASTIC_RESTART_COUNT", "0", 1);
  ::setenv("TORCHELASTIC_MAX_RESTARTS", "0", 1);
  ::setenv("TORCHELASTIC_USE_AGENT_STORE", "False", 1);
  ::setenv("OMP_NUM_THREADS", "1", 0);  // torchrun's default: only when unset
  ::execv("/proc/self/exe", argv);
  std::fprintf(stderr, "dscache-train: rank %d: cannot execute /proc/self/exe: %s\n", r,
               std::strerror(errno));
  ::_exit(127);
}

// Forks and execs the `nproc` ranks; their pids by rank.
std::vector<pid_t> start_ranks(int nproc, const RankEnv& env,
                               const std::vector<std::string>& child_args) {
  std::vector<std::string> argv_s = {"/proc/self/exe"};
  argv_s.insert(argv_s.end(), child_args.begin(), child_args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t self = ::getpid();
  std::vector<pid_t> pids(nproc, -1);
  for (int r = 0; r < nproc; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) exec_rank(r, env, self, argv.data());
    pids[r] = pid;
  }
  return pids;
}

// The launcher's watch over its running ranks: who is left, what it will return, and which
// stop (a failed rank's, a forwarded signal's) is under way with its SIGKILL deadline.
class Supervisor {
 public:
  Supervisor(std::vector<pid_t> pids, int grace_seconds, int stop_grace_seconds)
      : pids_(std::move(pids)),
        running_(static_cast<int>(pids_.size())),
        grace_seconds_(grace_seconds),
        stop_grace_seconds_(stop_grace_seconds) {}

  int run() {
    while (running_ > 0) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid > 0) {
        reap(pid, status);
        continue;
      }
      if (pid < 0 && errno != EINTR) break;
      if (g_signal && !stopping_ && !forwarded_) forward_signal();
      if (g_again && !killed_) kill_on_second_signal();
      if ((stopping_ || forwarded_) && std::chrono::steady_clock::now() >= kill_deadline_) {
        kill_after_grace();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (forwarded_ && result_ == 0) {
      std::fprintf(stderr, "dscache-train: every rank completed the run despite signal %d\n",
                   static_cast<int>(g_signal));
    }
    return result_;
  }

 private:
  void stop_all(int sig) {
    for (pid_t p : pids_) {
      if (p > 0) ::kill(p, sig);
    }
  }

  // A rank ended with `status`: the first failure stops the others (unless a signal already
  // stops them all, then it is the ranks' own verdict: 128 + N after a checkpoint, 3, 137...).
  void reap(pid_t pid, int status) {
    const int nproc = static_cast<int>(pids_.size());
    int r = 0;
    while (r < nproc && pids_[r] != pid) ++r;
    if (r == nproc) return;
    pids_[r] = -1;
    --running_;
    int code = 0;
    const std::string what = describe(status, &code);
    if (forwarded_) {
      if (code != 0 && result_ == 0) result_ = code;
      if (code != 0 && code != 128 + g_signal && !stopping_) {
        std::fprintf(stderr, "dscache-train: rank %d (pid %d) %s while stopping\n", r,
                     static_cast<int>(pid), what.c_str());
      }
      return;
    }
    if (code != 0 && !stopping_) {
      result_ = code;
      std::fprintf(stderr, "dscache-train: rank %d (pid %d) %s; stopping the other %d rank(s)\n", r,
                   static_cast<int>(pid), what.c_str(), running_);
    }
    if (code != 0 && !stopping_ && running_ > 0) {
      stopping_ = true;
      stop_all(SIGTERM);
      kill_deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(grace_seconds_);
    }
  }

  // SIGINT and SIGTERM are forwarded as they came (SIGHUP as SIGTERM): each rank finishes
  // its step, rank 0 writes a checkpoint, and they exit 128 + N, which becomes ours.
  void forward_signal() {
    const int sig = g_signal == SIGINT ? SIGINT : SIGTERM;
    std::fprintf(stderr,
                 "dscache-train: got signal %d (%s); forwarding %s to %d rank(s): they stop "
                 "after the current step and write a checkpoint (signal again to kill them)\n",
                 static_cast<int>(g_signal), strsignal(g_signal),
                 sig == SIGINT ? "SIGINT" : "SIGTERM", running_);
    forwarded_ = true;
    stop_all(sig);
    kill_deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(stop_grace_seconds_);
  }

  void kill_on_second_signal() {
    std::fprintf(stderr, "dscache-train: signal %d again: killing %d rank(s) now\n",
                 static_cast<int>(g_again), running_);
    stop_all(SIGKILL);
    killed_ = true;
    if (result_ == 0) result_ = 128 + g_again;
    kill_deadline_ = std::chrono::steady_clock::time_point::max();
  }

  void kill_after_grace() {
    std::fprintf(stderr, "dscache-train: %d rank(s) still running %d s after the signal: SIGKILL\n",
                 running_, forwarded_ ? stop_grace_seconds_ : grace_seconds_);
    stop_all(SIGKILL);
    kill_deadline_ = std::chrono::steady_clock::time_point::max();
  }

  std::vector<pid_t> pids_;  // by rank; -1 once reaped
  int running_;
  const int grace_seconds_, stop_grace_seconds_;
  int result_ = 0;
  bool stopping_ = false;   // a rank failed: the others get SIGTERM, then SIGKILL
  bool forwarded_ = false;  // a signal came: the ranks stop at a step and checkpoint
  bool killed_ = false;
  std::chrono::steady_clock::time_point kill_deadline_ =
      std::chrono::steady_clock::time_point::max();
};

}  // namespace

std::vector<std::string> strip_nproc_option(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--nproc-per-node") {
      ++i;  // and its value
    } else if (args[i].rfind("--nproc-per-node=", 0) != 0) {
      out.push_back(args[i]);
    }
  }
  return out;
}

int launch_local(int nproc, const std::vector<std::string>& child_args, int grace_seconds,
                 int stop_grace_seconds) {
  const RankEnv env{std::to_string(nproc), std::to_string(free_port()), random_run_id()};
  install_signal_handlers();
  return Supervisor(start_ranks(nproc, env, child_args), grace_seconds, stop_grace_seconds).run();
}

}  // namespace train
}  // namespace dscache
