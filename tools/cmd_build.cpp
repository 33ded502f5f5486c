// `dscache build SOURCE OUTPUT [options]`
#include <boost/program_options.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "build_estimate.h"
#include "build_part.h"
#include "build_pipeline.h"
#include "cli_util.h"
#include "commands.h"
#include "dscache/cache_writer.h"
#include "dscache/remote.h"
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

// --alpha drop | composite[=R,G,B] | keep (R, G, B 0..255; composite alone: white).
void parse_alpha_option(const std::string& text, BuildRecipe* r) {
  const size_t eq = text.find('=');
  const std::optional<AlphaMode> mode = kAlphaModeNames.find(text.substr(0, eq));
  const auto bad = [&] {
    return UsageError("--alpha '" + text + "': expected drop, keep, composite or composite=R,G,B " +
                      "(each 0..255, e.g. composite=255,255,255)");
  };
  if (!mode) throw bad();
  r->alpha = *mode;
  if (eq == std::string::npos) return;
  const std::vector<std::string> rgb = split_commas(text.substr(eq + 1));
  if (*mode != AlphaMode::kComposite || rgb.size() != 3) throw bad();
  for (size_t i = 0; i < 3; ++i) {
    if (rgb[i].empty() || rgb[i].size() > 3 ||
        rgb[i].find_first_not_of("0123456789") != std::string::npos || std::stoul(rgb[i]) > 255) {
      throw bad();
    }
    r->background[i] = static_cast<uint8_t>(std::stoul(rgb[i]));
  }
}

// The KINDs of --field NAME=KIND (dscache/ingest/source_list.h, SourceOptions::field_kinds).
constexpr const char* kFieldKinds[] = {"mask", "multi-hot", "int", "float", "text", "ignore"};

// The class names of --field NAME=KIND:CLASSES: comma-separated, or @FILE (one per line; blank
// lines skipped). Each non-empty and given once.
std::vector<std::string> parse_field_classes(const std::string& flag, const std::string& text) {
  std::vector<std::string> names;
  if (!text.empty() && text[0] == '@') {
    std::ifstream in(text.substr(1));
    if (!in) throw UsageError("--field '" + flag + "': cannot read " + text.substr(1));
    for (std::string line; std::getline(in, line);) {
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
      if (!line.empty()) names.push_back(line);
    }
  } else {
    names = split_commas(text);
    if (!text.empty() && text.back() == ',') names.emplace_back();  // "a," names an empty one
  }
  if (names.empty()) throw UsageError("--field '" + flag + "': no class names after ':'");
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty()) throw UsageError("--field '" + flag + "': an empty class name");
    for (size_t j = 0; j < i; ++j) {
      if (names[j] == names[i]) {
        throw UsageError("--field '" + flag + "': class '" + names[i] + "' is named twice");
      }
    }
  }
  return names;
}

// --field NAME=KIND[:CLASSES] (repeatable): how table column NAME becomes a field, and for mask
// and multi-hot the class names in order. NAME and the names may hold any character: KIND is
// what follows the last '=' that a known KIND follows. The column's existence is checked on
// listing.
void parse_field_flags(const std::vector<std::string>& flags, BuildOptions* opt) {
  std::string kinds;
  for (const char* k : kFieldKinds) kinds += (kinds.empty() ? "" : ", ") + std::string(k);
  for (const std::string& flag : flags) {
    size_t eq = std::string::npos, colon = std::string::npos;
    bool known = false;
    for (size_t e = flag.rfind('='); e != std::string::npos && !known;
         e = e == 0 ? std::string::npos : flag.rfind('=', e - 1)) {
      const size_t c = flag.find(':', e);
      for (const char* k : kFieldKinds) known = known || flag.substr(e + 1, c - e - 1) == k;
      if (known || eq == std::string::npos) eq = e, colon = c;
    }
    const std::string name = eq == std::string::npos ? "" : flag.substr(0, eq);
    const std::string kind = eq == std::string::npos ? "" : flag.substr(eq + 1, colon - eq - 1);
    if (name.empty() || !known) {
      throw UsageError("--field '" + flag + "': expected NAME=KIND, KIND one of " + kinds +
                       " (mask and multi-hot may add :CLASS,CLASS,... or :@FILE)");
    }
    for (const auto& [seen, _] : opt->field_kinds) {
      if (seen == name) throw UsageError("--field: column '" + name + "' is given twice");
    }
    opt->field_kinds.emplace_back(name, kind);
    if (colon == std::string::npos) continue;
    if (kind != "mask" && kind != "multi-hot") {
      throw UsageError("--field '" + flag + "': class names apply to mask and multi-hot");
    }
    opt->field_classes.emplace_back(name, parse_field_classes(flag, flag.substr(colon + 1)));
  }
}

// The flags of `dscache build` that are parsed from text into BuildOptions.
struct BuildFlags {
  std::string size;                // --size N or HxW
  std::string resize = "crop";     // --resize
  std::string storage = "npy";     // --storage
  std::string shard_size = "1G";   // --shard-size, a byte count
  std::string classes;             // --classes, comma-separated
  std::string layout = "fixed";    // --layout
  std::string shuffle = "0";       // --shuffle SEED or none
  std::string codec = "raw";       // --codec raw | jpeg[:Q]
  std::string part;                // --part I/N or auto
  uint32_t parts = 0;              // --parts, with --part auto
  uint32_t channels = 3;           // --channels 1 or 3
  std::string alpha = "drop";      // --alpha drop | composite[=R,G,B] | keep
  std::vector<std::string> field;  // --field NAME=KIND, each
};

// The options --help shows; values land in `f` and `opt`.
po::options_description visible_options(BuildFlags* f, BuildOptions* opt) {
  po::options_description desc(
      "Usage: dscache build SOURCE OUTPUT [options]\n\n"
      "Decode an image dataset once into pre-decoded shards.\n"
      "SOURCE: a folder with one sub-folder per class, a .csv/.tsv list (path,label),\n"
      "a .csv/.tsv/.jsonl table (a header naming image_path, label and fields),\n"
      "a COCO instances .json (with --image-root), or an MNIST-style idx3 images file\n"
      "(labels: the -labels-idx1- sibling or --labels).\n\n"
      "Options");
  desc.add_options()("help,h", "show this help")(
      "size", po::value(&f->size), "output size: N (square) or HxW; required unless idx")(
      "resize", po::value(&f->resize)->default_value("crop"),
      "aspect policy: crop (cover, center crop), pad (fit, black borders), stretch")(
      "channels", po::value(&f->channels), "3 (RGB, default) or 1 (grey; default for idx)")(
      "alpha", po::value(&f->alpha)->default_value("drop"),
      "transparent sources: drop (the colour under the alpha, as PIL convert('RGB'); default), "
      "composite[=R,G,B] (onto a colour, default white) or keep (store RGBA, 4 channels)")(
      "storage", po::value(&f->storage)->default_value("npy"), "shard format: npy or hdf5")(
      "layout", po::value(&f->layout)->default_value("fixed"),
      "fixed (every sample --size) or ragged (aspect kept, shorter side <= --max-side)")(
      "max-side", po::value(&opt->recipe.max_side), "ragged: limit on the shorter side")(
      "codec", po::value(&f->codec)->default_value("raw"),
      "how samples are stored: raw (pixels, served from memory at once) or jpeg[:Q] (JPEG at "
      "quality Q, default 90: ~5-10x smaller, decoded when served)")(
      "shard-size", po::value(&f->shard_size)->default_value("1G"),
      "cap on image bytes per shard (K, M, G suffixes)")(
      "threads", po::value(&opt->threads)->default_value(0),
      "decode threads (0 = the CPUs this process may use: affinity, cgroup quota, "
      "SLURM_CPUS_PER_TASK)")(
      "shuffle", po::value(&f->shuffle)->default_value("0"),
      "store samples in a seeded permutation of the source order (SEED: 0..2^64-1; none: "
      "source order)")("max-pixels", po::value(&opt->recipe.max_pixels)->default_value(100000000),
                       "skip images whose header claims more pixels")(
      "no-reduced-decode", "always decode JPEGs at full size before resizing")(
      "labels", po::value(&opt->labels_file),
      "idx labels file (default: the conventional sibling)")(
      "classes", po::value(&f->classes), "comma-separated class names for integer labels")(
      "image-column", po::value(&opt->image_column),
      "table: the column naming the images (default image_path, else path)")(
      "label-column", po::value(&opt->label_column),
      "table: the class label column (default label, if present); every other column is a "
      "field typed from its values (int, float, text)")(
      "field", po::value(&f->field)->composing(),
      "table: NAME=KIND makes column NAME a field of KIND: mask (path of a mask image), "
      "multi-hot (';'-separated names), int, float, text, or ignore (no field); mask and "
      "multi-hot take class names in order as NAME=KIND:CLASS,CLASS,... or :@FILE (one a line); "
      "repeatable")("confine",
                    "refuse (skip) image and mask paths that lead outside the list's folder (COCO: "
                    "--image-root): absolute, or with .. past it")(
      "image-root", po::value(&opt->image_root), "COCO: the folder images' file_name are in")(
      "coco-mask", po::value(&opt->coco_mask),
      "COCO: none (default) or semantic (a mask field of category ids, 0 = background)")(
      "part", po::value(&f->part),
      "build only part I/N (0-based) of the cache order, for dscache merge; auto: I and N from "
      "a Slurm job array (SLURM_ARRAY_TASK_ID, _COUNT, _MIN) or a Kubernetes Indexed Job "
      "(JOB_COMPLETION_INDEX, with --parts)")("parts", po::value(&f->parts),
                                              "--part auto: the number of parts N")(
      "strict", "stop at the first file that cannot be decoded (exit 3, nothing kept)")(
      "force", "replace an existing cache at OUTPUT / discard an interrupted build")(
      "resume", "continue an interrupted build of OUTPUT from its finished shards")(
      "quiet,q", "no progress output")(
      "dry-run",
      "list the source and print the output's estimated size and the free space; "
      "write nothing")("no-space-check",
                       "start even when the estimate exceeds the free space for OUTPUT");
  return desc;
}

// --size, --channels, --resize, --storage, --shard-size, --layout and --max-side.
void apply_shape_flags(const po::variables_map& vm, const BuildFlags& f, BuildOptions* opt) {
  if (vm.count("size")) {
    parse_size(f.size, "--size", &opt->recipe.height, &opt->recipe.width);
    opt->size_given = true;
  }
  if (vm.count("channels")) {
    if (f.channels != 1 && f.channels != 3) {
      throw UsageError("--channels " + std::to_string(f.channels) + ": expected 1 or 3");
    }
    opt->channels_given = true;
  }
  opt->recipe.channels = f.channels;
  try {
    opt->recipe.resize = parse_choice(kResizePolicyNames, f.resize, "--resize");
  } catch (const Error&) {
    throw UsageError("--resize '" + f.resize + "': expected crop, pad or stretch");
  }
  try {
    opt->storage = parse_choice(kStorageNames, f.storage, "--storage");
  } catch (const Error&) {
    throw UsageError("--storage '" + f.storage + "': expected npy or hdf5");
  }
  if (opt->storage == Storage::kHdf5 && !hdf5_supported()) {
    throw UsageError("--storage hdf5: this dscache was built without HDF5 support");
  }
  opt->recipe.shard_bytes = parse_bytes(f.shard_size, "--shard-size");
  try {
    opt->layout = parse_choice(kLayoutNames, f.layout, "--layout");
  } catch (const Error&) {
    throw UsageError("--layout '" + f.layout + "': expected fixed or ragged");
  }
  if (opt->layout == Layout::kRagged && vm.count("size")) {
    throw UsageError("--size does not apply to --layout ragged (use --max-side)");
  }
  if (opt->layout == Layout::kRagged && opt->recipe.max_side == 0) {
    throw UsageError("--layout ragged needs --max-side N (N >= 1)");
  }
  if (opt->layout == Layout::kFixed && vm.count("max-side")) {
    throw UsageError("--max-side applies to --layout ragged only");
  }
}

// --shuffle SEED | none.
void apply_shuffle_flag(const std::string& shuffle, BuildRecipe* recipe) {
  if (shuffle == "none") return;
  errno = 0;
  char* end = nullptr;
  const unsigned long long seed = std::strtoull(shuffle.c_str(), &end, 10);
  if (shuffle.empty() || shuffle.find_first_not_of("0123456789") != std::string::npos ||
      *end != '\0' || errno == ERANGE) {
    throw UsageError("--shuffle '" + shuffle + "': expected a seed (an integer 0..2^64-1) or none");
  }
  recipe->shuffled = true;
  recipe->shuffle_seed = seed;
}

// --part I/N | auto (with --parts N).
void apply_part_flags(const po::variables_map& vm, const BuildFlags& f, BuildOptions* opt) {
  if (vm.count("parts") && !vm.count("part")) throw UsageError("--parts needs --part auto");
  if (!vm.count("part")) return;
  const PartSpec spec = resolve_part(f.part, f.parts, [](const char* k) { return std::getenv(k); });
  opt->part_index = spec.index;
  opt->part_count = spec.count;
  if (f.part == "auto") {
    std::fprintf(stderr, "dscache build: building part %u of %u (0-based) from %s\n", spec.index,
                 spec.count, spec.origin.c_str());
  }
}

// Parses the command line into `opt`. Returns false when --help was asked for (and printed).
// Throws UsageError naming the option.
bool parse_build_command_line(int argc, char** argv, BuildOptions* opt) {
  BuildFlags f;
  const po::options_description desc = visible_options(&f, opt);
  po::options_description hidden;
  hidden.add_options()("source", po::value(&opt->source))("output", po::value(&opt->output));
  po::options_description all;
  all.add(desc).add(hidden);
  po::positional_options_description pos;
  pos.add("source", 1).add("output", 1);
  po::variables_map vm;
  parse_command_line(argc, argv, all, pos, &vm);
  if (vm.count("help")) {
    std::cout << desc << "\n" << remote_options_description() << "\n";
    return false;
  }
  if (opt->source.empty() || opt->output.empty()) {
    throw UsageError("expected SOURCE and OUTPUT (see dscache build --help)");
  }
  apply_shape_flags(vm, f, opt);
  if (opt->threads < 0 || opt->threads > 1024) {
    throw UsageError("--threads " + std::to_string(opt->threads) + ": expected 0..1024");
  }
  if (opt->recipe.max_pixels == 0) throw UsageError("--max-pixels must be positive");
  apply_shuffle_flag(f.shuffle, &opt->recipe);
  parse_codec_option(f.codec, &opt->codec, &opt->recipe.quality);
  parse_alpha_option(f.alpha, &opt->recipe);
  opt->recipe.reduced_decode = vm.count("no-reduced-decode") == 0;
  if (!f.classes.empty()) opt->class_names = split_commas(f.classes);
  parse_field_flags(f.field, opt);
  opt->confine = vm.count("confine") > 0;
  if (!opt->coco_mask.empty() && opt->coco_mask != "none" && opt->coco_mask != "semantic") {
    throw UsageError("--coco-mask '" + opt->coco_mask + "': expected none or semantic");
  }
  opt->strict = vm.count("strict") > 0;
  opt->force = vm.count("force") > 0;
  opt->resume = vm.count("resume") > 0;
  opt->quiet = vm.count("quiet") > 0;
  opt->dry_run = vm.count("dry-run") > 0;
  opt->space_check = vm.count("no-space-check") == 0;
  opt->command = command_line("dscache", argc, argv);
  apply_part_flags(vm, f, opt);
  return true;
}

void print_summary(const BuildSummary& s) {
  std::string transparent;  // said when there were some, or when alpha was asked for
  if (s.transparent_known && (s.transparent > 0 || s.alpha != AlphaMode::kDrop)) {
    transparent =
        ", " + std::to_string(s.transparent) + " transparent (alpha: " + to_string(s.alpha) + ")";
  }
  std::printf("built %llu samples (%llu skipped%s%s) in %.1f s, %.0f images/s -> %s\n",
              static_cast<unsigned long long>(s.count), static_cast<unsigned long long>(s.skipped),
              s.skipped ? ", see skipped.jsonl" : "", transparent.c_str(), s.seconds,
              s.seconds > 0 ? (s.count + s.skipped - s.resumed) / s.seconds : 0.0,
              s.output.c_str());
}

// `dscache build SRC s3://BUCKET/PREFIX`: builds into a staging directory of the local cache
// (upload_staging_dir: found again by --resume), then uploads it, manifest last, and removes
// the staging copy. --resume continues either step: the build from its finished shards, the
// upload from the objects already in the bucket with the same size and XXH64.
void build_to_remote(BuildOptions opt) {
  const std::string remote = opt.output;
  if (remote.rfind("s3://", 0) != 0) {
    throw UsageError("OUTPUT " + remote +
                     ": an http(s) location is read-only; build to "
                     "s3://BUCKET/PREFIX or to a directory the web server serves");
  }
  if (opt.part_count != 0) {
    throw UsageError(
        "--part/--parts with a remote OUTPUT: build the parts into local "
        "directories, merge them, then build or upload the merged cache");
  }
  if (!opt.force && !opt.resume && remote_cache_exists(remote)) {
    throw OutputExistsError(ErrorKind::kInvalidArgument, remote,
                            "holds a cache (manifest.json); use --force to replace it or "
                            "--resume to finish an interrupted upload");
  }
  opt.output = upload_staging_dir(remote);
  // The staging directory is this command's own: a fresh build replaces what is there.
  if (!opt.resume) opt.force = true;
  BuildSummary s = run_build(opt);
  s.output = remote;
  if (!opt.quiet) std::fprintf(stderr, "uploading %s to %s\n", opt.output.c_str(), remote.c_str());
  const UploadStats up = upload_cache(opt.output, remote);
  print_summary(s);
  std::printf("uploaded %llu files (%s)%s -> %s\n",
              static_cast<unsigned long long>(up.files_uploaded),
              format_bytes(up.bytes_uploaded).c_str(),
              up.files_kept ? (", kept " + std::to_string(up.files_kept) + " already there (" +
                               format_bytes(up.bytes_kept) + ")")
                                  .c_str()
                            : "",
              remote.c_str());
  std::error_code ec;
  std::filesystem::remove_all(opt.output, ec);  // the bucket holds it now
}

}  // namespace

int cmd_build(int argc, char** argv) {
  BuildOptions opt;
  return run_command(
      "dscache build",
      [&] {
        if (!parse_build_command_line(argc, argv, &opt)) return to_int(ExitCode::kOk);
        if (opt.dry_run) {
          dry_run_build(opt);
        } else if (is_remote_location(opt.output)) {
          build_to_remote(opt);
        } else {
          print_summary(run_build(opt));
        }
        return to_int(ExitCode::kOk);
      },
      [&](const std::exception& e, ExitCode code) {
        // A refusal before the start wrote nothing: its message is the advice.
        const bool refused = dynamic_cast<const NotEnoughSpaceError*>(&e) != nullptr;
        if (code == ExitCode::kNoSpace && !refused) advise_out_of_space("build", opt.output);
      });
}

}  // namespace dscache
