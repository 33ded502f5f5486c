// c10d's Gloo (or NCCL) process group behind Communicator.
#include "distributed.h"

#include <cstdlib>
#include <string>

#include "dscache/error.h"

#ifdef USE_C10D_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif
// Defined by meson only for a CUDA LibTorch whose NCCL headers compile (the header is empty
// without it, and Debian's CPU LibTorch ships it anyway).
#if defined(USE_C10D_GLOO) && defined(USE_C10D_NCCL)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#define DSCACHE_HAVE_NCCL 1
#endif

namespace dscache {
namespace train {

namespace {

bool env_int(const char* name, long lo, long hi, int* out) {
  const char* v = std::getenv(name);
  if (!v || !*v) return false;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < lo || x > hi) {
    throw UsageError(std::string(name) + "=" + v + ": expected an integer in [" +
                     std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  *out = static_cast<int>(x);
  return true;
}

}  // namespace

DistEnv dist_env_from_environment() {
  DistEnv e;
  env_int("WORLD_SIZE", 1, 1 << 20, &e.world_size);
  env_int("RANK", 0, 1 << 20, &e.rank);
  env_int("LOCAL_RANK", 0, 1 << 16, &e.local_rank);
  if (e.rank >= e.world_size) {
    throw UsageError("RANK=" + std::to_string(e.rank) +
                     " is not below WORLD_SIZE=" + std::to_string(e.world_size));
  }
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) e.master_addr = a;
  const bool have_port = env_int("MASTER_PORT", 1, 65535, &e.master_port);
  if (e.world_size > 1 && !have_port) {
    throw UsageError("MASTER_PORT: required when WORLD_SIZE > 1 (set by torchrun)");
  }
  return e;
}

#ifdef USE_C10D_GLOO
namespace {

class PgCommunicator : public Communicator {
 public:
  PgCommunicator(const DistEnv& env, bool nccl) : rank_(env.rank), world_(env.world_size) {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(env.master_port);
    so.isServer = env.rank == 0;
    so.numWorkers = static_cast<size_t>(env.world_size);
    so.waitWorkers = true;
    so.timeout = std::chrono::minutes(5);
    auto store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
#ifdef DSCACHE_HAVE_NCCL
    if (nccl) {
      pg_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, env.rank, env.world_size);
      backend_ = "nccl";
      return;
    }
#endif
    (void)nccl;
    auto opts = c10d::ProcessGroupGloo::Options::create();
    const bool loopback = env.master_addr == "127.0.0.1" || env.master_addr == "localhost";
    opts->devices.push_back(loopback ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                     : c10d::ProcessGroupGloo::createDefaultDevice());
    pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store, env.rank, env.world_size, opts);
  }

  void allreduce_sum(const std::vector<torch::Tensor>& tensors) override {
    if (tensors.empty()) return;
    std::vector<torch::Tensor> flat_parts;
    for (const auto& t : tensors) flat_parts.push_back(t.reshape({-1}));
    std::vector<torch::Tensor> buf = {torch::cat(flat_parts)};
    ++calls_;
    pg_->allreduce(buf, c10d::AllreduceOptions{})->wait();  // default op: SUM
    int64_t off = 0;
    for (const auto& t : tensors) {
      const int64_t n = t.numel();
      t.copy_(buf[0].slice(0, off, off + n).view_as(t));
      off += n;
    }
  }

  std::function<void()> allreduce_sum_start(torch::Tensor buffer) override {
    ++calls_;
    std::vector<torch::Tensor> one = {buffer};
    c10::intrusive_ptr<c10d::Work> work = pg_->allreduce(one, c10d::AllreduceOptions{});
    return [work] { work->wait(); };
  }
  uint64_t allreduce_calls() const override { return calls_; }
  const char* backend() const override { return backend_; }

  void broadcast(const std::vector<torch::Tensor>& tensors, int root) override {
    for (const auto& t : tensors) {
      std::vector<torch::Tensor> one = {t.is_contiguous() ? t : t.contiguous()};
      c10d::BroadcastOptions bo;
      bo.rootRank = root;
      pg_->broadcast(one, bo)->wait();
      if (!one[0].is_same(t)) t.copy_(one[0]);
    }
  }

  void barrier() override { pg_->barrier()->wait(); }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }

 private:
  int rank_, world_;
  const char* backend_ = "gloo";
  uint64_t calls_ = 0;
  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
};

}  // namespace
#endif

const char* backend_for(DeviceKind device) {
#ifdef DSCACHE_HAVE_NCCL
  if (device == DeviceKind::kCuda) return "nccl";
#endif
  (void)device;
  return "gloo";
}

std::unique_ptr<Communicator> make_communicator(const DistEnv& env, DeviceKind device) {
  if (env.world_size <= 1) return nullptr;
#ifdef USE_C10D_GLOO
  return std::make_unique<PgCommunicator>(env, std::string(backend_for(device)) == "nccl");
#else
  throw Error(ErrorKind::kUnsupported, "",
              "WORLD_SIZE > 1 needs a dscache-train built with Gloo (libgloo-dev)");
#endif
}

}  // namespace train
}  // namespace dscache
