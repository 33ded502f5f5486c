// `dscache inspect CACHE [--json] [--sample I] [--grid N] [--out FILE.png]`
#include <boost/program_options.hpp>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cache_view.h"
#include "cli_util.h"
#include "commands.h"
#include "dscache/checksum.h"
#include "dscache/error.h"
#include "inspect_fields.h"

namespace dscache {
namespace po = boost::program_options;
using json = nlohmann::json;

namespace {

uint64_t total_bytes(const Manifest& m) {
  uint64_t b = m.labels.bytes + m.checksums.bytes + m.sources.bytes + m.skips.bytes + m.index.bytes;
  for (const auto& s : m.shards) b += s.bytes;
  return b;
}

// Sample bytes as stored (shards' data) and as decoded pixels, summed over the cache.
struct Sizes {
  uint64_t stored = 0;
  uint64_t raw = 0;
  double ratio() const { return raw == 0 ? 1.0 : static_cast<double>(stored) / raw; }
};

Sizes sample_sizes(CacheView& c) {
  const Manifest& m = c.manifest();
  Sizes s;
  if (!m.has_index()) {
    s.raw = s.stored = m.count * m.sample_bytes();
    return s;
  }
  // Rows checked by the library: sides in (0, 2^32), raw rows' bytes inside their shard.
  for (const IndexRow& row : c.index()) {
    const uint64_t raw = uint64_t{row.height} * row.width * m.channels;
    s.raw += raw;
    s.stored += row.length;
  }
  return s;
}

// Label `label`'s class name; an unlabeled cache (classes []) has none.
std::string class_name(const Manifest& m, int64_t label) {
  if (label >= 0 && static_cast<uint64_t>(label) < m.classes.size()) {
    return m.classes[static_cast<size_t>(label)];
  }
  return "label " + std::to_string(label);  // CacheDir::labels() checked it when classes exist
}

json summary_json(CacheView& c) {
  const Manifest& m = c.manifest();
  const Sizes sizes = sample_sizes(c);
  json skips = json::array();
  for (const auto& s : c.skips()) skips.push_back({{"source", s.source}, {"reason", s.reason}});
  return json{
      {"path", c.dir()},
      {"format_version", m.format_version},
      {"count", m.count},
      {"shape", {m.height, m.width, m.channels}},
      {"dtype", m.dtype},
      {"channel_order", m.channel_order},
      {"layout", to_string(m.layout)},
      {"storage", to_string(m.storage)},
      {"codec", to_string(m.codec)},
      {"fields", fields_json(m)},
      {"quality", m.codec == Codec::kJpeg ? json(m.recipe.quality) : json(nullptr)},
      {"stored_bytes", sizes.stored},
      {"raw_bytes", sizes.raw},
      {"stored_bytes_per_sample", m.count ? static_cast<double>(sizes.stored) / m.count : 0.0},
      {"ratio_to_raw", sizes.ratio()},
      {"shards", m.shards.size()},
      {"bytes", total_bytes(m)},
      {"classes", m.classes},
      {"class_counts", m.class_counts},
      {"skipped", m.skipped},
      {"skips", skips},
      {"source",
       {{"kind", m.source.kind},
        {"root", m.source.root},
        {"labels", m.source.labels},
        {"entries", m.source.entries},
        {"digest", hex64(m.source.digest)}}},
      {"recipe",
       {{"height", m.recipe.height},
        {"width", m.recipe.width},
        {"channels", m.recipe.channels},
        {"resize", to_string(m.recipe.resize)},
        {"reduced_decode", m.recipe.reduced_decode},
        {"max_pixels", m.recipe.max_pixels},
        {"shard_bytes", m.recipe.shard_bytes},
        {"max_side", m.recipe.max_side},
        {"shuffle_seed", m.recipe.shuffled ? json(m.recipe.shuffle_seed) : json(nullptr)},
        {"alpha", to_string(m.recipe.alpha)},
        {"background",
         m.recipe.alpha == AlphaMode::kComposite
             ? json{m.recipe.background[0], m.recipe.background[1], m.recipe.background[2]}
             : json(nullptr)}}},
      {"transparent", m.transparent_known ? json(m.transparent) : json(nullptr)},
      {"tool_version", m.tool_version},
      {"created_utc", m.created_utc},
      {"part", m.has_part ? json{{"index", m.part.index},
                                 {"count", m.part.count},
                                 {"first", m.part.first},
                                 {"entries", m.part.entries}}
                          : json(nullptr)},
  };
}

// "transparent sources: 123 of 500 (alpha: composite onto 255,255,255)"; the mode alone for a
// cache that has no count (written before it, or not by a build).
void print_transparency(const Manifest& m) {
  std::string mode = to_string(m.recipe.alpha);
  if (m.recipe.alpha == AlphaMode::kComposite) {
    const uint8_t* bg = m.recipe.background;
    mode += " onto " + std::to_string(bg[0]) + "," + std::to_string(bg[1]) + "," +
            std::to_string(bg[2]);
  }
  if (m.transparent_known) {
    std::printf("transparent sources: %llu of %llu (alpha: %s)\n",
                static_cast<unsigned long long>(m.transparent),
                static_cast<unsigned long long>(m.count), mode.c_str());
  } else {
    std::printf("transparent sources: not counted (alpha: %s)\n", mode.c_str());
  }
}

void print_summary(CacheView& c) {
  const Manifest& m = c.manifest();
  auto skips = c.skips();
  std::printf("cache      %s\n", c.dir().c_str());
  std::printf("samples    %llu (%llu source entries skipped)\n",
              static_cast<unsigned long long>(m.count), static_cast<unsigned long long>(m.skipped));
  print_transparency(m);
  if (m.layout == Layout::kRagged) {
    std::printf("shape      varies, shorter side <= %u, %u channel%s, %s, %s, layout ragged\n",
                m.recipe.max_side, m.channels, m.channels == 1 ? "" : "s", m.dtype.c_str(),
                m.channel_order.c_str());
  } else {
    std::printf("shape      %ux%ux%u (H x W x C), %s, %s, layout %s\n", m.height, m.width,
                m.channels, m.dtype.c_str(), m.channel_order.c_str(), to_string(m.layout));
  }
  std::printf("storage    %s, %zu shard%s, %s in all\n", to_string(m.storage), m.shards.size(),
              m.shards.size() == 1 ? "" : "s", format_bytes(total_bytes(m)).c_str());
  const Sizes sizes = sample_sizes(c);
  const double per_sample = m.count ? static_cast<double>(sizes.stored) / m.count : 0.0;
  if (m.codec == Codec::kJpeg) {
    std::printf("codec      jpeg, quality %u: %.0f bytes per sample, %.3f of raw (%s vs %s)\n",
                m.recipe.quality, per_sample, sizes.ratio(), format_bytes(sizes.stored).c_str(),
                format_bytes(sizes.raw).c_str());
  } else {
    std::printf("codec      raw: %.0f bytes per sample\n", per_sample);
  }
  std::printf("source     %s %s (%llu entries)\n", m.source.kind.c_str(), m.source.root.c_str(),
              static_cast<unsigned long long>(m.source.entries));
  // source.labels is the idx labels file, or a COCO source's image root (--image-root).
  if (!m.source.labels.empty()) {
    std::printf("%s %s\n", m.source.kind == "coco" ? "images    " : "labels    ",
                m.source.labels.c_str());
  }
  if (m.has_part) {
    std::printf(
        "part       %u of %u (0-based): positions [%llu, %llu) of the listing's order; "
        "join the parts with dscache merge\n",
        m.part.index, m.part.count, static_cast<unsigned long long>(m.part.first),
        static_cast<unsigned long long>(m.part.first + m.part.entries));
  }
  // The ragged layout keeps each image's aspect (no --resize mode applies): say what it did.
  const std::string resize = m.layout == Layout::kRagged
                                 ? "shorter side scaled to at most " +
                                       std::to_string(m.recipe.max_side) + " px (aspect kept)"
                                 : std::string("resize ") + to_string(m.recipe.resize);
  std::printf("recipe     %s, reduced JPEG decode %s, max %llu pixels, shard cap %s\n",
              resize.c_str(), m.recipe.reduced_decode ? "on" : "off",
              static_cast<unsigned long long>(m.recipe.max_pixels),
              format_bytes(m.recipe.shard_bytes).c_str());
  if (m.recipe.shuffled) {
    std::printf(
        "order      shuffled at build time (--shuffle %llu); sources.jsonl maps each sample\n",
        static_cast<unsigned long long>(m.recipe.shuffle_seed));
  } else {
    std::printf("order      source order\n");
  }
  std::printf("built      %s by dscache %s (format %d)\n", m.created_utc.c_str(),
              m.tool_version.c_str(), m.format_version);
  std::printf("classes    %zu\n", m.classes.size());
  size_t width = 5;
  for (const auto& n : m.classes) width = std::max(width, n.size());
  for (size_t i = 0; i < m.classes.size(); ++i) {
    std::printf("  %3zu  %-*s %8llu\n", i, static_cast<int>(width), m.classes[i].c_str(),
                static_cast<unsigned long long>(m.class_counts[i]));
  }
  print_fields(m);
  if (!skips.empty()) {
    std::printf("skipped    %zu\n", skips.size());
    size_t shown = std::min<size_t>(skips.size(), 20);
    for (size_t i = 0; i < shown; ++i) {
      std::printf("  %s: %s\n", skips[i].source.c_str(), skips[i].reason.c_str());
    }
    if (shown < skips.size()) {
      std::printf("  ... %zu more in %s\n", skips.size() - shown, c.path(m.skips.file).c_str());
    }
  }
}

// Sample i as an OpenCV BGR (grey, BGRA) image ready for imwrite.
cv::Mat sample_image(CacheView& c, uint64_t i) {
  const Manifest& m = c.manifest();
  std::vector<uint8_t> pixels;
  uint32_t h = 0, w = 0;
  c.read_sample(i, &pixels, &h, &w);
  if (h > 32767 || w > 32767) {  // OpenCV's image functions stop at 2^15 per side
    throw Error(ErrorKind::kUnsupported, c.path(c.shard_of(i).file),
                "sample " + std::to_string(i) + " is " + std::to_string(h) + "x" +
                    std::to_string(w) + ", too large to draw");
  }
  cv::Mat img(static_cast<int>(h), static_cast<int>(w), CV_8UC(static_cast<int>(m.channels)),
              pixels.data());
  cv::Mat out;
  if (m.channels == 3) {
    cv::cvtColor(img, out, cv::COLOR_RGB2BGR);
  } else if (m.channels == 4) {
    cv::cvtColor(img, out, cv::COLOR_RGBA2BGRA);
  } else {
    out = img.clone();
  }
  return out;
}

// Grey or BGRA (its alpha dropped: a contact sheet has no transparency) to BGR.
void to_bgr(cv::Mat* img) {
  if (img->channels() == 1) cv::cvtColor(*img, *img, cv::COLOR_GRAY2BGR);
  if (img->channels() == 4) cv::cvtColor(*img, *img, cv::COLOR_BGRA2BGR);
}

// Sample i with its masks and boxes drawn over it (caches with such fields), scaled up to at
// least 256 pixels on its longer side so that boxes and names are readable, and a legend below.
cv::Mat sample_picture(CacheView& c, uint64_t i, const SampleFields& f) {
  cv::Mat img = sample_image(c, i);
  if (!has_drawn_fields(c.manifest())) return img;
  to_bgr(&img);
  const int scale = std::max(1, static_cast<int>(std::ceil(256.0 / std::max(img.rows, img.cols))));
  cv::Mat big;
  cv::resize(img, big, cv::Size(img.cols * scale, img.rows * scale), 0, 0, cv::INTER_NEAREST);
  draw_fields(c.manifest(), f, true, &big);
  cv::Mat legend = fields_legend(c.manifest(), f, big.cols);
  if (legend.empty()) return big;
  cv::Mat out;
  cv::vconcat(big, legend, out);
  return out;
}

void write_png(const std::string& path, const cv::Mat& img) {
  bool ok = false;
  try {
    ok = cv::imwrite(path, img);
  } catch (const cv::Exception& e) {
    throw Error(ErrorKind::kIOError, path, e.what());
  }
  if (!ok) throw Error(ErrorKind::kIOError, path, "cannot write the image (is it a .png path?)");
}

// A contact sheet: n samples spread evenly over the cache, each with its class name below.
cv::Mat contact_sheet(CacheView& c, uint64_t n, const std::vector<int64_t>& labels) {
  const Manifest& m = c.manifest();
  n = std::min<uint64_t>(n, m.count);
  int cols = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(n))));
  int rows = static_cast<int>((n + cols - 1) / cols);
  // Ragged samples are fitted into 128x128 cells; fixed ones are scaled up to at least 96 px.
  // Masks and boxes are drawn over the cells, which are then larger (at least 160 px).
  const bool ragged = m.layout == Layout::kRagged;
  const bool drawn = has_drawn_fields(m);
  const double least = drawn ? 160.0 : 96.0;
  int scale =
      ragged ? 1 : std::max(1, static_cast<int>(std::ceil(least / std::max(m.height, m.width))));
  int cw = ragged ? (drawn ? 192 : 128) : static_cast<int>(m.width) * scale;
  int ch = ragged ? (drawn ? 192 : 128) : static_cast<int>(m.height) * scale;
  int strip = 16, pad = 4;
  cv::Mat sheet(rows * (ch + strip + pad) + pad, cols * (cw + pad) + pad, CV_8UC3,
                cv::Scalar(40, 40, 40));
  for (uint64_t k = 0; k < n; ++k) {
    uint64_t i = k * m.count / n;
    cv::Mat img = sample_image(c, i);
    to_bgr(&img);
    int x = pad + static_cast<int>(k % cols) * (cw + pad);
    int y = pad + static_cast<int>(k / cols) * (ch + strip + pad);
    if (ragged) {
      double s = std::min(double(cw) / img.cols, double(ch) / img.rows);
      int w = std::max(1, static_cast<int>(img.cols * s)),
          h = std::max(1, static_cast<int>(img.rows * s));
      cv::Mat fit;
      cv::resize(img, fit, cv::Size(w, h), 0, 0, s < 1 ? cv::INTER_AREA : cv::INTER_LINEAR);
      if (drawn) draw_fields(m, read_sample_fields(c, i, img.rows, img.cols), true, &fit);
      fit.copyTo(sheet(cv::Rect(x + (cw - w) / 2, y + (ch - h) / 2, w, h)));
    } else {
      cv::Mat big;
      cv::resize(img, big, cv::Size(cw, ch), 0, 0, cv::INTER_NEAREST);
      if (drawn) draw_fields(m, read_sample_fields(c, i, img.rows, img.cols), true, &big);
      big.copyTo(sheet(cv::Rect(x, y, cw, ch)));
    }
    // An unlabeled cache (COCO) has no class to name: its sample number instead.
    std::string text = m.classes.empty() ? "#" + std::to_string(i) : class_name(m, labels[i]);
    double fs = 0.4;
    int base = 0;
    while (text.size() > 1 &&
           cv::getTextSize(text, cv::FONT_HERSHEY_SIMPLEX, fs, 1, &base).width > cw) {
      text.pop_back();
    }
    cv::putText(sheet, text, cv::Point(x + 1, y + ch + 12), cv::FONT_HERSHEY_SIMPLEX, fs,
                cv::Scalar(235, 235, 235), 1, cv::LINE_AA);
  }
  return sheet;
}

// What `dscache inspect` was asked to do.
struct InspectArgs {
  std::string dir;       // CACHE
  std::string out;       // --out FILE.png, or ""
  int64_t sample = -1;   // --sample I, or -1
  int64_t grid = 0;      // --grid N, or 0
  bool as_json = false;  // --json
};

// Parses the command line into `a`. Returns false when --help was asked for (and printed).
// Throws UsageError naming the option.
bool parse_inspect_command_line(int argc, char** argv, InspectArgs* a) {
  po::options_description desc(
      "Usage: dscache inspect CACHE [options]\n\nSummarize a cache, or show its "
      "samples.\n\nOptions");
  desc.add_options()("help,h", "show this help")("json", "machine-readable output")(
      "sample", po::value(&a->sample),
      "print sample I's label, source and fields (with --out: write its picture; masks and boxes "
      "drawn over it, scaled up, with a legend)")("grid", po::value(&a->grid),
                                                  "with --out: write a contact sheet of N samples")(
      "out", po::value(&a->out), "PNG file for --sample or --grid");
  po::variables_map vm;
  if (!parse_cache_args(argc, argv, desc, "inspect", &a->dir, &vm)) return false;
  a->as_json = vm.count("json") > 0;
  if (vm.count("sample") && a->sample < 0) throw UsageError("--sample must be >= 0");
  if (vm.count("grid") && (a->grid <= 0 || a->grid > 10000))
    throw UsageError("--grid must be 1..10000");
  if (vm.count("grid") && a->out.empty()) throw UsageError("--grid needs --out FILE.png");
  if (vm.count("grid") && vm.count("sample")) throw UsageError("use --sample or --grid, not both");
  return true;
}

// --sample I: its label, class, source and shard (and its image with --out).
void show_sample(CacheView& c, const InspectArgs& a) {
  const Manifest& m = c.manifest();
  const auto i = static_cast<uint64_t>(a.sample);
  if (i >= m.count) {
    throw UsageError("--sample " + std::to_string(i) + " out of range: the cache holds " +
                     std::to_string(m.count));
  }
  auto labels = c.labels();
  auto sources = c.sources();
  c.shard(static_cast<size_t>(&c.shard_of(i) - m.shards.data()));  // header vs manifest
  const std::string cls = class_name(m, labels[i]);
  SampleFields fields;
  if (!m.fields.empty()) {
    uint32_t h = m.height, w = m.width;
    if (m.has_index()) {
      h = c.index()[i].height;
      w = c.index()[i].width;
    }
    fields = read_sample_fields(c, i, h, w);
  }
  if (!a.out.empty()) write_png(a.out, sample_picture(c, i, fields));
  if (a.as_json) {
    json j{{"index", i},
           {"label", labels[i]},
           {"class", cls},
           {"source", sources[i]},
           {"shard", c.shard_of(i).file}};
    if (!m.fields.empty()) j["fields"] = sample_fields_json(m, fields);
    if (!a.out.empty()) j["out"] = a.out;
    // Text fields are UTF-8 when the build wrote them; a damaged byte shows as U+FFFD.
    std::printf("%s\n", j.dump(2, ' ', false, json::error_handler_t::replace).c_str());
  } else {
    // An unlabeled cache (classes []) has no name to put beside the label.
    const std::string named = m.classes.empty() ? "" : " (" + cls + ")";
    std::printf("sample %llu: label %lld%s, source %s, shard %s\n",
                static_cast<unsigned long long>(i), static_cast<long long>(labels[i]),
                named.c_str(), sources[i].c_str(), c.shard_of(i).file.c_str());
    if (!m.fields.empty()) std::printf("fields\n");
    print_sample_fields(m, fields);
    if (!a.out.empty()) std::printf("wrote %s\n", a.out.c_str());
  }
}

// --grid N --out FILE.png. An empty cache is valid: there is nothing to draw, and no file.
void write_grid(CacheView& c, const InspectArgs& a) {
  const Manifest& m = c.manifest();
  if (m.count == 0) {
    std::fprintf(stderr, "dscache inspect: --grid: %s holds no samples to show; %s not written\n",
                 a.dir.c_str(), a.out.c_str());
    return;
  }
  write_png(a.out, contact_sheet(c, static_cast<uint64_t>(a.grid), c.labels()));
  std::printf("wrote %s (%lld samples)\n", a.out.c_str(),
              static_cast<long long>(std::min<uint64_t>(a.grid, m.count)));
}

int inspect(int argc, char** argv) {
  InspectArgs a;
  if (!parse_inspect_command_line(argc, argv, &a)) return to_int(ExitCode::kOk);
  CacheView c(a.dir);
  // Every mode opens through Cache::open's checks (CacheDir::check_open): what it refuses,
  // inspect refuses too, before printing anything.
  c.files().check_open();
  try {
    if (a.sample >= 0) {
      show_sample(c, a);
      return to_int(ExitCode::kOk);
    }
    if (a.grid > 0) {
      write_grid(c, a);
      return to_int(ExitCode::kOk);
    }
  } catch (const cv::Exception&) {
    // Our checks should leave OpenCV nothing to refuse; never show its assertion text.
    throw std::runtime_error(a.dir + ": could not draw the samples (image library error)");
  }
  if (a.as_json) {
    std::printf("%s\n", summary_json(c).dump(2).c_str());
  } else {
    print_summary(c);
  }
  return to_int(ExitCode::kOk);
}

}  // namespace

int cmd_inspect(int argc, char** argv) {
  return run_command("dscache inspect", [&] { return inspect(argc, argv); });
}

}  // namespace dscache
