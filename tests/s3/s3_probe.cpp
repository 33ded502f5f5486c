// s3_probe: one ObjectStore request per run, for the `s3` suite's cases against a real server
// (tests/s3/test_s3_client.py) and for trying a location by hand.
//
//   s3_probe put LOCATION KEY FILE [--xxh64 HEX]     (put_file: multipart above the threshold)
//   s3_probe get LOCATION KEY OUT                     (get_to_fd into OUT)
//   s3_probe range LOCATION KEY OFFSET LENGTH OUT     (get_range)
//   s3_probe head LOCATION KEY                        (prints size, etag, xxh64; exit 3 if absent)
//   s3_probe list LOCATION PREFIX                     (prints "KEY SIZE ETAG" lines)
//   s3_probe rm LOCATION KEY
//   s3_probe creds LOCATION                           (prints credentials_used() and endpoint())
// Options anywhere after the subcommand: --part-bytes N, --multipart-threshold N, --retries N,
// --requests N, --stall S (RemoteOptions; the environment supplies the rest).
// Errors: "s3_probe: <what()>" on stderr; exit 10 for Remote, 1 for any other error, 2 usage.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "dscache/error.h"
#include "dscache/remote.h"
#include "remote/object_store.h"

namespace {

using dscache::remote::ObjectStore;

int usage() {
  std::cerr << "usage: s3_probe put|get|range|head|list|rm|creds LOCATION ... (see the source)\n";
  return 2;
}

// Splits argv into positional arguments and --name value options.
bool parse(int argc, char** argv, std::vector<std::string>& pos,
           std::map<std::string, std::string>& opts) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) == 0) {
      if (i + 1 >= argc) return false;
      opts[a.substr(2)] = argv[++i];
    } else {
      pos.push_back(a);
    }
  }
  return true;
}

dscache::RemoteOptions options_from(const std::map<std::string, std::string>& opts) {
  dscache::RemoteOptions o;
  for (const auto& [name, value] : opts) {
    if (name == "part-bytes") {
      o.part_bytes = std::stoull(value);
    } else if (name == "multipart-threshold") {
      o.multipart_threshold = std::stoull(value);
    } else if (name == "retries") {
      o.retries = std::stoi(value);
    } else if (name == "requests") {
      o.requests_in_flight = static_cast<unsigned>(std::stoul(value));
    } else if (name == "stall") {
      o.stall_timeout_s = std::stod(value);
    } else if (name != "xxh64") {
      throw dscache::Error(dscache::ErrorKind::kInvalidArgument, "--" + name, "unknown option");
    }
  }
  return o;
}

int write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw dscache::Error(dscache::ErrorKind::kIOError, path, "write failed");
  return 0;
}

int run(const std::vector<std::string>& a, const std::map<std::string, std::string>& opts) {
  const std::string& cmd = a[0];
  auto store = ObjectStore::open(a[1], options_from(opts));
  auto xxh = opts.count("xxh64") ? opts.at("xxh64") : "";
  if (cmd == "put" && a.size() == 4) {
    store->put_file(a[2], a[3], xxh);
  } else if (cmd == "get" && a.size() == 4) {
    int fd = ::open(a[3].c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) dscache::throw_errno(a[3], "open");
    auto info = store->get_to_fd(a[2], fd, a[3]);
    ::close(fd);
    std::cout << info.size << " " << info.etag << "\n";
  } else if (cmd == "range" && a.size() == 6) {
    return write_file(a[5], store->get_range(a[2], std::stoull(a[3]), std::stoull(a[4])));
  } else if (cmd == "head" && a.size() == 3) {
    auto info = store->head(a[2]);
    if (!info) return 3;
    std::cout << info->size << " " << info->etag << " " << info->xxh64 << "\n";
  } else if (cmd == "list" && a.size() == 3) {
    for (const auto& o : store->list(a[2])) {
      std::cout << o.key << " " << o.size << " " << o.etag << "\n";
    }
  } else if (cmd == "rm" && a.size() == 3) {
    store->remove(a[2]);
  } else if (cmd == "creds" && a.size() == 2) {
    std::cout << store->credentials_used() << "\n" << store->endpoint() << "\n";
  } else {
    return usage();
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> pos;
  std::map<std::string, std::string> opts;
  if (!parse(argc, argv, pos, opts) || pos.size() < 2) return usage();
  try {
    return run(pos, opts);
  } catch (const dscache::Error& e) {
    std::cerr << "s3_probe: " << e.what() << "\n";
    return e.kind() == dscache::ErrorKind::kRemote ? 10 : 1;
  } catch (const std::exception& e) {
    std::cerr << "s3_probe: " << e.what() << "\n";
    return 1;
  }
}
