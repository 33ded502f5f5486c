// The JPEG crop decoder against a full decode on ImageNet-sized sources, in one run: for
// RandomResizedCrop (scale 0.08..1, ratio 3/4..4/3, as torchvision) and center crop, to 224 and
// to 64, the images/s of
//   full   jpeg_decode + crop_resize (what a decode-then-transform pipeline does),
//   scale  jpeg_decode_crop{scale, no crop}: DCT scaling only, the whole image decoded,
//   crop   jpeg_decode_crop{no scale, crop}: skipped rows and cropped columns only,
//   both   jpeg_decode_crop defaults (DCT scaling + crop),
// with every mode timed once per round over the same images and boxes, the modes' order rotated
// each round (interleaved, so a busy neighbour slows every mode alike). Prints per-round ratios
// to `full` (median, min..max), the CPU and the load average.
//
// Images: random regions (area 0.3..1, aspect 3/4..4/3) of the photographs in mate-backgrounds,
// reduced so that the long side is 400..600 px (uniform per image, seeded) with our own decoder
// (DCT scaling + area) and encoded with jpeg_encode at Q90 (4:2:0 baseline), as
// `dscache build --codec jpeg` stores them.
//
// Usage: jpeg_crop_bench [--images N] [--rounds R] [--seed S] [--sources GLOB]
//                        [--profile RECIPE MODE]
// --profile 0 both runs only that recipe (index into the table below) and mode, for `perf record`.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dscache/error.h"
#include "dscache/jpeg.h"
#include "dscache/transform.h"
#include "photo_sources.h"

namespace {

struct Encoded {
  uint32_t h, w;
  std::vector<uint8_t> bytes;
};

struct ImageSet {
  std::vector<Encoded> images;
  size_t photos = 0;  // photographs they come from
};

ImageSet make_images(const std::vector<std::string>& sources, size_t count, uint64_t seed) {
  ImageSet set;
  std::vector<Encoded>& images = set.images;
  dscache::JpegScratch scratch;
  dscache::TransformOptions region;
  region.crop = dscache::CropMode::kRandomResized;
  region.height = region.width = 512;
  region.scale_min = 0.3;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint32_t> long_side(400, 600);
  const Photos photos = load_photos("jpeg_crop_bench", sources);
  const std::vector<std::vector<uint8_t>>& files = photos.files;
  const std::vector<dscache::JpegInfo>& infos = photos.infos;
  for (size_t i = 0; i < count; ++i) {
    const size_t k = i % files.size();
    const dscache::JpegInfo& info = infos[k];
    const dscache::CropBox box = dscache::choose_crop(region, info.height, info.width, seed, 0, i);
    const uint32_t l = long_side(rng);
    uint32_t oh = l, ow = l;
    if (box.width >= box.height) {
      oh = static_cast<uint32_t>(uint64_t{box.height} * l / box.width);
    } else {
      ow = static_cast<uint32_t>(uint64_t{box.width} * l / box.height);
    }
    std::vector<uint8_t> px(size_t{oh} * ow * 3);
    dscache::jpeg_decode_crop(files[k].data(), files[k].size(), info.height, info.width, 3, box, oh,
                              ow, px.data(), &scratch);
    Encoded e{oh, ow, {}};
    dscache::jpeg_encode(px.data(), oh, ow, 3, 90, &e.bytes);
    images.push_back(std::move(e));
  }
  set.photos = files.size();
  return set;
}

enum Mode { kFull, kScale, kCrop, kBoth, kModes };
const char* const kModeNames[kModes] = {"full", "scale", "crop", "both"};

struct Recipe {
  const char* name;
  dscache::CropMode crop;
  uint32_t size;
};
const Recipe kRecipes[] = {
    {"RandomResizedCrop(224)", dscache::CropMode::kRandomResized, 224},
    {"center crop 224", dscache::CropMode::kCenter, 224},
    {"RandomResizedCrop(64)", dscache::CropMode::kRandomResized, 64},
    {"center crop 64", dscache::CropMode::kCenter, 64},
};

dscache::TransformOptions options_of(const Recipe& r) {
  dscache::TransformOptions o;
  o.crop = r.crop;
  o.height = o.width = r.size;
  o.flip = true;
  return o;
}

// Images per second of one thread decoding every image once with `mode`; boxes are drawn from
// (seed, round) so every mode of a round decodes the same boxes.
double time_pass(const std::vector<Encoded>& images, const Recipe& r, Mode mode, uint64_t seed,
                 uint64_t round, dscache::JpegScratch* scratch, std::vector<uint8_t>* full,
                 std::vector<uint8_t>* out) {
  const dscache::TransformOptions o = options_of(r);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < images.size(); ++i) {
    const Encoded& im = images[i];
    const dscache::CropBox box = dscache::choose_crop(o, im.h, im.w, seed, round, i);
    if (mode == kFull) {
      full->resize(size_t{im.h} * im.w * 3);
      dscache::jpeg_decode(im.bytes.data(), im.bytes.size(), im.h, im.w, 3, full->data(), scratch);
      dscache::crop_resize(dscache::ImageView{full->data(), im.h, im.w, 3, 0}, box, r.size, r.size,
                           out->data());
    } else {
      const dscache::JpegDecodeOptions d{mode != kCrop, mode != kScale};
      dscache::jpeg_decode_crop(im.bytes.data(), im.bytes.size(), im.h, im.w, 3, box, r.size,
                                r.size, out->data(), scratch, d);
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(images.size()) / s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double load1() {
  double l = 0;
  std::ifstream("/proc/loadavg") >> l;
  return l;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

// The SIMD levels that decide libjpeg-turbo's and the resampler's speed.
std::string cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, word, out;
  std::set<std::string> seen;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line);
    while (words >> word) {
      if (word == "avx2" || word == "avx512f" || word == "avx512_bf16") seen.insert(word);
    }
  }
  for (const std::string& f : seen) out += (out.empty() ? "" : " ") + f;
  return out.empty() ? "(none of avx2 avx512f avx512_bf16)" : out;
}

}  // namespace

int main(int argc, char** argv) {
  size_t count = 300;
  int rounds = 7;
  uint64_t seed = 23;
  std::string pattern = "/usr/share/backgrounds/mate/nature/*.jpg";
  int profile_recipe = -1, profile_mode = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--profile" && i + 2 < argc) {
      profile_recipe = std::atoi(argv[++i]);
      const std::string m = argv[++i];
      for (int k = 0; k < kModes; ++k) profile_mode = m == kModeNames[k] ? k : profile_mode;
      if (profile_recipe < 0 || profile_recipe >= 4 || profile_mode < 0) {
        std::fprintf(stderr,
                     "jpeg_crop_bench: --profile RECIPE (0..3) MODE (full, scale, crop, both)\n");
        return 2;
      }
    } else if (a == "--images" && i + 1 < argc) {
      count = std::strtoul(argv[++i], nullptr, 10);
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--sources" && i + 1 < argc) {
      pattern = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: %s [--images N] [--rounds R] [--seed S] [--sources GLOB] "
                   "[--profile RECIPE MODE]\n",
                   argv[0]);
      return 2;
    }
  }
  if (count == 0 || rounds < 1) {
    std::fprintf(stderr, "jpeg_crop_bench: --images and --rounds must be >= 1\n");
    return 2;
  }
  if (!dscache::jpeg_supported()) {
    std::fprintf(stderr, "jpeg_crop_bench: this libcache has no JPEG support\n");
    return 77;
  }
  const std::vector<std::string> sources = photo_sources("jpeg_crop_bench", pattern);
  if (sources.empty()) return 1;
  try {
    const ImageSet set = make_images(sources, count, seed);
    const std::vector<Encoded>& images = set.images;
    size_t bytes = 0;
    uint64_t pixels = 0;
    for (const Encoded& e : images) {
      bytes += e.bytes.size();
      pixels += uint64_t{e.h} * e.w;
    }
    std::printf("cpu: %s; flags: %s; 1 thread\n", cpu_model().c_str(), cpu_flags().c_str());
    std::printf(
        "%zu images from %zu photographs, long side 400..600 (mean %.0f kpx), Q90 4:2:0, "
        "mean %.1f KiB; %d interleaved rounds\n",
        images.size(), set.photos, pixels / 1e3 / images.size(), bytes / 1024.0 / images.size(),
        rounds);
    dscache::JpegScratch scratch;
    std::vector<uint8_t> full;
    if (profile_recipe >= 0) {
      const Recipe& r = kRecipes[profile_recipe];
      std::vector<uint8_t> out(size_t{r.size} * r.size * 3);
      for (int k = 0; k < rounds; ++k) {
        std::printf(
            "%s, %s: %.0f img/s\n", r.name, kModeNames[profile_mode],
            time_pass(images, r, static_cast<Mode>(profile_mode), seed, k, &scratch, &full, &out));
      }
      return 0;
    }
    std::vector<double> loads{load1()};
    for (const Recipe& r : kRecipes) {
      std::vector<uint8_t> out(size_t{r.size} * r.size * 3);
      time_pass(images, r, kBoth, seed, 1000, &scratch, &full, &out);  // warm up
      std::vector<double> rate[kModes], ratio[kModes];
      for (int k = 0; k < rounds; ++k) {
        double got[kModes];
        for (int j = 0; j < kModes; ++j) {
          const Mode mode = static_cast<Mode>((j + k) % kModes);
          got[mode] = time_pass(images, r, mode, seed, k, &scratch, &full, &out);
        }
        for (int m = 0; m < kModes; ++m) {
          rate[m].push_back(got[m]);
          ratio[m].push_back(got[m] / got[kFull]);
        }
        loads.push_back(load1());
      }
      // The share of boxes the DCT scale rule reduces (box >= 2x the output on both axes).
      const dscache::TransformOptions o = options_of(r);
      size_t scaled = 0;
      for (int k = 0; k < rounds; ++k) {
        for (size_t i = 0; i < images.size(); ++i) {
          const dscache::CropBox b = dscache::choose_crop(o, images[i].h, images[i].w, seed, k, i);
          scaled += b.height >= 2 * r.size && b.width >= 2 * r.size;
        }
      }
      std::printf("%s: %.0f%% of boxes DCT-scaled\n", r.name,
                  100.0 * scaled / (images.size() * rounds));
      for (int m = 0; m < kModes; ++m) {
        const auto [lo, hi] = std::minmax_element(ratio[m].begin(), ratio[m].end());
        std::printf("  %-5s %7.0f img/s (median; %.0f..%.0f)", kModeNames[m], median(rate[m]),
                    *std::min_element(rate[m].begin(), rate[m].end()),
                    *std::max_element(rate[m].begin(), rate[m].end()));
        if (m != kFull) {
          std::printf("  %s / full %.2fx (median of rounds; %.2f..%.2f)", kModeNames[m],
                      median(ratio[m]), *lo, *hi);
        }
        std::printf("\n");
      }
    }
    std::printf("load average (1 min) during the run: median %.2f, %.2f..%.2f (%zu samples)\n",
                median(loads), *std::min_element(loads.begin(), loads.end()),
                *std::max_element(loads.begin(), loads.end()), loads.size());
  } catch (const dscache::Error& e) {
    std::fprintf(stderr, "jpeg_crop_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
