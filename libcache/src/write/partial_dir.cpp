#include "write/partial_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "dscache/atomic_file.h"
#include "dscache/cache_writer.h"
#include "dscache/crash_point.h"
#include "dscache/error.h"
#include "dscache/file.h"
#include "json/parse.h"

namespace dscache {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

bool is_replaceable(const std::string& output) {
  if (path_exists(output + "/manifest.json")) return true;
  std::error_code ec;
  return fs::is_directory(output, ec) && fs::is_empty(output, ec);
}

}  // namespace

bool path_exists(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0;
}

void throw_output_exists(const std::string& output) {
  throw OutputExistsError(ErrorKind::kInvalidArgument, output,
                          "already exists; pass --force to replace it");
}

void recover_interrupted(const std::string& output, const std::string& partial) {
  if (path_exists(partial) && !path_exists(partial + "/" + kFingerprintFile)) {
    remove_tree(partial);
    fsync_directory(fs::path(partial).parent_path().string());
  }
  const std::string stale = output + "/" + kFingerprintFile;
  if (path_exists(output + "/manifest.json") && path_exists(stale)) {
    if (::unlink(stale.c_str()) != 0) throw_errno(stale, "cannot remove");
    fsync_directory(output);
  }
}

OutputPlan check_output(const std::string& output, const std::string& partial, bool force,
                        bool resume) {
  OutputPlan plan;
  plan.replace = path_exists(output);
  const bool interrupted = path_exists(partial);
  if (plan.replace && !force) {
    if (!resume || interrupted) throw_output_exists(output);
    plan.maybe_done = true;
    return plan;
  }
  const bool replace = plan.replace;
  if (replace && !is_replaceable(output)) {
    throw OutputExistsError(ErrorKind::kInvalidArgument, output,
                            "exists and is not a dscache cache (no manifest.json); refusing to "
                            "replace it");
  }
  if (interrupted && !resume) {
    if (!force) {
      throw OutputExistsError(ErrorKind::kInvalidArgument, partial,
                              "an interrupted build is here: pass --resume to continue it or "
                              "--force to start over");
    }
    remove_tree(partial);
  }
  plan.maybe_done = resume && replace && !interrupted;
  return plan;
}

void open_partial(const std::string& partial, const json& fp) {
  const std::string fp_path = partial + "/" + kFingerprintFile;
  if (path_exists(partial)) {
    json old;
    try {
      // A regular file only: a FIFO planted here would block the resume.
      old = parse_json(File::open(fp_path).read_all(uint64_t{1} << 24),
                       JsonOrigin{fp_path, ErrorKind::kCorruption});
    } catch (const std::exception&) {
      old = json();
    }
    if (old != fp) {
      throw Error(ErrorKind::kInvalidArgument, partial,
                  "the interrupted build here used other options or another source (or the "
                  "source changed); pass --force to start over");
    }
    return;
  }
  fs::create_directories(fs::path(partial).parent_path());
  if (::mkdir(partial.c_str(), 0755) != 0) throw_errno(partial, "cannot create directory");
  const std::string text = fp.dump(2);
  write_file_atomic(fp_path, text.data(), text.size());
}

void remove_tree(const std::string& dir) {
  // The manifest first: from then on the directory is not a cache for anyone.
  fs::remove(dir + "/manifest.json");
  crash_point("old-file-removed");
  for (const auto& ent : fs::directory_iterator(dir)) {
    fs::remove_all(ent.path());
    crash_point("old-file-removed");
  }
  fs::remove(dir);
}

void publish(const std::string& partial, const std::string& output, bool replace) {
  const std::string parent = fs::path(output).parent_path().string();
  if (replace) {
    if (::renameat2(AT_FDCWD, partial.c_str(), AT_FDCWD, output.c_str(), RENAME_EXCHANGE) != 0) {
      throw_errno(output, "cannot swap the new cache into place");
    }
    fsync_directory(parent);
    crash_point("swapped");
    remove_tree(partial);  // now holds the old cache (and no fingerprint)
  } else {
    if (::rename(partial.c_str(), output.c_str()) != 0) {
      throw_errno(output, "cannot rename the new cache into place");
    }
    crash_point("renamed");
  }
  fsync_directory(parent);
  const std::string fp = output + "/" + kFingerprintFile;
  if (::unlink(fp.c_str()) != 0) throw_errno(fp, "cannot remove");
  fsync_directory(output);
  crash_point("published");
}

}  // namespace dscache
