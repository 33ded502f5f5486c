// Private mmap/file helpers for the Cache: see mapped_file.h.
#include "read/mapped_file.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <atomic>
#include <csetjmp>
#include <csignal>
#include <cstring>
#include <limits>
#include <mutex>

#include "dscache/error.h"

namespace dscache {
namespace detail {

MappedRegion::MappedRegion(MappedRegion&& o) noexcept : addr_(o.addr_), size_(o.size_) {
  o.addr_ = nullptr;
  o.size_ = 0;
}

MappedRegion& MappedRegion::operator=(MappedRegion&& o) noexcept {
  if (this != &o) {
    reset();
    addr_ = o.addr_;
    size_ = o.size_;
    o.addr_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

MappedRegion::~MappedRegion() { reset(); }

void MappedRegion::reset() {
  if (addr_ != nullptr) ::munmap(addr_, static_cast<size_t>(size_));
  addr_ = nullptr;
  size_ = 0;
}

MappedRegion MappedRegion::map_fd(int fd, const std::string& path, uint64_t expected_bytes) {
  if (expected_bytes == 0) {
    throw Error(ErrorKind::kInvalidArgument, path, "refusing to map an empty file");
  }
  if (expected_bytes > std::numeric_limits<size_t>::max()) {
    throw Error(ErrorKind::kUnsupported, path, "file is larger than the address space");
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) throw_errno(path, "stat");
  // Checked again on the very descriptor we map: the file may have changed since it was opened.
  if (!S_ISREG(st.st_mode)) throw Error(ErrorKind::kCorruption, path, "not a regular file");
  if (static_cast<uint64_t>(st.st_size) != expected_bytes) {
    throw Error(ErrorKind::kCorruption, path,
                "file holds " + std::to_string(st.st_size) + " bytes, manifest says " +
                    std::to_string(expected_bytes));
  }
  void* addr = ::mmap(nullptr, static_cast<size_t>(expected_bytes), PROT_READ, MAP_SHARED, fd, 0);
  if (addr == MAP_FAILED) throw_errno(path, "mmap");
  MappedRegion r;
  r.addr_ = addr;
  r.size_ = expected_bytes;
  return r;
}

MappedRegion MappedRegion::anonymous(uint64_t bytes, const std::string& what) {
  if (bytes == 0) throw Error(ErrorKind::kInvalidArgument, what, "refusing to map 0 bytes");
  if (bytes > std::numeric_limits<size_t>::max()) {
    throw Error(ErrorKind::kUnsupported, what, "copy is larger than the address space");
  }
  void* addr = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (addr == MAP_FAILED) throw_errno(what, "mmap " + std::to_string(bytes) + " private bytes");
  MappedRegion r;
  r.addr_ = addr;
  r.size_ = bytes;
  return r;
}

void MappedRegion::advise(int advice) const {
  if (addr_ != nullptr) ::madvise(addr_, static_cast<size_t>(size_), advice);
}

void MappedRegion::protect_read_only() {
  if (addr_ != nullptr) ::mprotect(addr_, static_cast<size_t>(size_), PROT_READ);
}

// SIGBUS from a truncated mapping. Checking the file's size before each copy would cost an
// fstat per sample and still race with the truncation; a handler costs nothing until the fault.
// Only a thread inside guarded_copy has a jump target (thread_local, set before the copy, so the
// handler reads an already-allocated slot); any other SIGBUS is handed to the previous handler.
namespace {

thread_local sigjmp_buf* t_sigbus_target = nullptr;
struct sigaction g_previous_sigbus;

void on_sigbus(int sig, siginfo_t* info, void* context) {
  if (t_sigbus_target != nullptr) siglongjmp(*t_sigbus_target, 1);
  // Not ours: restore what was there and let the fault happen again under it.
  ::sigaction(SIGBUS, &g_previous_sigbus, nullptr);
  if (!(g_previous_sigbus.sa_flags & SA_SIGINFO) && g_previous_sigbus.sa_handler != SIG_DFL &&
      g_previous_sigbus.sa_handler != SIG_IGN) {
    g_previous_sigbus.sa_handler(sig);
  } else if ((g_previous_sigbus.sa_flags & SA_SIGINFO) && g_previous_sigbus.sa_sigaction) {
    g_previous_sigbus.sa_sigaction(sig, info, context);
  }
  // Returning re-runs the faulting instruction, which now meets the previous disposition.
}

void install_sigbus_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_previous_sigbus);
  });
}

}  // namespace

void guarded_copy(void* dst, const void* src, size_t n, const std::string& path) {
  install_sigbus_handler();
  sigjmp_buf target;
  sigjmp_buf* const outer = t_sigbus_target;
  // No saved mask (a syscall per copy): SA_NODEFER leaves SIGBUS unblocked after the jump.
  if (sigsetjmp(target, 0) != 0) {
    t_sigbus_target = outer;
    throw Error(ErrorKind::kCorruption, path,
                "file shrank while mapped (truncated by another process?): a read past its new "
                "end raised SIGBUS");
  }
  t_sigbus_target = &target;
  // Without the fences the compiler may drop the store above: memcpy does not read it, and the
  // store below overwrites it. The signal handler does read it.
  std::atomic_signal_fence(std::memory_order_seq_cst);
  std::memcpy(dst, src, n);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_sigbus_target = outer;
}

}  // namespace detail
}  // namespace dscache
