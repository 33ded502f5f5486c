// Data parallel across processes: torchrun's environment variables, a c10d process group (Gloo),
// and the few collectives the training loop needs.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "options.h"
#include "rank_env.h"

namespace dscache {
namespace train {

// torchrun's or Slurm's variables (rank_env.h), read from the process's environment; throws
// UsageError naming a malformed one.
DistEnv dist_env_from_environment();

// The collectives of one data-parallel group. Blocking calls; one training thread.
class Communicator {
 public:
  virtual ~Communicator() = default;
  // Sums `tensors` over all ranks in place, as one flattened buffer (one collective).
  virtual void allreduce_sum(const std::vector<torch::Tensor>& tensors) = 0;
  // Starts summing the contiguous `buffer` over all ranks in place, without blocking; call the
  // returned function to wait for it. Every rank must start the same collectives in the same
  // order.
  virtual std::function<void()> allreduce_sum_start(torch::Tensor buffer) = 0;
  // All-reduce collectives started so far (allreduce_sum and allreduce_sum_start): for tests.
  virtual uint64_t allreduce_calls() const = 0;
  // "gloo" or "nccl".
  virtual const char* backend() const = 0;
  // Copies rank `root`'s values of `tensors` to every rank, in place.
  virtual void broadcast(const std::vector<torch::Tensor>& tensors, int root) = 0;
  virtual void barrier() = 0;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
};

// The group could not form or broke: a rank missing at rendezvous, rank 0's store unreachable,
// a peer gone or silent for longer than the timeout: ExitCode::kDistributed.
class DistributedError : public std::runtime_error, public ExitsWith<ExitCode::kDistributed> {
 public:
  using std::runtime_error::runtime_error;
};

// The c10d backend for training on `device`: "nccl" for cuda when this build has NCCL (a CUDA
// LibTorch via -Dtorch_dir), "gloo" otherwise.
const char* backend_for(DeviceKind device);

// A group of backend_for(device) over TCP (rank 0 hosts the TCPStore), or nullptr when
// world_size is 1. Throws DistributedError at once when env.master_addr does not resolve
// (master_addr_unresolvable). Waits at most `timeout` for all ranks to join (rank 0 prints who
// joined while it waits, then throws DistributedError naming the missing ranks); the same
// `timeout` bounds every collective, Gloo's and NCCL's. Throws Error(kUnsupported) when built
// without Gloo and world_size > 1.
std::unique_ptr<Communicator> make_communicator(const DistEnv& env, std::chrono::seconds timeout,
                                                DeviceKind device = DeviceKind::kCpu);

}  // namespace train
}  // namespace dscache
