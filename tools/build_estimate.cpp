// The size of a build's output before it is written (build_estimate.h): the shard cut and every
// file's bytes follow the cache writer (docs/FORMAT.md), from sample sizes that are exact for a
// fixed raw layout, read from the image headers for the ragged layout, and extrapolated from a
// few encoded sources for the JPEG codec.
#include "build_estimate.h"

#include <algorithm>
#include <numeric>

#include <nlohmann/json.hpp>

#include "build_decode.h"
#include "dscache/file.h"
#include "dscache/ingest/image_decode.h"
#include "dscache/npy.h"
#include "dscache/sampler.h"
#include "dscache/shard.h"

namespace dscache {
namespace {

constexpr uint64_t kHeaderRead = uint64_t{64} << 10;  // first try at an image header
constexpr uint64_t kHeaderMost = uint64_t{1} << 20;   // ... and the most read for one (EXIF)
constexpr uint64_t kMost = uint64_t{1} << 62;         // a shape bound that sizes npy headers
// The resume state's model (a sidecar is JSON: the shard's entry, then per sample its label, its
// checksums as decimal numbers, its source and index row).
constexpr uint64_t kSidecarBase = 512;
constexpr uint64_t kSidecarPerSample = 24;    // a label and the separators
constexpr uint64_t kSidecarPerColumn = 21;    // a checksum: up to 20 digits and a comma
constexpr uint64_t kSidecarPerIndex = 12;     // an index value
constexpr uint64_t kFingerprintBytes = 2048;  // .build.json

// One position of the range: the sample it should become (or a skip).
struct Planned {
  uint64_t entry = 0;
  uint32_t height = 0, width = 0;  // the stored sample's size; 0 x 0 = a skip
  uint64_t image = 0;              // stored image bytes
  std::string reason;              // a skip's reason
};

uint64_t npy_header_bytes(const char* descr, std::vector<uint64_t> shape) {
  return format_npy_header(descr, shape).size();
}

enum class Header { kDims, kNoDims, kNotImage };

// The header dims of a source image file: kNotImage for what the build will skip whatever its
// bytes (no such file, not a regular file, empty, no image format's magic), kNoDims for an image
// whose header says no size (its size is then guessed).
Header header_dims(const std::string& path, uint32_t* h, uint32_t* w) {
  try {
    const File f = File::open(path);  // a FIFO or device is refused, never read
    for (uint64_t n = kHeaderRead;; n = std::min(kHeaderMost, n * 4)) {
      const uint64_t take = std::min(n, f.size());
      std::vector<uint8_t> head(static_cast<size_t>(take));
      f.read_at(0, take, head.data());
      const ImageHeaderInfo info = read_image_header(head.data(), head.size());
      if (info.format == ImageFormat::kUnknown) return Header::kNotImage;
      if (info.dims_known && info.width > 0 && info.height > 0) {
        *h = info.height;
        *w = info.width;
        return Header::kDims;
      }
      if (take == f.size() || n == kHeaderMost) return Header::kNoDims;
    }
  } catch (const Error&) {
    return Header::kNotImage;
  }
}

// The sizes of the samples at positions [first, end); ragged samples from their headers. Returns
// how many sizes had to be guessed (no readable header: the mean of the others).
uint64_t plan_samples(const BuildOptions& opt, const SourceListing& src, const BuildRecipe& r,
                      const std::vector<uint64_t>& order, uint64_t first, uint64_t end,
                      std::vector<Planned>* plan) {
  const bool ragged = opt.layout == Layout::kRagged;
  std::vector<size_t> guessed;
  uint64_t known_pixels = 0, known = 0;
  for (uint64_t k = first; k < end; ++k) {
    Planned p;
    p.entry = order[k];
    const SourceEntry& e = src.entries[p.entry];
    if (!e.bad.empty()) {
      p.reason = e.bad;
    } else if (!ragged) {
      p.height = r.height;
      p.width = r.width;
    } else {
      uint32_t h = 0, w = 0;
      if (src.kind == "idx") {
        h = src.idx->rows;
        w = src.idx->cols;
      } else {
        const Header got = header_dims(e.path, &h, &w);
        if (got == Header::kNoDims) guessed.push_back(plan->size());
        if (got == Header::kNotImage) p.reason = "not an image (empty, unreadable or no format)";
      }
      if (!p.reason.empty()) {
        // a skip
      } else if (h != 0 && r.max_pixels != 0 && uint64_t{h} * w > r.max_pixels) {
        p.reason = "image too large: its header claims more than --max-pixels";
      } else if (h != 0) {
        ragged_size(h, w, r.max_side, &p.height, &p.width);
        known_pixels += uint64_t{p.height} * p.width;
        ++known;
      }
    }
    plan->push_back(p);
  }
  const uint64_t mean = known ? known_pixels / known : uint64_t{r.max_side} * r.max_side;
  for (size_t i : guessed) {
    (*plan)[i].height = 1;
    (*plan)[i].width = static_cast<uint32_t>(std::max<uint64_t>(1, mean));
  }
  for (Planned& p : *plan) p.image = uint64_t{p.height} * p.width * r.channels;
  return guessed.size();
}

// JPEG: the stored/raw byte ratio of up to kJpegSampleCount samples spread over the plan,
// decoded and encoded as the build does. Returns how many were encoded (0: ratio unknown).
uint64_t jpeg_ratio(const BuildOptions& opt, const SourceListing& src, const BuildRecipe& r,
                    const std::vector<Planned>& plan, double* ratio) {
  std::vector<size_t> good;
  for (size_t i = 0; i < plan.size(); ++i) {
    if (plan[i].height != 0) good.push_back(i);
  }
  const uint64_t want = std::min<uint64_t>(kJpegSampleCount, good.size());
  const SampleDecoder decoder(src, r, opt.layout == Layout::kRagged, Codec::kJpeg);
  uint64_t raw = 0, stored = 0, done = 0;
  for (uint64_t s = 0; s < want; ++s) {
    Token t;
    t.entry = plan[good[s * good.size() / want]].entry;
    t.pixels.resize(decoder.fixed_bytes());
    decoder.decode(&t);
    if (!t.ok) continue;
    raw += uint64_t{t.height} * t.width * r.channels;
    stored += t.stored.size();
    ++done;
  }
  *ratio = raw ? static_cast<double>(stored) / static_cast<double>(raw) : 1.0;
  return done;
}

// A field's stored bytes for one sample (its values; offsets are counted per shard).
uint64_t field_value_bytes(const FieldSpec& f, const SourceListing& src, const Planned& p,
                           size_t field) {
  if (f.kind == FieldKind::kMask) return uint64_t{p.height} * p.width * element_bytes(f.dtype);
  if (!f.variable()) return f.row_bytes();
  // Variable kinds as listed (boxes in source pixels: a box the crop removes is not dropped here).
  return src.columns.get(field, p.entry).bytes;
}

std::vector<uint64_t> field_header_shape(const FieldSpec& f, const BuildRecipe& r, Layout layout) {
  std::vector<uint64_t> shape{kMost};
  if (f.kind == FieldKind::kMask && layout == Layout::kFixed) {
    shape.push_back(r.height);
    shape.push_back(r.width);
  }
  if (f.kind == FieldKind::kArray || f.kind == FieldKind::kRows || f.kind == FieldKind::kBoxes) {
    for (uint32_t d : f.shape) shape.push_back(d);
  }
  return shape;
}

}  // namespace

uint64_t allocated_bytes(const BuildEstimate& est, uint64_t block) {
  uint64_t total = 0;
  for (const auto* list : {&est.files, &est.transient}) {
    for (uint64_t b : *list) total += block == 0 ? b : (b + block - 1) / block * block;
  }
  return total;
}

BuildEstimate estimate_build(const BuildOptions& opt, const SourceListing& src,
                             const BuildRecipe& r, uint64_t first, uint64_t end) {
  const uint64_t n = src.entries.size();
  std::vector<uint64_t> order;
  if (r.shuffled) {
    order = build_order(n, r.shuffle_seed);
  } else {
    order.resize(n);
    std::iota(order.begin(), order.end(), uint64_t{0});
  }
  BuildEstimate est;
  est.entries = end - first;
  std::vector<Planned> plan;
  const uint64_t guessed = plan_samples(opt, src, r, order, first, end, &plan);
  const bool ragged = opt.layout == Layout::kRagged;
  est.basis = ragged && src.kind != "idx" ? "from the image headers of the sources"
                                          : "exact (every sample's size is known)";
  if (guessed != 0) {
    est.notes.push_back(std::to_string(guessed) +
                        " sources have no readable image header: counted at the mean size");
  }
  if (opt.codec == Codec::kJpeg) {
    double ratio = 1;
    const uint64_t encoded = jpeg_ratio(opt, src, r, plan, &ratio);
    uint64_t m = 0;
    for (Planned& p : plan) {
      if (p.height == 0) continue;
      p.image = std::max<uint64_t>(1, static_cast<uint64_t>(static_cast<double>(p.image) * ratio));
      ++m;
    }
    est.basis = "estimate from " + std::to_string(encoded) + " of " + std::to_string(m) +
                " sources encoded at quality " + std::to_string(r.quality);
    if (encoded == 0) est.basis += " (none decoded: counted as raw pixels)";
  }

  const std::vector<FieldSpec>& fields = src.fields;
  const bool byte_shards = ragged || opt.codec == Codec::kJpeg;
  const uint64_t sample_bytes = uint64_t{r.height} * r.width * r.channels;
  const uint64_t per_shard = byte_shards ? 0 : std::max<uint64_t>(1, r.shard_bytes / sample_bytes);

  Manifest m;
  m.format_version = format_version_for(opt.codec, !fields.empty());
  m.layout = opt.layout;
  m.storage = opt.storage;
  m.codec = opt.codec;
  m.fields = fields;
  m.height = ragged ? 0 : r.height;
  m.width = ragged ? 0 : r.width;
  m.channels = r.channels;
  m.channel_order = r.channels == 3 ? "RGB" : "L";
  m.classes = src.classes;
  m.class_counts.assign(src.classes.size(), 0);
  m.source = SourceRecord{src.kind, src.root, src.labels_path, n, src.digest};
  m.recipe = r;
  m.tool_version = DSCACHE_VERSION;
  m.created_utc = "2000-01-01T00:00:00Z";
  m.has_part = opt.part_count != 0;
  m.part = PartRecord{opt.part_index, opt.part_count, first, end - first};

  uint64_t sources_bytes = 0, skips_bytes = 0, shard_data = 0, shard_count = 0, sidecar = 0;
  const uint64_t index_cols = opt.codec == Codec::kJpeg ? 4 : ragged ? 3 : 0;
  est.transient.push_back(kFingerprintBytes);
  std::vector<uint64_t> shard_fields(fields.size(), 0);  // this shard's field value bytes
  auto close_shard = [&](const std::vector<uint64_t>& npy_shape) {
    ShardEntry s;
    s.file = shard_file_name(opt.storage, m.shards.size());
    s.first = m.shards.empty() ? 0 : m.shards.back().first + m.shards.back().count;
    s.count = shard_count;
    s.bytes = shard_data + (opt.storage == Storage::kHdf5 ? kHdf5ShardOverhead + 8 * shard_count
                                                          : npy_header_bytes("|u1", npy_shape));
    s.xxh64 = ~uint64_t{0};
    for (size_t f = 0; f < fields.size(); ++f) {
      FieldFiles ff;
      ff.values.file = field_file_name(fields[f].name, m.shards.size(), false);
      ff.values.bytes = npy_header_bytes(npy_descr(fields[f].dtype),
                                         field_header_shape(fields[f], r, opt.layout)) +
                        shard_fields[f];
      ff.values.xxh64 = ~uint64_t{0};
      est.field_bytes += ff.values.bytes;
      est.files.push_back(ff.values.bytes);
      if (has_offsets(fields[f], opt.layout)) {
        ff.offsets.file = field_file_name(fields[f].name, m.shards.size(), true);
        ff.offsets.bytes = npy_header_bytes("<i8", {shard_count + 1}) + 8 * (shard_count + 1);
        ff.offsets.xxh64 = ~uint64_t{0};
        est.field_bytes += ff.offsets.bytes;
        est.files.push_back(ff.offsets.bytes);
      }
      s.fields.push_back(ff);
      shard_fields[f] = 0;
    }
    est.bytes += s.bytes;
    est.files.push_back(s.bytes);
    est.transient.push_back(kSidecarBase + sidecar);
    sidecar = 0;
    m.shards.push_back(s);
    shard_data = 0;
    shard_count = 0;
  };
  uint64_t capacity = 0;  // byte shards: the open shard's byte capacity (its npy header's shape)
  for (const Planned& p : plan) {
    const SourceEntry& e = src.entries[p.entry];
    if (p.height == 0) {
      const uint64_t line =
          nlohmann::json{{"source", e.name}, {"reason", p.reason}}.dump().size() + 1;
      skips_bytes += line;
      sidecar += line;
      ++est.skips;
      continue;
    }
    if (byte_shards) {
      if (shard_count > 0 && shard_data + p.image > r.shard_bytes) {
        close_shard({capacity});
      }
      if (shard_count == 0) capacity = std::max(r.shard_bytes, p.image);
    }
    shard_data += p.image;
    ++shard_count;
    for (size_t f = 0; f < fields.size(); ++f) {
      shard_fields[f] += field_value_bytes(fields[f], src, p, f);
    }
    est.image_bytes += p.image;
    const uint64_t name = nlohmann::json(e.name).dump().size() + 1;
    sources_bytes += name;
    sidecar += name + kSidecarPerSample + kSidecarPerColumn * (1 + fields.size()) +
               kSidecarPerIndex * index_cols;
    if (!m.classes.empty() && e.label >= 0 && static_cast<size_t>(e.label) < m.classes.size()) {
      ++m.class_counts[static_cast<size_t>(e.label)];
    }
    ++est.samples;
    if (!byte_shards && shard_count == per_shard) {
      close_shard({per_shard, r.height, r.width, r.channels});
    }
  }
  if (shard_count > 0) {
    if (byte_shards) {
      close_shard({capacity});
    } else {
      close_shard({per_shard, r.height, r.width, r.channels});
    }
  }
  est.shards = m.shards.size();
  est.bytes += est.field_bytes;

  const uint64_t count = est.samples;
  m.count = count;
  m.skipped = est.skips;
  auto side = [&](FileEntry* f, const char* name, uint64_t bytes) {
    f->file = name;
    f->bytes = bytes;
    f->xxh64 = ~uint64_t{0};
    est.bytes += bytes;
    est.files.push_back(bytes);
  };
  side(&m.labels, "labels.npy", npy_header_bytes("<i8", {count}) + 8 * count);
  const uint64_t columns = 1 + fields.size();
  side(&m.checksums, "checksums.npy",
       npy_header_bytes("<u8", fields.empty() ? std::vector<uint64_t>{count}
                                              : std::vector<uint64_t>{count, columns}) +
           8 * count * columns);
  side(&m.sources, "sources.jsonl", sources_bytes);
  side(&m.skips, "skipped.jsonl", skips_bytes);
  if (m.has_index()) {
    const uint64_t cols = opt.codec == Codec::kJpeg ? 4 : 3;
    side(&m.index, opt.codec == Codec::kJpeg ? "jpeg-index.npy" : "ragged-index.npy",
         npy_header_bytes("<i8", {count, cols}) + 8 * count * cols);
  }
  est.files.push_back(to_json(m).size());
  est.bytes += est.files.back();
  for (const FieldSpec& f : fields) {
    if (f.kind == FieldKind::kBoxes) {
      est.notes.push_back("field '" + f.name +
                          "': boxes counted as listed; those a crop removes are not written "
                          "(an overestimate of at most 16 bytes per box)");
    }
  }
  return est;
}

}  // namespace dscache
