// The size of a build's output before it is written (build_estimate.h): the shard cut and every
// file's bytes follow the cache writer (docs/FORMAT.md), from sample sizes that are exact for a
// fixed raw layout, read from the image headers for the ragged layout, and extrapolated from a
// few encoded sources for the JPEG codec.
#include "build_estimate.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include <nlohmann/json.hpp>

#include "build_decode.h"
#include "dscache/file.h"
#include "dscache/ingest/image_decode.h"
#include "dscache/npy.h"
#include "dscache/remote.h"
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
// What one position will be: 12 bytes, stored for the ragged layout only (its sizes come from
// the image headers); a fixed layout's are the recipe's or a listed skip, recomputed. What every
// position shares or can recompute (its entry: order[first + i]; its bytes: height x width x
// channels, times the JPEG ratio) is never stored: at 1.28M samples a plan of 56-byte positions
// was the largest allocation of a dry run (issue 33).
struct Planned {
  uint32_t height = 0, width = 0;  // the stored sample's size; 0 x 0 = a skip
  uint32_t reason = 0;             // a skip's reason: Plan::reasons[reason], or kListedBad
};
constexpr uint32_t kListedBad = UINT32_MAX;  // the reason is the entry's SourceEntry::bad

// The positions first..end of the build order, in order, and what their samples will be.
struct Plan {
  Plan(const SourceListing& s, const BuildRecipe& recipe, const std::vector<uint64_t>& o,
       uint64_t f, uint64_t e)
      : src(s), r(recipe), order(o), first(f), end(e) {}
  const SourceListing& src;
  const BuildRecipe& r;
  const std::vector<uint64_t>& order;
  const uint64_t first, end;
  std::vector<Planned> samples;          // the ragged layout's, else empty
  std::vector<std::string> reasons{""};  // [0]: no reason
  double ratio = 1;                      // stored / raw bytes (JPEG: measured on a few)
  size_t size() const { return end - first; }
  uint64_t entry(size_t i) const { return order[first + i]; }
  Planned at(size_t i) const {
    if (!samples.empty()) return samples[i];
    if (!src.entries.bad(entry(i)).empty()) return Planned{0, 0, kListedBad};
    return Planned{r.height, r.width, 0};
  }
  const std::string& reason(size_t i, const Planned& p) const {
    return p.reason == kListedBad ? src.entries.bad(entry(i)) : reasons[p.reason];
  }
  uint32_t add_reason(std::string why) {
    if (why.empty()) return 0;
    reasons.push_back(std::move(why));
    return static_cast<uint32_t>(reasons.size() - 1);
  }
};

uint64_t npy_header_bytes(const char* descr, std::vector<uint64_t> shape) {
  return format_npy_header(descr, shape).size();
}

enum class Header { kDims, kNoDims, kNotImage };

// The header dims of a source image file: kNotImage for what the build will skip whatever its
// bytes (no such file, not a regular file, empty, no image format's magic), kNoDims for an image
// whose header says no size, or an object on object storage, whose header would cost a request
// per image before the build reads it (its size is then guessed).
Header header_dims(const std::string& path, uint32_t* h, uint32_t* w) {
  if (is_remote_location(path)) return Header::kNoDims;
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
                      Plan* plan) {
  if (opt.layout != Layout::kRagged) return 0;  // Plan::at knows every position
  std::vector<size_t> guessed;
  uint64_t known_pixels = 0, known = 0;
  plan->samples.reserve(plan->size());
  for (uint64_t k = plan->first; k < plan->end; ++k) {
    Planned p;
    const uint64_t entry = plan->order[k];
    const std::string& bad = src.entries.bad(entry);
    if (!bad.empty()) {
      p.reason = kListedBad;
    } else {
      uint32_t h = 0, w = 0;
      if (src.kind == "idx") {
        h = src.idx->rows;
        w = src.idx->cols;
      } else {
        const Header got = header_dims(src.entries.path(entry), &h, &w);
        if (got == Header::kNoDims) guessed.push_back(plan->samples.size());
        if (got == Header::kNotImage) {
          p.reason = plan->add_reason("not an image (empty, unreadable or no format)");
        }
      }
      if (p.reason != 0) {
        // a skip
      } else if (h != 0 && r.max_pixels != 0 && uint64_t{h} * w > r.max_pixels) {
        p.reason = plan->add_reason("image too large: its header claims more than --max-pixels");
      } else if (h != 0) {
        ragged_size(h, w, r.max_side, &p.height, &p.width);
        known_pixels += uint64_t{p.height} * p.width;
        ++known;
      }
    }
    plan->samples.push_back(p);
  }
  const uint64_t mean = known ? known_pixels / known : uint64_t{r.max_side} * r.max_side;
  for (size_t i : guessed) {
    plan->samples[i].height = 1;
    plan->samples[i].width = static_cast<uint32_t>(std::max<uint64_t>(1, mean));
  }
  return guessed.size();
}

// JPEG: the stored/raw byte ratio of up to kJpegSampleCount samples spread over the plan,
// decoded and encoded as the build does. Returns how many were encoded (0: ratio unknown).
uint64_t jpeg_ratio(const BuildOptions& opt, const SourceListing& src, const BuildRecipe& r,
                    const Plan& plan, double* ratio) {
  uint64_t good = 0;
  for (size_t i = 0; i < plan.size(); ++i) good += plan.at(i).height != 0;
  const uint64_t want = std::min<uint64_t>(kJpegSampleCount, good);
  const SampleDecoder decoder(src, r, opt.layout == Layout::kRagged, Codec::kJpeg);
  uint64_t raw = 0, stored = 0, done = 0;
  size_t i = 0, rank = 0;  // position i is the rank-th good one
  for (uint64_t s = 0; s < want; ++s) {
    const uint64_t target = s * good / want;  // the good positions spread evenly
    for (;; ++i) {
      if (plan.at(i).height == 0) continue;
      if (rank++ == target) break;
    }
    Token t;
    t.entry = plan.entry(i++);
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
uint64_t field_value_bytes(const FieldSpec& f, const SourceListing& src, uint64_t entry,
                           const Planned& p, size_t field) {
  if (f.kind == FieldKind::kMask) return uint64_t{p.height} * p.width * element_bytes(f.dtype);
  if (!f.variable()) return f.row_bytes();
  // Variable kinds as listed (boxes in source pixels: a box the crop removes is not dropped here).
  return src.columns.get(field, entry).bytes;
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

// The manifest the build will write, but for its shards, counts and side files (which the
// tally fills in): its size is part of the estimate.
Manifest manifest_skeleton(const BuildOptions& opt, const SourceListing& src, const BuildRecipe& r,
                           uint64_t first, uint64_t end) {
  const bool ragged = opt.layout == Layout::kRagged;
  Manifest m;
  m.format_version = format_version_for(opt.codec, !src.fields.empty());
  m.layout = opt.layout;
  m.storage = opt.storage;
  m.codec = opt.codec;
  m.fields = src.fields;
  m.height = ragged ? 0 : r.height;
  m.width = ragged ? 0 : r.width;
  m.channels = r.channels;
  m.channel_order = r.channels == 3 ? "RGB" : "L";
  m.classes = src.classes;
  m.class_counts.assign(src.classes.size(), 0);
  m.source = SourceRecord{src.kind, src.root, src.labels_path, src.entries.size(), src.digest};
  m.recipe = r;
  m.tool_version = DSCACHE_VERSION;
  m.created_utc = "2000-01-01T00:00:00Z";
  m.has_part = opt.part_count != 0;
  m.part = PartRecord{opt.part_index, opt.part_count, first, end - first};
  return m;
}

// Cuts the planned samples into shards as the cache writer does and adds up every file's bytes
// into an estimate. One per estimate; add() each position in order, then finish().
class Tally {
 public:
  Tally(const BuildOptions& opt, const SourceListing& src, const BuildRecipe& r, Manifest m,
        BuildEstimate* est)
      : opt_(opt),
        src_(src),
        r_(r),
        m_(std::move(m)),
        est_(*est),
        byte_shards_(opt.layout == Layout::kRagged || opt.codec == Codec::kJpeg),
        per_shard_(byte_shards_ ? 0
                                : std::max<uint64_t>(1, r.shard_bytes / (uint64_t{r.height} *
                                                                         r.width * r.channels))),
        index_cols_(opt.codec == Codec::kJpeg ? 4
                    : byte_shards_            ? 3
                                              : 0),
        shard_fields_(src.fields.size(), 0) {
    est_.transient.push_back(kFingerprintBytes);
  }

  // Position i of `plan`.
  void add(const Plan& plan, size_t i) {
    const Planned p = plan.at(i);
    const uint64_t entry = plan.entry(i);
    const std::string_view name = src_.entries.name(entry);
    if (p.height == 0) {
      const uint64_t line =
          nlohmann::json{{"source", name}, {"reason", plan.reason(i, p)}}.dump().size() + 1;
      skips_bytes_ += line;
      sidecar_ += line;
      ++est_.skips;
      return;
    }
    uint64_t image = uint64_t{p.height} * p.width * r_.channels;
    if (plan.ratio != 1) {
      image = std::max<uint64_t>(1, static_cast<uint64_t>(static_cast<double>(image) * plan.ratio));
    }
    if (byte_shards_) {
      if (count_ > 0 && data_ + image > r_.shard_bytes) close_shard();
      if (count_ == 0) capacity_ = std::max(r_.shard_bytes, image);
    }
    data_ += image;
    ++count_;
    for (size_t f = 0; f < shard_fields_.size(); ++f) {
      shard_fields_[f] += field_value_bytes(src_.fields[f], src_, entry, p, f);
    }
    est_.image_bytes += image;
    const uint64_t source = nlohmann::json(name).dump().size() + 1;
    sources_bytes_ += source;
    sidecar_ += source + kSidecarPerSample + kSidecarPerColumn * (1 + shard_fields_.size()) +
                kSidecarPerIndex * index_cols_;
    const int64_t label = src_.entries.label(entry);
    if (label >= 0 && static_cast<size_t>(label) < m_.class_counts.size()) {
      ++m_.class_counts[static_cast<size_t>(label)];
    }
    ++est_.samples;
    if (!byte_shards_ && count_ == per_shard_) close_shard();
  }

  // The last shard, the side files and the manifest.
  void finish() {
    if (count_ > 0) close_shard();
    est_.shards = m_.shards.size();
    const uint64_t count = est_.samples;
    m_.count = count;
    m_.skipped = est_.skips;
    side(&m_.labels, "labels.npy", npy_header_bytes("<i8", {count}) + 8 * count);
    const uint64_t columns = 1 + shard_fields_.size();
    side(&m_.checksums, "checksums.npy",
         npy_header_bytes("<u8", columns == 1 ? std::vector<uint64_t>{count}
                                              : std::vector<uint64_t>{count, columns}) +
             8 * count * columns);
    side(&m_.sources, "sources.jsonl", sources_bytes_);
    side(&m_.skips, "skipped.jsonl", skips_bytes_);
    if (m_.has_index()) {
      side(&m_.index, index_cols_ == 4 ? "jpeg-index.npy" : "ragged-index.npy",
           npy_header_bytes("<i8", {count, index_cols_}) + 8 * count * index_cols_);
    }
    add_file(to_json(m_).size());
  }

 private:
  void add_file(uint64_t bytes) {
    est_.bytes += bytes;
    est_.files.push_back(bytes);
  }

  void side(FileEntry* f, const char* name, uint64_t bytes) {
    f->file = name;
    f->bytes = bytes;
    f->xxh64 = ~uint64_t{0};
    add_file(bytes);
  }

  // The shard of the samples added since the last one, with its field files and sidecar.
  void close_shard() {
    const uint64_t k = m_.shards.size();
    ShardEntry s;
    s.file = shard_file_name(opt_.storage, k);
    s.first = k == 0 ? 0 : m_.shards.back().first + m_.shards.back().count;
    s.count = count_;
    const std::vector<uint64_t> shape =
        byte_shards_ ? std::vector<uint64_t>{capacity_}
                     : std::vector<uint64_t>{per_shard_, r_.height, r_.width, r_.channels};
    s.bytes = data_ + (opt_.storage == Storage::kHdf5 ? kHdf5ShardOverhead + 8 * count_
                                                      : npy_header_bytes("|u1", shape));
    s.xxh64 = ~uint64_t{0};
    add_file(s.bytes);
    for (size_t f = 0; f < shard_fields_.size(); ++f) {
      const FieldSpec& spec = src_.fields[f];
      FieldFiles ff;
      ff.values = FileEntry{
          field_file_name(spec.name, k, false),
          npy_header_bytes(npy_descr(spec.dtype), field_header_shape(spec, r_, opt_.layout)) +
              shard_fields_[f],
          ~uint64_t{0}};
      add_field_file(ff.values.bytes);
      if (has_offsets(spec, opt_.layout)) {
        ff.offsets =
            FileEntry{field_file_name(spec.name, k, true),
                      npy_header_bytes("<i8", {count_ + 1}) + 8 * (count_ + 1), ~uint64_t{0}};
        add_field_file(ff.offsets.bytes);
      }
      s.fields.push_back(ff);
      shard_fields_[f] = 0;
    }
    est_.transient.push_back(kSidecarBase + sidecar_);
    m_.shards.push_back(s);
    sidecar_ = data_ = count_ = 0;
  }

  void add_field_file(uint64_t bytes) {
    est_.field_bytes += bytes;
    add_file(bytes);
  }

  const BuildOptions& opt_;
  const SourceListing& src_;
  const BuildRecipe& r_;
  Manifest m_;
  BuildEstimate& est_;
  const bool byte_shards_;              // ragged or JPEG: shards cut by stored bytes
  const uint64_t per_shard_;            // fixed raw: samples per shard
  const uint64_t index_cols_;           // columns of the index file (0: none)
  std::vector<uint64_t> shard_fields_;  // the open shard's field value bytes, per field
  uint64_t data_ = 0, count_ = 0;       // the open shard's image bytes and samples
  uint64_t capacity_ = 0;               // byte shards: the open shard's npy header's shape
  uint64_t sidecar_ = 0;                // the open shard's sidecar bytes (modelled)
  uint64_t sources_bytes_ = 0, skips_bytes_ = 0;
};

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
  std::vector<uint64_t> order;
  if (r.shuffled) {
    order = build_order(src.entries.size(), r.shuffle_seed);
  } else {
    order.resize(src.entries.size());
    std::iota(order.begin(), order.end(), uint64_t{0});
  }
  BuildEstimate est;
  est.entries = end - first;
  Plan plan(src, r, order, first, end);
  const uint64_t guessed = plan_samples(opt, src, r, &plan);
  est.basis = opt.layout == Layout::kRagged && src.kind != "idx"
                  ? "from the image headers of the sources"
                  : "exact (every sample's size is known)";
  if (guessed != 0) {
    est.notes.push_back(std::to_string(guessed) +
                        " sources have no readable image header: counted at the mean size");
  }
  if (opt.codec == Codec::kJpeg) {
    const uint64_t encoded = jpeg_ratio(opt, src, r, plan, &plan.ratio);
    uint64_t m = 0;
    for (size_t i = 0; i < plan.size(); ++i) m += plan.at(i).height != 0;
    est.basis = "estimate from " + std::to_string(encoded) + " of " + std::to_string(m) +
                " sources encoded at quality " + std::to_string(r.quality);
    if (encoded == 0) est.basis += " (none decoded: counted as raw pixels)";
  }
  Tally tally(opt, src, r, manifest_skeleton(opt, src, r, first, end), &est);
  for (size_t i = 0; i < plan.size(); ++i) tally.add(plan, i);
  tally.finish();
  for (const FieldSpec& f : src.fields) {
    if (f.kind == FieldKind::kBoxes) {
      est.notes.push_back("field '" + f.name +
                          "': boxes counted as listed; those a crop removes are not written "
                          "(an overestimate of at most 16 bytes per box)");
    }
  }
  return est;
}

}  // namespace dscache
