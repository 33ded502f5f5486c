// c10d's Gloo (or NCCL) process group behind Communicator.
#include "distributed.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

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

DistEnv dist_env_from_environment() {
  return dist_env_from([](const char* name) -> const char* { return std::getenv(name); });
}

#ifdef USE_C10D_GLOO
namespace {

// Rank 0 hosts the TCPStore; every rank announces itself with a key of its own, so that rank 0
// can say who is missing (the store's own wait for workers only counts connections, silently).
// Rank 0 prints how many joined every 10 s; after `timeout` it throws naming the missing ranks.
c10::intrusive_ptr<c10d::Store> rendezvous(const DistEnv& env, std::chrono::seconds timeout) {
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(env.master_port);
  so.isServer = env.rank == 0 && !env.agent_store;  // else torchrun's agent hosts it
  so.waitWorkers = false;
  so.timeout = timeout;
  c10::intrusive_ptr<c10d::TCPStore> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
  } catch (const std::exception& e) {
    const std::string first_line =
        std::string(e.what()).substr(0, std::string(e.what()).find('\n'));
    throw DistributedError(
        so.isServer ? "rendezvous: cannot host the TCPStore on " + where + ": " + first_line
                    : "rendezvous: rank " + std::to_string(env.rank) +
                          " could not reach rank 0's TCPStore at " + where + " within " +
                          std::to_string(timeout.count()) + " s (--dist-timeout): " + first_line);
  }
  store->set("dscache/joined/" + std::to_string(env.rank), std::vector<uint8_t>{1});
  if (env.rank != 0) return store;
  const auto start = std::chrono::steady_clock::now();
  auto next_report = start + std::chrono::seconds(10);
  for (;;) {
    std::vector<int> missing;
    for (int r = 1; r < env.world_size; ++r) {
      if (!store->check({"dscache/joined/" + std::to_string(r)})) missing.push_back(r);
    }
    if (missing.empty()) return store;
    auto list = [&] {
      std::string s;
      for (size_t i = 0; i < missing.size() && i < 16; ++i) {
        s += (i ? ", " : "") + std::to_string(missing[i]);
      }
      return s + (missing.size() > 16 ? ", ..." : "");
    };
    const auto now = std::chrono::steady_clock::now();
    const int joined = env.world_size - static_cast<int>(missing.size());
    if (now - start >= timeout) {
      throw DistributedError("rendezvous: " + std::to_string(joined) + " of " +
                             std::to_string(env.world_size) + " ranks joined at " + where +
                             " within " + std::to_string(timeout.count()) +
                             " s (--dist-timeout); missing rank(s): " + list());
    }
    if (now >= next_report) {
      std::fprintf(stderr,
                   "dscache-train: rendezvous at %s: %d of %d ranks joined; waiting for %s\n",
                   where.c_str(), joined, env.world_size, list().c_str());
      next_report += std::chrono::seconds(10);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

class PgCommunicator : public Communicator {
 public:
  PgCommunicator(const DistEnv& env, std::chrono::seconds timeout, bool nccl)
      : rank_(env.rank), world_(env.world_size) {
    auto store = rendezvous(env, timeout);
#ifdef DSCACHE_HAVE_NCCL
    if (nccl) {
      auto nopts = c10d::ProcessGroupNCCL::Options::create();
      nopts->timeout = timeout;  // the watchdog's limit on every collective
      pg_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, env.rank, env.world_size, nopts);
      backend_ = "nccl";
      return;
    }
#endif
    (void)nccl;
    auto opts = c10d::ProcessGroupGloo::Options::create();
    opts->timeout = timeout;  // every collective; Gloo's default is 30 minutes
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

std::unique_ptr<Communicator> make_communicator(const DistEnv& env, std::chrono::seconds timeout,
                                                DeviceKind device) {
  if (env.world_size <= 1) return nullptr;
#ifdef USE_C10D_GLOO
  const std::string backend = backend_for(device);
  // A localhost name is the loopback address even where the resolver lacks it (RFC 6761).
  DistEnv rendezvous = env;
  rendezvous.master_addr = rendezvous_host(env.master_addr);
  // Before c10d, which retries a name that does not resolve until the timeout, warning each second.
  if (const std::string bad = master_addr_unresolvable(rendezvous); !bad.empty()) {
    throw DistributedError(bad);
  }
  try {
    return std::make_unique<PgCommunicator>(rendezvous, timeout, backend == "nccl");
  } catch (const DistributedError&) {
    throw;
  } catch (const std::exception& e) {  // the store's host (rank 0) went away, a peer vanished...
    const std::string what = e.what();
    throw DistributedError(
        "rendezvous: forming the " + backend + " group of " + std::to_string(env.world_size) +
        " ranks failed (rank 0 or another " +
        "rank exited, or did not join within --dist-timeout): " + what.substr(0, what.find('\n')));
  }
#else
  throw Error(ErrorKind::kUnsupported, "",
              "WORLD_SIZE > 1 needs a dscache-train built with Gloo (libgloo-dev)");
#endif
}

}  // namespace train
}  // namespace dscache
