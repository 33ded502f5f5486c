#include "cli_util.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <iostream>

#include "build_pipeline.h"
#include "dscache/byte_count.h"
#include "dscache/error.h"
#include "dscache/ingest/source_list.h"

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

void parse_command_line(int argc, char** argv,
                        const boost::program_options::options_description& options,
                        const boost::program_options::positional_options_description& positional,
                        boost::program_options::variables_map* vm) {
  namespace po = boost::program_options;
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
    std::cout << desc << "\n";
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
