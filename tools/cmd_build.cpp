// `dscache build SOURCE OUTPUT [options]`
#include <boost/program_options.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>

#include "build_part.h"
#include "build_pipeline.h"
#include "cli_util.h"
#include "commands.h"
#include "dscache/lock.h"
#include "dscache/manifest.h"
#include "dscache/shard.h"

namespace dscache {
namespace po = boost::program_options;

namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

// --codec raw | jpeg | jpeg:Q (Q 1..100, default 90).
void parse_codec_option(const std::string& text, Codec* codec, uint32_t* quality) {
  const size_t colon = text.find(':');
  const std::optional<Codec> named = kCodecNames.find(text.substr(0, colon));
  auto bad = [&] {
    return UsageError("--codec '" + text + "': expected one of " + kCodecNames.names() +
                      ", or jpeg:Q (Q 1..100)");
  };
  if (!named) throw bad();
  *codec = *named;
  *quality = *codec == Codec::kJpeg ? 90 : 0;
  if (colon == std::string::npos) return;
  const std::string q = text.substr(colon + 1);
  if (*codec != Codec::kJpeg || q.empty() || q.size() > 3 ||
      q.find_first_not_of("0123456789") != std::string::npos || std::stoul(q) < 1 ||
      std::stoul(q) > 100) {
    throw bad();
  }
  *quality = static_cast<uint32_t>(std::stoul(q));
}

}  // namespace

int cmd_build(int argc, char** argv) {
  po::options_description desc(
      "Usage: dscache build SOURCE OUTPUT [options]\n\n"
      "Decode an image dataset once into pre-decoded shards.\n"
      "SOURCE: a folder with one sub-folder per class, a .csv/.tsv list (path,label),\n"
      "or an MNIST-style idx3 images file (labels: the -labels-idx1- sibling or --labels).\n\n"
      "Options");
  std::string size, resize = "crop", storage = "npy", shard_size = "1G", classes, layout = "fixed",
                    shuffle, codec = "raw", part;
  uint32_t parts = 0;
  BuildOptions opt;
  uint32_t channels = 3;
  desc.add_options()("help,h", "show this help")(
      "size", po::value(&size), "output size: N (square) or HxW; required unless idx")(
      "resize", po::value(&resize)->default_value("crop"),
      "aspect policy: crop (cover, center crop), pad (fit, black borders), stretch")(
      "channels", po::value(&channels), "3 (RGB, default) or 1 (grey; default for idx)")(
      "storage", po::value(&storage)->default_value("npy"), "shard format: npy or hdf5")(
      "layout", po::value(&layout)->default_value("fixed"),
      "fixed (every sample --size) or ragged (aspect kept, shorter side <= --max-side)")(
      "max-side", po::value(&opt.recipe.max_side), "ragged: limit on the shorter side")(
      "codec", po::value(&codec)->default_value("raw"),
      "how samples are stored: raw (pixels, served from memory at once) or jpeg[:Q] (JPEG at "
      "quality Q, default 90: ~5-10x smaller, decoded when served)")(
      "shard-size", po::value(&shard_size)->default_value("1G"),
      "cap on image bytes per shard (K, M, G suffixes)")(
      "threads", po::value(&opt.threads)->default_value(0), "decode threads (0 = all cores)")(
      "shuffle", po::value(&shuffle)->default_value("0"),
      "store samples in a seeded permutation of the source order (SEED: 0..2^64-1; none: "
      "source order)")("max-pixels", po::value(&opt.recipe.max_pixels)->default_value(100000000),
                       "skip images whose header claims more pixels")(
      "no-reduced-decode", "always decode JPEGs at full size before resizing")(
      "labels", po::value(&opt.labels_file), "idx labels file (default: the conventional sibling)")(
      "classes", po::value(&classes), "comma-separated class names for integer labels")(
      "part", po::value(&part),
      "build only part I/N (0-based) of the cache order, for dscache merge; auto: I and N from "
      "a Slurm job array (SLURM_ARRAY_TASK_ID, _COUNT, _MIN) or a Kubernetes Indexed Job "
      "(JOB_COMPLETION_INDEX, with --parts)")("parts", po::value(&parts),
                                              "--part auto: the number of parts N")(
      "strict", "stop at the first file that cannot be decoded (exit 3, nothing kept)")(
      "force", "replace an existing cache at OUTPUT / discard an interrupted build")(
      "resume", "continue an interrupted build of OUTPUT from its finished shards")(
      "quiet,q", "no progress output");
  po::options_description hidden;
  hidden.add_options()("source", po::value(&opt.source))("output", po::value(&opt.output));
  po::options_description all;
  all.add(desc).add(hidden);
  po::positional_options_description pos;
  pos.add("source", 1).add("output", 1);

  try {
    po::variables_map vm;
    store_command_line(argc, argv, all, pos, &vm);
    po::notify(vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return kExitOk;
    }
    if (opt.source.empty() || opt.output.empty()) {
      throw UsageError("expected SOURCE and OUTPUT (see dscache build --help)");
    }
    if (vm.count("size")) {
      parse_size(size, "--size", &opt.recipe.height, &opt.recipe.width);
      opt.size_given = true;
    }
    if (vm.count("channels")) {
      if (channels != 1 && channels != 3) {
        throw UsageError("--channels " + std::to_string(channels) + ": expected 1 or 3");
      }
      opt.channels_given = true;
    }
    opt.recipe.channels = channels;
    opt.recipe.resize = parse_choice(kResizePolicyNames, resize, "--resize");
    opt.storage = parse_choice(kStorageNames, storage, "--storage");
    if (opt.storage == Storage::kHdf5 && !hdf5_supported()) {
      throw UsageError("--storage hdf5: this dscache was built without HDF5 support");
    }
    opt.recipe.shard_bytes = parse_bytes(shard_size, "--shard-size");
    opt.layout = parse_choice(kLayoutNames, layout, "--layout");
    if (opt.layout == Layout::kRagged && vm.count("size")) {
      throw UsageError("--size does not apply to --layout ragged (use --max-side)");
    }
    if (opt.layout == Layout::kRagged && opt.recipe.max_side == 0) {
      throw UsageError("--layout ragged needs --max-side N (N >= 1)");
    }
    if (opt.layout == Layout::kFixed && vm.count("max-side")) {
      throw UsageError("--max-side applies to --layout ragged only");
    }
    if (opt.threads < 0 || opt.threads > 1024) {
      throw UsageError("--threads " + std::to_string(opt.threads) + ": expected 0..1024");
    }
    if (opt.recipe.max_pixels == 0) throw UsageError("--max-pixels must be positive");
    if (shuffle != "none") {
      errno = 0;
      char* end = nullptr;
      const unsigned long long seed = std::strtoull(shuffle.c_str(), &end, 10);
      if (shuffle.empty() || shuffle.find_first_not_of("0123456789") != std::string::npos ||
          *end != '\0' || errno == ERANGE) {
        throw UsageError("--shuffle '" + shuffle +
                         "': expected a seed (an integer 0..2^64-1) or none");
      }
      opt.recipe.shuffled = true;
      opt.recipe.shuffle_seed = seed;
    }
    parse_codec_option(codec, &opt.codec, &opt.recipe.quality);
    opt.recipe.reduced_decode = vm.count("no-reduced-decode") == 0;
    if (!classes.empty()) opt.class_names = split_commas(classes);
    opt.strict = vm.count("strict") > 0;
    opt.force = vm.count("force") > 0;
    opt.resume = vm.count("resume") > 0;
    opt.quiet = vm.count("quiet") > 0;
    opt.command = command_line("dscache", argc, argv);
    if (vm.count("parts") && !vm.count("part")) throw UsageError("--parts needs --part auto");
    if (vm.count("part")) {
      const PartSpec spec = resolve_part(part, parts, [](const char* k) { return std::getenv(k); });
      opt.part_index = spec.index;
      opt.part_count = spec.count;
      if (part == "auto") {
        std::fprintf(stderr, "dscache build: building part %u of %u (0-based) from %s\n",
                     spec.index, spec.count, spec.origin.c_str());
      }
    }
  } catch (const po::error& e) {
    std::fprintf(stderr, "dscache build: %s\n", e.what());
    return kExitUsage;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "dscache build: %s\n", e.what());
    return kExitUsage;
  }

  try {
    BuildSummary s = run_build(opt);
    std::printf("built %llu samples (%llu skipped%s) in %.1f s, %.0f images/s -> %s\n",
                static_cast<unsigned long long>(s.count),
                static_cast<unsigned long long>(s.skipped), s.skipped ? ", see skipped.jsonl" : "",
                s.seconds, s.seconds > 0 ? (s.count + s.skipped - s.resumed) / s.seconds : 0.0,
                s.output.c_str());
    return kExitOk;
  } catch (const BadSourceError& e) {
    std::fprintf(stderr, "dscache build: %s\n", e.what());
    return kExitBadSource;
  } catch (const OutputExistsError& e) {
    std::fprintf(stderr, "dscache build: %s\n", e.what());
    return kExitOutputExists;
  } catch (const LockedError& e) {
    std::fprintf(stderr, "dscache build: %s\n", e.what());
    return kExitLocked;
  } catch (const Error& e) {
    std::fprintf(stderr, "dscache build: %s\n", e.what());
    if (is_out_of_space(e)) return out_of_space("build", opt.output);
    if (e.kind() == ErrorKind::kInvalidArgument && !e.path().empty() && e.path()[0] == '-') {
      return kExitUsage;  // an option that only the source kind could check (e.g. --size)
    }
    return kExitError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dscache build: %s\n", e.what());
    if (is_out_of_space(e)) return out_of_space("build", opt.output);
    return kExitError;
  }
}

}  // namespace dscache
