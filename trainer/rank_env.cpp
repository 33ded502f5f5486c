// torchrun's and Slurm's variables into a DistEnv.
#include "rank_env.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "dscache/exit_codes.h"

namespace dscache {
namespace train {

namespace {

using Get = std::function<const char*(const char*)>;

bool env_int(const Get& get, const char* name, long lo, long hi, int* out) {
  const char* v = get(name);
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

bool set(const Get& get, const char* name) {
  const char* v = get(name);
  return v && *v;
}

// "01-03,7" -> 01 02 03 7.
std::vector<std::string> expand_ranges(const std::string& inside, const std::string& bad) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= inside.size()) {
    const size_t comma = std::min(inside.find(',', start), inside.size());
    const std::string item = inside.substr(start, comma - start);
    const size_t dash = item.find('-');
    const std::string lo = item.substr(0, dash);
    const std::string hi = dash == std::string::npos ? lo : item.substr(dash + 1);
    auto digits = [](const std::string& s) {
      return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
    };
    if (!digits(lo) || !digits(hi)) throw UsageError(bad + " ('" + item + "' is not a range)");
    const unsigned long a = std::stoul(lo), b = std::stoul(hi);
    if (b < a || b - a > 100000) throw UsageError(bad + " ('" + item + "' is not a range)");
    for (unsigned long v = a; v <= b; ++v) {
      std::string s = std::to_string(v);
      if (s.size() < lo.size()) s.insert(0, lo.size() - s.size(), '0');
      out.push_back(s);
    }
    start = comma + 1;
  }
  return out;
}

// One host-list entry with any number of bracket groups, expanded left to right.
void expand_entry(const std::string& entry, const std::string& bad, std::vector<std::string>* out) {
  const size_t open = entry.find('[');
  if (open == std::string::npos) {
    if (entry.find(']') != std::string::npos) throw UsageError(bad + " (a ']' without '[')");
    out->push_back(entry);
    return;
  }
  const size_t close = entry.find(']', open);
  if (close == std::string::npos) throw UsageError(bad + " (an unclosed '[')");
  const std::string head = entry.substr(0, open), rest = entry.substr(close + 1);
  for (const std::string& v : expand_ranges(entry.substr(open + 1, close - open - 1), bad)) {
    expand_entry(head + v + rest, bad, out);
  }
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& list, const std::string& variable) {
  const std::string bad = variable + "=" + list + ": not a Slurm host list";
  std::vector<std::string> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    if (i < list.size() && list[i] == '[') ++depth;
    if (i < list.size() && list[i] == ']') --depth;
    if (i < list.size() && (list[i] != ',' || depth > 0)) continue;
    const std::string entry = list.substr(start, i - start);
    if (entry.empty()) throw UsageError(bad + " (an empty entry)");
    expand_entry(entry, bad, &out);
    start = i + 1;
  }
  return out;
}

DistEnv dist_env_from(const Get& get) {
  DistEnv e;
  const bool torch = set(get, "RANK") || set(get, "WORLD_SIZE");
  const bool slurm_step = !torch && set(get, "SLURM_STEP_NUM_TASKS") && set(get, "SLURM_PROCID");
  bool have_port = env_int(get, "MASTER_PORT", 1, 65535, &e.master_port);
  if (const char* a = get("MASTER_ADDR"); a && *a) {
    e.master_addr = a;
    e.master_addr_from = "MASTER_ADDR";
  }
  if (slurm_step) {
    env_int(get, "SLURM_STEP_NUM_TASKS", 1, 1 << 20, &e.world_size);
    env_int(get, "SLURM_PROCID", 0, 1 << 20, &e.rank);
    env_int(get, "SLURM_LOCALID", 0, 1 << 16, &e.local_rank);
    if (e.rank >= e.world_size) {
      throw UsageError("SLURM_PROCID=" + std::to_string(e.rank) +
                       " is not below SLURM_STEP_NUM_TASKS=" + std::to_string(e.world_size));
    }
    e.source = "Slurm (SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID";
    if (e.world_size > 1 && !set(get, "MASTER_ADDR")) {
      const char* var =
          set(get, "SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
      if (!set(get, var)) {
        throw UsageError("SLURM_STEP_NODELIST: not set, nor SLURM_JOB_NODELIST (set MASTER_ADDR)");
      }
      e.master_addr = expand_hostlist(get(var), var).front();
      e.master_addr_from = var;
      e.source += std::string(", ") + var;
    }
    if (e.world_size > 1 && !have_port) {
      int job = 0;
      if (!env_int(get, "SLURM_JOB_ID", 0, 2147483647, &job)) {
        throw UsageError("MASTER_PORT: not set, nor SLURM_JOB_ID to derive it from");
      }
      e.master_port = 20000 + job % 10000;
      have_port = true;
      e.source += ", the port from SLURM_JOB_ID";
    }
    e.source += ")";
  } else {
    env_int(get, "WORLD_SIZE", 1, 1 << 20, &e.world_size);
    env_int(get, "RANK", 0, 1 << 20, &e.rank);
    env_int(get, "LOCAL_RANK", 0, 1 << 16, &e.local_rank);
    if (torch) e.source = "torchrun variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT)";
    const char* agent = get("TORCHELASTIC_USE_AGENT_STORE");
    e.agent_store = torch && agent != nullptr && std::string(agent) == "True";
    if (e.rank >= e.world_size) {
      throw UsageError("RANK=" + std::to_string(e.rank) +
                       " is not below WORLD_SIZE=" + std::to_string(e.world_size));
    }
    int tasks = 0;
    if (!torch && set(get, "SLURM_JOB_ID") && env_int(get, "SLURM_NTASKS", 1, 1 << 20, &tasks) &&
        tasks > 1) {
      e.note = "SLURM_NTASKS=" + std::to_string(tasks) +
               " but this process was not started by srun: it trains alone; start the ranks with "
               "`srun dscache-train ...`";
    }
  }
  if (e.world_size > 1 && !have_port) {
    throw UsageError("MASTER_PORT: required when WORLD_SIZE > 1 (set by torchrun)");
  }
  return e;
}

namespace {

// getaddrinfo's result for `host` (TCP): 0 when it resolves.
int resolve(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc == 0) ::freeaddrinfo(found);
  return rc;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!s.empty() && s.back() == '.') s.pop_back();  // the root label
  return s;
}

bool is_localhost_name(const std::string& name) {
  const std::string host = lower(name);
  const std::string suffix = ".localhost";
  return host == "localhost" ||
         (host.size() > suffix.size() &&
          host.compare(host.size() - suffix.size(), suffix.size(), suffix) == 0);
}

}  // namespace

bool host_resolves(const std::string& host) { return resolve(host) == 0; }

std::string own_hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

std::string rendezvous_host(const std::string& host, bool (*resolves)(const std::string&),
                            std::string (*own)()) {
  if (resolves(host)) return host;
  const std::string me = lower(own()), name = lower(host);
  const bool mine = !me.empty() && (name == me || name == me.substr(0, me.find('.')));
  return is_localhost_name(host) || mine ? "127.0.0.1" : host;
}

std::string master_addr_unresolvable(const DistEnv& env) {
  const int rc = resolve(env.master_addr);
  if (rc == 0) return "";
  const std::string reason = rc == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(rc);
  const std::string what =
      env.master_addr_from == "MASTER_ADDR" ? "MASTER_ADDR=" + env.master_addr
      : env.master_addr_from.empty()
          ? "MASTER_ADDR (default " + env.master_addr + ")"
          : env.master_addr_from + "'s first host '" + env.master_addr + "' (rank 0's host)";
  return "rendezvous: " + what + " does not resolve (" + reason +
         "): set MASTER_ADDR to rank 0's address, or to a name this host resolves (/etc/hosts, "
         "DNS)";
}

}  // namespace train
}  // namespace dscache
