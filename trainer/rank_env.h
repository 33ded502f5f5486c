// Which rank of how many this process is, and where rank 0 listens: from torchrun's variables,
// or from Slurm's when the process is a task of a job step (`srun dscache-train`). No LibTorch.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace dscache {
namespace train {

struct DistEnv {
  int rank = 0;        // RANK (or SLURM_PROCID); default 0
  int world_size = 1;  // WORLD_SIZE (or SLURM_STEP_NUM_TASKS); default 1
  int local_rank = 0;  // LOCAL_RANK (or SLURM_LOCALID): the CUDA device index on this node
  std::string master_addr = "127.0.0.1";  // MASTER_ADDR: where rank 0's TCPStore listens
  // The variable master_addr came from, for messages: "MASTER_ADDR", "SLURM_STEP_NODELIST" or
  // "SLURM_JOB_NODELIST" (its first host); "" for the default.
  std::string master_addr_from;
  int master_port = 29500;  // MASTER_PORT
  // TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent already hosts a TCPStore at
  // MASTER_ADDR:MASTER_PORT (its static rendezvous, --master_addr/--master_port); every rank,
  // rank 0 included, joins it as a client, as torch.distributed does. Default false.
  bool agent_store = false;
  // Where these came from, for the start-up line: "" (a single process, nothing set),
  // "torchrun variables", or "Slurm (SLURM_PROCID, ...)".
  std::string source;
  // A Slurm batch script that asked for several tasks but started this process without srun:
  // what to do about it (the process runs alone).
  std::string note;
};

// Reads the process's variables through `get` (std::getenv in production). Explicit torch
// variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) win. Otherwise, in a Slurm
// job step (SLURM_STEP_NUM_TASKS set): rank SLURM_PROCID, world SLURM_STEP_NUM_TASKS, local rank
// SLURM_LOCALID, master the first host of SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST) unless
// MASTER_ADDR is set, port MASTER_PORT or 20000 + SLURM_JOB_ID % 10000 (every task of a job
// agrees on it). Throws UsageError naming a malformed variable (RANK >= WORLD_SIZE, a port out of
// range, WORLD_SIZE > 1 without MASTER_PORT, a bad host list...).
DistEnv dist_env_from(const std::function<const char*(const char*)>& get);

// The hosts of a Slurm host list, in order, as `scontrol show hostnames` prints them:
// "node[01-03,7],gpu-a,rack[1-2]-n[1-2]" -> node01 node02 node03 node7 gpu-a rack1-n1 rack1-n2
// rack2-n1 rack2-n2 (ranges keep their zero padding). Throws UsageError naming `variable` when
// the list is malformed (an unclosed bracket, a reversed or empty range).
std::vector<std::string> expand_hostlist(const std::string& list, const std::string& variable);

// Whether `env.master_addr` resolves (getaddrinfo, TCP): "" when it does, else what to say: the
// variable it came from, the name and the resolver's message. Checked before the rendezvous
// because c10d's TCPStore retries a name that does not resolve once a second, warning each
// time, until --dist-timeout (600 s by default) runs out.
std::string master_addr_unresolvable(const DistEnv& env);

// Whether `host` resolves (getaddrinfo, TCP).
bool host_resolves(const std::string& host);

// This machine's host name (gethostname); "" when it has none.
std::string own_hostname();

// The host the rendezvous uses for `host`: `host` itself, except a name `resolves` says does not
// resolve that still names this machine, which is 127.0.0.1: a localhost name ("localhost", or
// one ending in ".localhost", any case: RFC 6761 makes them the loopback address whatever the
// resolver says), or this machine's own host name `own` (or its first label), as glibc's
// nss-myhostname answers it. A minimal system without /etc/hosts (debootstrap --variant=minbase,
// slim containers) resolves neither, and c10d's TCPStore then cannot either; a rank on another
// machine still needs a name that resolves.
std::string rendezvous_host(const std::string& host,
                            bool (*resolves)(const std::string&) = host_resolves,
                            std::string (*own)() = own_hostname);

}  // namespace train
}  // namespace dscache
