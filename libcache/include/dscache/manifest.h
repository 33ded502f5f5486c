// manifest.json: the description of a cache directory, and the only file read to serve it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dscache/enum_table.h"
#include "dscache/fields.h"

namespace dscache {

// Stored in the manifest as the strings in the comments (the names of the tables below); never
// renamed.
enum class Storage { kNpy, kHdf5 };                 // "npy", "hdf5"
enum class Layout { kFixed, kRagged };              // "fixed", "ragged"
enum class ResizePolicy { kStretch, kCrop, kPad };  // "stretch", "crop", "pad"
enum class Codec { kRaw, kJpeg };                   // "raw", "jpeg": how sample bytes are stored
enum class AlphaMode { kDrop, kComposite, kKeep };  // "drop", "composite", "keep": a source's alpha

// The spellings of each enum, in declaration order: the manifest, `dscache build`'s options and
// the Python binding all parse and print through these.
extern const EnumTable<Storage> kStorageNames;
extern const EnumTable<Layout> kLayoutNames;
extern const EnumTable<ResizePolicy> kResizePolicyNames;
extern const EnumTable<Codec> kCodecNames;
extern const EnumTable<AlphaMode> kAlphaModeNames;

// The table's name of the value ("?" for a value outside the enum).
const char* to_string(Storage s);
const char* to_string(Layout l);
const char* to_string(ResizePolicy r);
const char* to_string(Codec c);
const char* to_string(AlphaMode a);

// The channel order stored for a cache of `channels` channels: "L" (1), "RGB" (3), "RGBA" (4);
// null for any other count.
const char* channel_order_for(uint32_t channels);

// The newest manifest format version this library reads (it reads every version <= this). It
// writes version 1 for raw caches, version 2 for JPEG caches (codec "jpeg") and version 3 for
// caches with fields, so a reader from before the codec (or fields) existed refuses the cache
// instead of misreading it.
constexpr int kFormatVersion = 3;
// The version a cache with codec `c` (and fields, when `has_fields`) is written with.
int format_version_for(Codec c, bool has_fields = false);

// A file of the cache other than a shard.
struct FileEntry {
  std::string file;    // name inside the cache directory (no '/')
  uint64_t bytes = 0;  // exact file size
  uint64_t xxh64 = 0;  // XXH64 (seed 0) of the whole file
};

// One field's files for one shard (docs/FORMAT.md, "Fields").
struct FieldFiles {
  FileEntry values;   // <name>-NNNNN.npy
  FileEntry offsets;  // <name>-offsets-NNNNN.npy: variable kinds only; file "" otherwise
};

// One images shard: samples [first, first + count) of the cache.
struct ShardEntry {
  std::string file;                // e.g. "images-00000.npy" or "images-00000.h5"
  uint64_t first = 0;              // index of its first sample in the cache
  uint64_t count = 0;              // samples it holds
  uint64_t bytes = 0;              // exact file size
  uint64_t xxh64 = 0;              // XXH64 (seed 0) of the whole file
  std::vector<FieldFiles> fields;  // format_version 3: one per Manifest::fields, same order
};

// The field files of shard `shard`: "mask-00012.npy", and "boxes-offsets-00012.npy" when
// `offsets`.
std::string field_file_name(const std::string& field, uint64_t shard, bool offsets);
// True when field `f` is stored as values plus offsets in a cache of layout `layout`: the
// variable kinds, and a mask in the ragged layout.
bool has_offsets(const FieldSpec& f, Layout layout);

// Where the samples came from, so a cache can be traced back and re-checked.
struct SourceRecord {
  std::string kind;      // "folder", "list" or "idx"
  std::string root;      // absolute path of the folder, list file or idx images file
  std::string labels;    // idx only: absolute path of the idx labels file; empty otherwise
  uint64_t entries = 0;  // entries the source listed (built + skipped)
  uint64_t digest = 0;   // XXH64 over every entry's relative path, size and mtime (ns)
};

// The options that determine the bytes of every sample; a resumed build must match them.
struct BuildRecipe {
  uint32_t height = 0;                        // output rows
  uint32_t width = 0;                         // output columns
  uint32_t channels = 3;                      // 3 (RGB), 1 (grey) or 4 (RGBA: alpha kKeep)
  ResizePolicy resize = ResizePolicy::kCrop;  // how the aspect ratio is reconciled
  bool reduced_decode = true;                 // JPEG DCT-domain downscale when >= 2x target
  uint64_t max_pixels = 0;                    // larger images (per header) are skipped
  uint64_t shard_bytes = 0;                   // cap on image bytes per shard
  uint32_t max_side = 0;  // ragged layout: shorter side scaled down to at most this; 0 = fixed
  bool shuffled = false;  // samples stored in build_order(source entries, shuffle_seed) (sampler.h)
  uint64_t shuffle_seed = 0;  // the --shuffle seed; meaningful only when shuffled
  uint32_t quality = 0;       // codec kJpeg: the JPEG quality 1..100; 0 for raw
  // What a source's alpha channel becomes (docs/BUILD.md "Transparency"): dropped (the colour
  // stored under it, as PIL's convert('RGB') and cv2.imread give; default), composited onto
  // `background`, or kept as a fourth channel (channels 4, RGBA).
  AlphaMode alpha = AlphaMode::kDrop;
  uint8_t background[3] = {255, 255, 255};  // kComposite: R, G, B; default white
};

// A cache built as one slice of a partitioned build (`dscache build --part index/count`): the
// positions [first, first + entries) of the whole listing's cache order, where first =
// index * n / count and first + entries = (index + 1) * n / count for n = source.entries.
// `dscache merge` joins the parts 0..count-1 into the cache a single build would make.
struct PartRecord {
  uint32_t index = 0;    // this part, 0-based, < count
  uint32_t count = 0;    // parts the listing was split into, >= 1
  uint64_t first = 0;    // global position of its first entry
  uint64_t entries = 0;  // positions it covers (built + skipped)
};

struct Manifest {
  int format_version = 1;              // format_version_for(codec); see kFormatVersion
  Layout layout = Layout::kFixed;      // sample layout
  Storage storage = Storage::kNpy;     // shard file format
  Codec codec = Codec::kRaw;           // kRaw: shards hold pixels; kJpeg: JPEG bytes per sample
  std::vector<FieldSpec> fields;       // format_version 3: the sample's fields, in field order
  std::string dtype = "uint8";         // sample element type (of decoded pixels); only uint8
  uint32_t height = 0;                 // sample rows (0 for the ragged layout)
  uint32_t width = 0;                  // sample columns (0 for the ragged layout)
  uint32_t channels = 0;               // 3, 1 or 4
  std::string channel_order = "RGB";   // "RGB" for 3 channels, "L" for 1, "RGBA" for 4
  uint64_t count = 0;                  // samples in the cache
  std::vector<std::string> classes;    // class names; label i names classes[i]
  std::vector<uint64_t> class_counts;  // samples per class, same order as classes
  std::vector<ShardEntry> shards;      // contiguous, in sample order, covering [0, count)
  FileEntry labels;                    // labels.npy: (count,) int64
  FileEntry checksums;                 // checksums.npy: (count,) uint64 XXH64 of each sample;
                                       // with fields (count, 1 + fields) (docs/FORMAT.md)
  FileEntry sources;                   // sources.jsonl: one JSON string per sample (its origin)
  FileEntry skips;                     // skipped.jsonl: one JSON object per skipped entry
  FileEntry index;                     // raw ragged: ragged-index.npy (count, 3) int64
                                       // (offset in its shard's data, height, width);
                                       // jpeg (either layout): jpeg-index.npy (count, 4)
                                       // int64 (offset, length, height, width);
                                       // file "" for a raw fixed cache
  uint64_t skipped = 0;                // number of source entries skipped
  SourceRecord source;                 // where the samples came from
  BuildRecipe recipe;                  // how they were made
  std::string tool_version;            // dscache version that wrote the cache
  std::string created_utc;             // ISO 8601 time the build finished
  // Samples whose source had at least one transparent pixel (alpha below its maximum), as the
  // build counted them; unknown (false) for caches written before the count or not by a build.
  bool transparent_known = false;
  uint64_t transparent = 0;  // meaningful only when transparent_known
  bool has_part = false;     // true for a part of a partitioned build (then `part`)
  PartRecord part;           // meaningful only when has_part

  // True when the cache has an index file (raw ragged, or any JPEG cache).
  bool has_index() const { return layout == Layout::kRagged || codec != Codec::kRaw; }
  // Columns of checksums.npy: the image, then one per field.
  uint64_t checksum_columns() const { return 1 + fields.size(); }
  // Fixed layout: decoded bytes per sample. Ragged: 0 (samples differ; see the index).
  uint64_t sample_bytes() const { return uint64_t{height} * width * channels; }
};

// Serializes to pretty-printed JSON (checksums as 16-digit hex strings).
std::string to_json(const Manifest& m);

// Parses and validates: version supported, names plain (no '/', no ".."), shards contiguous and
// covering [0, count), class counts summing to count, shape positive. Throws
// Error(kCorruption, path, reason) naming the offending field.
Manifest manifest_from_json(const std::string& text, const std::string& path);

// Every file the manifest names (shards, labels, checksums, sources, skips, index, then each
// shard's field files), with its expected size and XXH64, in that order.
std::vector<FileEntry> named_files(const Manifest& m);

// Reads DIR/manifest.json. Throws NotFound if DIR or the manifest is missing.
Manifest read_manifest(const std::string& dir);

// Writes DIR/manifest.json atomically (temp + fsync + rename).
void write_manifest(const std::string& dir, const Manifest& m);

}  // namespace dscache
