#include "write/open_files.h"

#include <sys/resource.h>

#include "dscache/error.h"

namespace dscache {

void check_field_file_budget(uint64_t fields, const std::string& path) {
  struct rlimit lim;
  if (fields == 0 || ::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) {
    return;
  }
  const uint64_t limit = lim.rlim_cur;
  if (fields + kOpenFileReserve <= limit) return;
  throw Error(ErrorKind::kUnsupported, path,
              std::to_string(fields) +
                  " fields: the writer holds one file per field open while "
                  "it writes a shard, and this process may open " +
                  std::to_string(limit) + " files (ulimit -n; the writer keeps " +
                  std::to_string(kOpenFileReserve) + " for itself): raise the limit (ulimit -n " +
                  std::to_string(fields + kOpenFileReserve) +
                  ") or write fewer fields (a table: --field NAME=ignore)");
}

}  // namespace dscache
