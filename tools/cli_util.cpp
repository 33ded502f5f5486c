#include "cli_util.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <iostream>

#include "build_pipeline.h"
#include "dscache/byte_count.h"
#include "dscache/error.h"
#include "dscache/ingest/source_list.h"
#include "dscache/remote.h"

namespace dscache {
namespace {

bool parse_u64(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 19) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *out = v;
  return true;
}

// An option whose value Boost converts to an unsigned integer (and so wraps "-1").
bool is_unsigned_option(const boost::program_options::value_semantic* v) {
  namespace po = boost::program_options;
  return dynamic_cast<const po::typed_value<unsigned char>*>(v) != nullptr ||
         dynamic_cast<const po::typed_value<unsigned short>*>(v) != nullptr ||
         dynamic_cast<const po::typed_value<unsigned int>*>(v) != nullptr ||
         dynamic_cast<const po::typed_value<unsigned long>*>(v) != nullptr ||
         dynamic_cast<const po::typed_value<unsigned long long>*>(v) != nullptr;
}

}  // namespace

const boost::program_options::options_description& remote_options_description() {
  namespace po = boost::program_options;
  static const po::options_description desc = [] {
    po::options_description d(
        "Remote caches (s3://BUCKET/PREFIX, http(s)://HOST/PATH; docs/OPERATIONS.md); the "
        "environment's AWS_* and DSCACHE_LOCAL_CACHE* variables apply when these are not given");
    d.add_options()("s3-endpoint", po::value<std::string>()->value_name("URL"),
                    "S3 endpoint, e.g. http://127.0.0.1:7480 (default: AWS_ENDPOINT_URL, else "
                    "AWS's own for the region)")(
        "local-cache", po::value<std::string>()->value_name("DIR"),
        "where verified copies of remote caches are kept, shared by every process on the node "
        "(default: DSCACHE_LOCAL_CACHE, else $XDG_CACHE_HOME/dscache or ~/.cache/dscache)")(
        "local-cache-size", po::value<std::string>()->value_name("BYTES"),
        "most bytes of copies kept; the least recently opened copy nobody holds is evicted "
        "first (default: DSCACHE_LOCAL_CACHE_SIZE, else 20GiB)");
    return d;
  }();
  return desc;
}

namespace {

// The remote options of the command line, applied process-wide (set_remote_options).
void apply_remote_options(const boost::program_options::variables_map& vm) {
  RemoteOptions o = remote_options();
  if (vm.count("s3-endpoint")) {
    o.endpoint = vm["s3-endpoint"].as<std::string>();
    if (o.endpoint.rfind("http://", 0) != 0 && o.endpoint.rfind("https://", 0) != 0) {
      throw UsageError("--s3-endpoint '" + o.endpoint +
                       "': expected http://HOST[:PORT] or "
                       "https://HOST[:PORT]");
    }
  }
  if (vm.count("local-cache")) o.local_cache = vm["local-cache"].as<std::string>();
  if (vm.count("local-cache-size")) {
    o.local_cache_size =
        parse_bytes(vm["local-cache-size"].as<std::string>(), "--local-cache-size");
    if (o.local_cache_size == 0) throw UsageError("--local-cache-size '0': expected a size > 0");
  }
  set_remote_options(o);
}

}  // namespace

void parse_command_line(int argc, char** argv,
                        const boost::program_options::options_description& command_options,
                        const boost::program_options::positional_options_description& positional,
                        boost::program_options::variables_map* vm) {
  namespace po = boost::program_options;
  po::options_description options;
  options.add(command_options).add(remote_options_description());
  const po::parsed_options parsed = [&] {
    try {
      return po::command_line_parser(argc, argv).options(options).positional(positional).run();
    } catch (const po::error& e) {
      throw UsageError(e.what());
    }
  }();
  for (const po::option& o : parsed.options) {
    if (o.unregistered || o.string_key.empty()) continue;
    const po::option_description* d = options.find_nothrow(o.string_key, false);
    if (d == nullptr || !is_unsigned_option(d->semantic().get())) continue;
    for (const std::string& v : o.value) {
      const size_t b = v.find_first_not_of(" \t");
      if (b != std::string::npos && v[b] == '-') {
        throw UsageError("--" + o.string_key + " '" + v + "': expected a non-negative integer");
      }
    }
  }
  try {
    po::store(parsed, *vm);
    po::notify(*vm);
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
  apply_remote_options(*vm);
}

void parse_size(const std::string& text, const std::string& option, uint32_t* height,
                uint32_t* width) {
  auto x = text.find_first_of("xX");
  uint64_t h = 0, w = 0;
  bool ok = x == std::string::npos
                ? parse_u64(text, &h) && (w = h, true)
                : parse_u64(text.substr(0, x), &h) && parse_u64(text.substr(x + 1), &w);
  if (!ok || h == 0 || w == 0 || h > 65535 || w > 65535) {
    throw UsageError(option + " '" + text + "': expected N or HxW with 1 <= N <= 65535");
  }
  *height = static_cast<uint32_t>(h);
  *width = static_cast<uint32_t>(w);
}

uint64_t parse_bytes(const std::string& text, const std::string& option) {
  try {
    return parse_byte_count(text, option);
  } catch (const Error& e) {
    throw UsageError(e.reason());
  }
}

bool parse_cache_args(int argc, char** argv,
                      const boost::program_options::options_description& desc,
                      const std::string& command, std::string* cache,
                      boost::program_options::variables_map* vm) {
  namespace po = boost::program_options;
  po::options_description hidden;
  hidden.add_options()("cache", po::value(cache));
  po::options_description all;
  all.add(desc).add(hidden);
  po::positional_options_description pos;
  pos.add("cache", 1);
  parse_command_line(argc, argv, all, pos, vm);
  if (vm->count("help")) {
    std::cout << desc << "\n" << remote_options_description() << "\n";
    return false;
  }
  if (cache->empty()) throw UsageError("expected CACHE (see dscache " + command + " --help)");
  return true;
}

std::string format_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  }
  return buf;
}

std::string command_line(const char* command, int argc, char** argv) {
  std::string line = command;
  for (int i = 0; i < argc; ++i) {
    line += ' ';
    line += argv[i];
  }
  return line;
}

void advise_out_of_space(const char* command, const std::string& output) {
  std::string out = absolute_path(output);
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  std::fprintf(stderr,
               "dscache %s: out of space (disk full, quota or file size limit): nothing was "
               "published; the finished work is kept in %s: free space and rerun with --resume "
               "to continue\n",
               command, CacheWriter::partial_dir_for(out).c_str());
}

}  // namespace dscache
