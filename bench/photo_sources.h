// The photographs the JPEG benches decode (mate-backgrounds by default): the files a glob pattern
// matches, sorted, so every run and every bench sees them in the same order, and their bytes and
// headers, leaving out any our strict decoder refuses.
#pragma once

#include <glob.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "dscache/error.h"
#include "dscache/jpeg.h"

// Empty (after saying so on stderr, naming `program` and the pattern) when nothing matches.
inline std::vector<std::string> photo_sources(const char* program, const std::string& pattern) {
  std::vector<std::string> sources;
  glob_t g{};
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) sources.emplace_back(g.gl_pathv[i]);
  }
  ::globfree(&g);
  std::sort(sources.begin(), sources.end());
  if (sources.empty()) {
    std::fprintf(stderr, "%s: no photographs match %s (install mate-backgrounds)\n", program,
                 pattern.c_str());
  }
  return sources;
}

struct Photos {
  std::vector<std::vector<uint8_t>> files;  // each photograph's bytes
  std::vector<dscache::JpegInfo> infos;     // and its header, same index
};

// The sources' bytes and headers. A photograph the decoder refuses (mate's Wood.jpg carries bytes
// after its end-of-image marker) is skipped with a notice naming it; none usable is an error.
inline Photos load_photos(const char* program, const std::vector<std::string>& sources) {
  Photos p;
  for (const std::string& s : sources) {
    std::ifstream in(s, std::ios::binary);
    std::vector<uint8_t> f{std::istreambuf_iterator<char>(in), {}};
    try {
      p.infos.push_back(dscache::jpeg_info(f.data(), f.size()));
      p.files.push_back(std::move(f));
    } catch (const dscache::Error& e) {
      std::fprintf(stderr, "%s: skipping %s: %s\n", program, s.c_str(), e.what());
    }
  }
  if (p.files.empty()) {
    throw dscache::Error(dscache::ErrorKind::kNotFound, "", "no usable photograph");
  }
  return p;
}
