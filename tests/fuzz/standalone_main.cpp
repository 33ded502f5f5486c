// Runs a fuzz target without libFuzzer: feeds every file named on the command line (a directory
// stands for the files in it, sorted by name) to LLVMFuzzerTestOneInput once. This is how CI
// (gcc, no libFuzzer) runs each seed corpus, with every crash found so far, as a regression test.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

bool read_file(const std::string& path, std::vector<uint8_t>* out) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  out->clear();
  uint8_t buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out->insert(out->end(), buf, buf + n);
  std::fclose(f);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<std::string> files;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    struct stat st;
    if (::stat(arg.c_str(), &st) != 0) {
      std::fprintf(stderr, "%s: no such file or directory\n", arg.c_str());
      return 2;
    }
    if (!S_ISDIR(st.st_mode)) {
      files.push_back(arg);
      continue;
    }
    std::vector<std::string> names;
    if (DIR* d = ::opendir(arg.c_str())) {
      while (const dirent* e = ::readdir(d)) {
        if (e->d_name[0] != '.') names.push_back(e->d_name);
      }
      ::closedir(d);
    }
    std::sort(names.begin(), names.end());
    for (const std::string& n : names) files.push_back(arg + "/" + n);
  }
  std::vector<uint8_t> data;
  for (const std::string& f : files) {
    if (!read_file(f, &data)) {
      std::fprintf(stderr, "%s: cannot read\n", f.c_str());
      return 2;
    }
    std::fprintf(stderr, "%s (%zu bytes)\n", f.c_str(), data.size());
    // A copy in a heap buffer of exactly the input's size (never null, also when empty), as
    // libFuzzer passes it: ASan catches a read past the end.
    std::unique_ptr<uint8_t[]> exact(new uint8_t[data.size()]);
    std::copy(data.begin(), data.end(), exact.get());
    LLVMFuzzerTestOneInput(exact.get(), data.size());
  }
  std::printf("ran %zu inputs\n", files.size());
  return files.empty() ? 1 : 0;
}
