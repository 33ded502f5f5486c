// CacheWriter: the one way a cache is written. `dscache build` and `dscache merge`, the Python
// `dscache.Writer`, the trainer's and the tests' fixtures all write through it, so every cache
// on disk has the same side files (docs/FORMAT.md) and the same crash behaviour.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dscache/cache_dir.h"
#include "dscache/error.h"
#include "dscache/exit_codes.h"
#include "dscache/manifest.h"

namespace dscache {

// OUTPUT exists (without `force`) or an interrupted write of it exists (without `resume` or
// `force`). The message says which flag would proceed.
class OutputExistsError : public Error, public ExitsWith<ExitCode::kOutputExists> {
 public:
  using Error::Error;
};

// What a cache holds and how it is written. Read by open() (and claim(): only `force`,
// `resume` and `command`).
struct CacheWriterOptions {
  Storage storage = Storage::kNpy;  // shard file format
  Layout layout = Layout::kFixed;   // fixed: every sample recipe.height x recipe.width; ragged:
                                    // each sample its own size (recipe.height/width unused)
  Codec codec = Codec::kRaw;        // raw pixels, or one JPEG stream per sample
  // Recorded in the manifest, and the shape rules: recipe.channels (1 or 3), recipe.height and
  // recipe.width (fixed layout, > 0), recipe.quality (codec kJpeg: what append() encodes at,
  // 1..100), recipe.shard_bytes (> 0; the shard cut: a fixed shard holds
  // max(1, shard_bytes / sample bytes) samples; a byte shard (ragged or JPEG) closes before the
  // sample that would take it past shard_bytes stored bytes), recipe.max_side (ragged: 0 =
  // record the largest shorter side written). The rest is recorded as given.
  BuildRecipe recipe;
  std::vector<std::string> classes;  // class names; every label is an index into it; empty: an
                                     // unlabeled cache (any int64 label, no class counts)
  // The fields every sample carries besides its image and label (docs/FORMAT.md "Fields"), in
  // field order; each append() then passes one FieldData per field. Non-empty: the cache is
  // written as format_version 3, checksums.npy gets one column per field, and every shard gets
  // its field files.
  std::vector<FieldSpec> fields;
  SourceRecord source;    // where the samples came from (recorded as given)
  bool has_part = false;  // a part of a partitioned build (then `part` is recorded)
  PartRecord part;        // see Manifest::part
  // Record Manifest::transparent, the count note_transparent() keeps (a build's and a merge's
  // count of sources with a transparent pixel); default false: the key is absent.
  bool count_transparent = false;
  std::string tool_version;  // "" = this library's version
  std::string created_utc;   // "" = the time finish() runs (ISO 8601 UTC)

  bool force = false;   // replace an existing cache at OUTPUT; discard an interrupted write
  bool resume = false;  // continue an interrupted write with the same fingerprint
  std::string command = "dscache writer";  // written into the lock file to name the holder
  // What makes two writes the same write, as JSON text: a resumed write must have the one the
  // interrupted write had. "" = derived from storage, layout, codec, recipe and classes.
  std::string fingerprint;
  // With `resume`, no interrupted write and a cache already at OUTPUT: whether that cache is
  // this very write (killed after its publish; then complete() is true). Unset: it is not (an
  // OutputExistsError unless `force`).
  std::function<bool(const Manifest&)> is_this_write;
  // The position of the first record (a part's first entry in the whole listing's order). Each
  // append() and skip() is one record, each add_shard() one more; see position().
  uint64_t first_position = 0;
};

// A finished shard of another cache, taken whole by add_shard() (a merge), with what its
// samples need in the side files.
struct ShardRecords {
  std::vector<int64_t> labels;       // one per sample
  std::vector<uint64_t> checksums;   // one row per sample: XXH64 of its stored bytes, then of
                                     // each field's value (1 + fields values per sample)
  std::vector<std::string> sources;  // one per sample
  std::vector<int64_t> index;        // byte shards: the samples' index rows, row-major
};

// Writes one cache at OUTPUT. Everything is written into `.NAME.partial` beside OUTPUT and
// appears at OUTPUT only at publish(), in one rename (or, replacing a cache with `force`, one
// renameat2(RENAME_EXCHANGE), so a reader sees the old cache or the new one, never a mix). The
// lock on OUTPUT (dscache/lock.h) is held from claim() to destruction.
//
// Samples go in order; full shards are committed as they fill: each shard (and its field files,
// written beside it as the shard fills) is renamed into the partial directory, then a sidecar
// `.shard-NNNNN.json` (its samples' labels, checksums, sources, index rows, field files and the
// skips since the previous shard) is written atomically beside it.
//
// Crash states, and what a `resume` does in each (open() with the same fingerprint):
//  - no partial directory, or one without its fingerprint (`.build.json`): nothing to resume;
//    a partial directory without a fingerprint (killed while creating it, or the old cache of a
//    `force` exchange) is removed at claim().
//  - shards with sidecars: those whose sidecar agrees with the shard's (and each of its field
//    files') size and XXH64 and continue the previous one are kept; anything else (an unfinished
//    shard, a temp file, a shard without its sidecar) is removed. position() is where the writer
//    should continue.
//  - manifest.json written (the partial directory's commit point): only the publish is left;
//    complete() is false, count() is the cache's, and publish() finishes it.
//  - killed during publish: the exchange or rename is finished by claim() (a fingerprint left in
//    OUTPUT is removed); with `resume`, is_this_write decides that OUTPUT is this write and
//    complete() is true.
// Without `resume`, an interrupted write is refused (OutputExistsError) unless `force`, which
// removes it and starts over. With `resume`, an interrupted write with another fingerprint is
// refused (Error(kInvalidArgument)), unless `force` too: then it is removed and the write
// starts over. A FIFO or device where a side file of the partial directory
// should be is never read (files are opened as regular files only).
//
// Not thread-safe: one thread appends. Destroying an unpublished writer leaves the partial
// directory for a `resume` (abandon() removes it instead).
class CacheWriter {
 public:
  // The partial directory a write of `output` works in: `<parent>/.<name>.partial`.
  static std::string partial_dir_for(const std::string& output);

  // Takes OUTPUT's lock (LockedError when another process holds it), finishes what an
  // interrupted publish left, and applies the refusals above (OutputExistsError; Error when
  // OUTPUT exists and is not a cache: never replaced). Reads only options.force, .resume and
  // .command: a caller can claim OUTPUT before it knows what the cache will hold (so a refusal
  // comes before a long listing), then begin().
  static std::unique_ptr<CacheWriter> claim(const std::string& output,
                                            const CacheWriterOptions& options);
  // Validates `options` (Error(kInvalidArgument) naming the field), opens or resumes the
  // partial directory. Once per writer.
  void begin(const CacheWriterOptions& options);
  // claim() then begin().
  static std::unique_ptr<CacheWriter> open(const std::string& output,
                                           const CacheWriterOptions& options);

  ~CacheWriter();
  CacheWriter(const CacheWriter&) = delete;
  CacheWriter& operator=(const CacheWriter&) = delete;

  // Appends one sample of height x width x recipe.channels HWC uint8 pixels. Fixed layout: the
  // size must be the recipe's. Codec kJpeg: encoded at recipe.quality. `checksum`, when given,
  // is the XXH64 of the stored bytes (the pixels, or the JPEG stream) computed by the caller.
  // `fields`: one value per options.fields entry, in field order (null when the cache has
  // none); each is checked before anything is written -- its size (a mask: height x width
  // elements), box coordinates inside the image (0 <= x1 < x2 <= width, 0 <= y1 < y2 <=
  // height), a rows_of field's row count equal to its boxes', text UTF-8 --
  // Error(kInvalidArgument) naming the source and the field.
  void append(const uint8_t* pixels, uint32_t height, uint32_t width, int64_t label,
              const std::string& source, const uint64_t* checksum = nullptr,
              const FieldData* fields = nullptr);
  // Codec kJpeg only: appends an already encoded stream of `size` bytes that decodes to
  // height x width x recipe.channels.
  void append_encoded(const uint8_t* data, uint64_t size, uint32_t height, uint32_t width,
                      int64_t label, const std::string& source, const uint64_t* checksum = nullptr,
                      const FieldData* fields = nullptr);
  // Records a source entry that was not written, and why (skipped.jsonl).
  void skip(const std::string& source, const std::string& reason);
  // Counts `n` samples whose source had a transparent pixel: the sample appended next (called
  // just before its append()), or a merged part's samples (before its first add_shard()). Kept
  // in the sidecar of the shard they land in, so a resume keeps the count of the shards it keeps.
  void note_transparent(uint64_t n = 1);
  // Ends the open shard now (with no sample in it: writes an empty shard); the next sample
  // opens a new one. Shards are otherwise cut by recipe.shard_bytes.
  void cut_shard();
  // Ends the open shard, then takes shard `k` of cache `from` (opened through it: a regular file
  // inside it, of its manifest's size and header; the XXH64 is checked when copied) as the next
  // shard, with its field files (`from` must have this cache's fields): hard-linked, or copied
  // across filesystems (through a temp file; ENOSPC keeps its errno). `records` are its
  // samples' side-file rows. Returns true when copied.
  bool add_shard(const CacheDir& from, size_t k, const ShardRecords& records);

  // Commits the open shard, writes every side file and manifest.json (the commit point), then
  // removes the sidecars. Returns the manifest. After finish(), only publish() is allowed.
  Manifest finish();
  // finish() if not yet, then moves the cache to OUTPUT. Returns its manifest. With complete(),
  // returns the manifest of the cache already at OUTPUT and writes nothing.
  Manifest publish();
  // Removes the partial directory and everything written into it.
  void abandon();

  bool complete() const;               // see the crash states: OUTPUT is already this write
  bool finished() const;               // manifest written (by finish() or before a crash)
  uint64_t position() const;           // the next record's position (see first_position)
  uint64_t count() const;              // samples so far (kept + appended)
  uint64_t resumed() const;            // samples kept from an interrupted write at begin()
  uint64_t skipped() const;            // skips so far
  uint64_t shard_count() const;        // shards committed so far
  const std::string& output() const;   // absolute, without trailing '/'
  const std::string& partial() const;  // the partial directory

 private:
  struct Impl;
  explicit CacheWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dscache
