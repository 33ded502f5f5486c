// dscache-train: parse the command line, run training, map errors to exit codes
// (0 ok, 1 error, 2 usage).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "dscache/error.h"
#include "options.h"
#include "train.h"

int main(int argc, char** argv) {
  using namespace dscache::train;
  std::vector<std::string> args(argv + 1, argv + argc);
  TrainOptions options;
  try {
    bool help = false;
    std::string help_text;
    options = parse_options(args, &help, &help_text);
    if (help) {
      std::fputs(help_text.c_str(), stdout);
      return 0;
    }
    resolve_and_validate(&options);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "dscache-train: %s\n(see dscache-train --help)\n", e.what());
    return 2;
  }
  try {
    run_training(options);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "dscache-train: %s\n", e.what());
    return 2;
  } catch (const dscache::Error& e) {
    std::fprintf(stderr, "dscache-train: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dscache-train: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
