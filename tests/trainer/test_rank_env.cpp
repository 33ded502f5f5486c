// dist_env_from: torchrun's variables, a Slurm job step's, and which wins (suite unit, no
// LibTorch).
#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "dscache/exit_codes.h"
#include "rank_env.h"

namespace {

using dscache::train::dist_env_from;
using dscache::train::DistEnv;
using dscache::train::expand_hostlist;
using dscache::train::host_resolves;
using dscache::train::master_addr_unresolvable;
using dscache::train::rendezvous_host;
using Env = std::map<std::string, std::string>;

DistEnv from(const Env& env) {
  return dist_env_from([&](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

// What srun sets for task `procid` of a 2-task step on `nodes` (job 4242).
Env srun_task(int procid, const std::string& nodes) {
  return {{"SLURM_JOB_ID", "4242"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_PROCID", std::to_string(procid)},
          {"SLURM_LOCALID", std::to_string(procid % 2)},
          {"SLURM_STEP_NUM_TASKS", "2"},
          {"SLURM_NTASKS", "2"},
          {"SLURM_STEP_NODELIST", nodes},
          {"SLURM_JOB_NODELIST", "other[1-9]"}};
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("rank env: Slurm host lists expand as scontrol show hostnames does") {
    struct Case {
      const char* list;
      std::vector<std::string> hosts;
    };
    const Case cases[] = {
        {"node7", {"node7"}},
        {"node[01-03,7]", {"node01", "node02", "node03", "node7"}},
        {"a,b[8-10],c", {"a", "b8", "b9", "b10", "c"}},
        {"rack[1-2]-n[1-2]", {"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"}},
        {"gpu-[009-011]", {"gpu-009", "gpu-010", "gpu-011"}},
    };
    for (const Case& c : cases) {
      CAPTURE(c.list);
      CHECK(expand_hostlist(c.list, "SLURM_STEP_NODELIST") == c.hosts);
    }
    for (const char* bad : {"node[1-3", "node[3-1]", "node[a-b]", "a,,b", "n1]"}) {
      CAPTURE(bad);
      const std::string want = std::string("SLURM_JOB_NODELIST=") + bad;
      CHECK_THROWS_WITH_AS(expand_hostlist(bad, "SLURM_JOB_NODELIST"),
                           doctest::Contains(want.c_str()), dscache::UsageError);
    }
  }

  TEST_CASE("rank env: a Slurm job step gives rank, world, local rank, master and port") {
    const DistEnv e = from(srun_task(1, "cn[07-08]"));
    CHECK(e.rank == 1);
    CHECK(e.world_size == 2);
    CHECK(e.local_rank == 1);
    CHECK(e.master_addr == "cn07");  // the step's first node, not the job's
    CHECK(e.master_port == 20000 + 4242 % 10000);
    CHECK(e.source.find("Slurm (SLURM_PROCID") == 0);
    // MASTER_ADDR / MASTER_PORT still win.
    Env env = srun_task(0, "cn[07-08]");
    env["MASTER_ADDR"] = "head";
    env["MASTER_PORT"] = "31000";
    const DistEnv m = from(env);
    CHECK(m.master_addr == "head");
    CHECK(m.master_port == 31000);
    // Without a step node list: the job's.
    env = srun_task(0, "x");
    env.erase("SLURM_STEP_NODELIST");
    CHECK(from(env).master_addr == "other1");
  }

  TEST_CASE("rank env: torchrun's variables win; a batch script without srun runs alone") {
    Env env = srun_task(1, "cn[07-08]");
    env["RANK"] = "3";
    env["WORLD_SIZE"] = "4";
    env["LOCAL_RANK"] = "0";
    env["MASTER_PORT"] = "29501";
    const DistEnv t = from(env);
    CHECK(t.rank == 3);
    CHECK(t.world_size == 4);
    CHECK(t.master_addr == "127.0.0.1");
    CHECK(t.source.find("torchrun") == 0);
    // The batch script itself: SLURM_NTASKS=4, no step variables. One process, with a warning.
    const DistEnv batch =
        from({{"SLURM_JOB_ID", "7"}, {"SLURM_NTASKS", "4"}, {"SLURM_PROCID", "0"}});
    CHECK(batch.world_size == 1);
    CHECK(batch.source.empty());
    CHECK(batch.note.find("SLURM_NTASKS=4 but this process was not started by srun") == 0);
    CHECK(from({}).world_size == 1);
    CHECK(from({}).note.empty());
    // A one-task step needs no master.
    CHECK(from({{"SLURM_STEP_NUM_TASKS", "1"}, {"SLURM_PROCID", "0"}}).world_size == 1);
  }

  TEST_CASE("rank env: malformed variables are usage errors naming them") {
    struct Case {
      Env env;
      const char* says;
    };
    Env past = srun_task(0, "n1");
    past["SLURM_PROCID"] = "2";
    Env no_job = srun_task(0, "n1");
    no_job.erase("SLURM_JOB_ID");
    const Case cases[] = {
        {past, "SLURM_PROCID=2 is not below SLURM_STEP_NUM_TASKS=2"},
        {no_job, "MASTER_PORT: not set, nor SLURM_JOB_ID"},
        {{{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}, "RANK=2 is not below"},
        {{{"RANK", "0"}, {"WORLD_SIZE", "2"}}, "MASTER_PORT: required when WORLD_SIZE > 1"},
        {{{"WORLD_SIZE", "two"}}, "WORLD_SIZE=two: expected an integer"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.says);
      CHECK_THROWS_WITH_AS(from(c.env), doctest::Contains(c.says), dscache::UsageError);
    }
  }

  TEST_CASE("rank env: a master host that does not resolve is named with its variable (issue 38)") {
    // No rendezvous: c10d would retry the name once a second until --dist-timeout.
    Env env = {{"RANK", "1"},
               {"WORLD_SIZE", "2"},
               {"MASTER_PORT", "29501"},
               {"MASTER_ADDR", "no-such-host.invalid"}};
    const std::string torch = master_addr_unresolvable(from(env));
    CHECK(torch.find("rendezvous: MASTER_ADDR=no-such-host.invalid does not resolve (") == 0);
    CHECK(torch.find("set MASTER_ADDR to rank 0's address") != std::string::npos);
    // A Slurm step's first node: the variable it came from.
    const std::string slurm = master_addr_unresolvable(from(srun_task(0, "nohost[1-2].invalid")));
    CHECK(slurm.find("SLURM_STEP_NODELIST's first host 'nohost1.invalid'") != std::string::npos);
    // What resolves says nothing: an address, and the default.
    env["MASTER_ADDR"] = "127.0.0.1";
    CHECK(master_addr_unresolvable(from(env)).empty());
    env.erase("MASTER_ADDR");
    CHECK(from(env).master_addr_from.empty());
    CHECK(master_addr_unresolvable(from(env)).empty());
  }

  TEST_CASE("rank env: torchrun's static rendezvous hosts the store in its agent") {
    Env env = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29501"}};
    CHECK_FALSE(from(env).agent_store);  // --standalone, c10d rendezvous: rank 0 hosts it
    env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
    CHECK(from(env).agent_store);
    env["TORCHELASTIC_USE_AGENT_STORE"] = "False";
    CHECK_FALSE(from(env).agent_store);
  }

  TEST_CASE("rank env: a localhost name is the loopback address where the resolver lacks it") {
    // A minimal Debian without /etc/hosts resolves no 'localhost' (seen: the Slurm case failed
    // there); RFC 6761 makes it 127.0.0.1 all the same.
    auto never = [](const std::string&) { return false; };
    auto always = [](const std::string&) { return true; };
    for (const char* name : {"localhost", "LocalHost", "localhost.", "rank0.localhost"}) {
      CAPTURE(name);
      CHECK(rendezvous_host(name, never) == "127.0.0.1");
      CHECK(rendezvous_host(name, always) == name);  // a resolver that knows it has the say
    }
    // This machine's own name (a Slurm node list names it) is this machine, as nss-myhostname
    // answers; any other name must resolve.
    auto node7 = []() { return std::string("node7.cluster"); };
    for (const char* name : {"node7", "NODE7.cluster", "node7.cluster."}) {
      CAPTURE(name);
      CHECK(rendezvous_host(name, never, node7) == "127.0.0.1");
      CHECK(rendezvous_host(name, always, node7) == name);
    }
    for (const char* name : {"no-such-host.invalid", "notlocalhost", "localhost.example", "node8",
                             "node7.other", "node"}) {
      CAPTURE(name);
      CHECK(rendezvous_host(name, never, node7) == name);
    }
    // On this machine, whatever its /etc/hosts: the host the rendezvous gets for localhost
    // resolves.
    CHECK(host_resolves(rendezvous_host("localhost")));
  }
}
