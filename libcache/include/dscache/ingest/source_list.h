// Lists what `dscache build` reads: a class-per-folder tree, a CSV/TSV list, or an idx file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dscache/error.h"
#include "dscache/exit_codes.h"
#include "dscache/fields.h"
#include "dscache/ingest/idx.h"

namespace dscache {

// One sample-to-be. Plain value type.
struct SourceEntry {
  std::string path;      // absolute path to read (folder and list sources); empty for idx
  std::string name;      // what sources.jsonl records: relative path, or "<idx file>#<i>"
  int64_t label = 0;     // class index
  uint64_t size = 0;     // file size at listing time (0 when missing)
  int64_t mtime_ns = 0;  // modification time at listing time (0 when missing)
  std::string etag;      // a folder on object storage (path s3://...): the object's ETag
  // Why this entry cannot become a sample although it was listed (a table row with a missing
  // column, a non-numeric value in a numeric field, a COCO annotation naming no category...):
  // the build records it as a skip with this reason (a --strict build stops on it). "" = fine.
  std::string bad;
};

// Every listed entry, stored compactly: a record of 32 bytes plus the entry's name (and its path
// only when that is not path_prefix() + name), in blocks that never move. 1.28M entries of a
// folder source take ~63 MB instead of the ~470 MB a std::vector<SourceEntry> took (five
// std::string members and a doubling vector; issue 33). Reads return SourceEntry values (or one
// member, without building the others); entries are appended, never changed. An ETag or a bad
// reason is kept beside the few entries that have one.
class SourceEntries {
 public:
  // The prefix of the paths this listing stores no copy of (a folder's root + "/", a list's
  // folder + "/"): an entry whose path is prefix + name keeps its name only. Set before appending.
  void set_path_prefix(std::string prefix) { prefix_ = std::move(prefix); }
  const std::string& path_prefix() const { return prefix_; }

  void push_back(const SourceEntry& e);
  size_t size() const { return records_.size(); }
  bool empty() const { return records_.empty(); }

  SourceEntry operator[](size_t i) const;
  std::string path(size_t i) const;
  std::string_view name(size_t i) const;
  int64_t label(size_t i) const;
  uint64_t file_size(size_t i) const { return records_[i].size; }
  int64_t mtime_ns(size_t i) const { return records_[i].mtime_ns; }
  const std::string& etag(size_t i) const;
  const std::string& bad(size_t i) const;

  // Bytes held (records, text blocks, extras), for tests of the per-entry cost.
  uint64_t bytes_held() const;

  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = SourceEntry;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = SourceEntry;
    const_iterator(const SourceEntries* s, size_t i) : s_(s), i_(i) {}
    SourceEntry operator*() const { return (*s_)[i_]; }
    const_iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator==(const const_iterator& o) const { return i_ == o.i_; }
    bool operator!=(const const_iterator& o) const { return i_ != o.i_; }

   private:
    const SourceEntries* s_;
    size_t i_;
  };
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size()}; }

 private:
  // Record::text_len's top bit: the path is stored after the name (else it is prefix + name),
  // and its length takes the 4 bytes before the name.
  static constexpr uint32_t kOwnPath = 0x80000000u;
  // Record::label_flags's top bit: the entry has an ETag or a bad reason (in extras_).
  static constexpr uint32_t kHasExtra = 0x80000000u;
  struct Record {
    uint32_t block = 0, offset = 0;  // where the entry's text starts
    uint32_t text_len = 0;           // the name's length | kOwnPath
    uint32_t label_flags = 0;        // the label (31-bit two's complement) | kHasExtra
    uint64_t size = 0;
    int64_t mtime_ns = 0;
  };
  struct Extra {
    size_t entry = 0;  // extras_ is sorted by it (appended in order)
    std::string etag, bad;
  };
  const Extra* extra(size_t i) const;

  std::string_view path_text(const Record& r) const;
  std::string prefix_;
  std::deque<Record> records_;
  std::vector<std::unique_ptr<char[]>> blocks_;
  std::vector<size_t> block_sizes_;
  size_t used_ = 0;  // bytes used in the last block
  std::vector<Extra> extras_;
};

// The field values of every entry, as listed, column by column (field order = `specs`): entry
// e's value of field f is bytes [offsets[f][e], offsets[f][e + 1]) of values[f], laid out as
// CacheWriter::append takes it (dscache/fields.h, FieldData) -- except the spatial kinds, which
// the build's decoder maps with the image's geometry before writing:
//  - kind mask: the value is the UTF-8 absolute path of the mask image (a list column), or empty
//    for a COCO source (the mask is rasterised from SourceListing::coco);
//  - kind boxes: float32 rows x1 y1 x2 y2 in the SOURCE image's pixels (edges; docs/FORMAT.md
//    "Fields"), before any resize, crop or clip.
// A bad entry (SourceEntry::bad) holds empty values.
struct FieldColumns {
  std::vector<std::vector<uint8_t>> values;    // one per field
  std::vector<std::vector<uint64_t>> offsets;  // one per field, entries + 1 each
  // Entry e's value of field f (a view into `values`; valid while the columns live).
  FieldData get(size_t f, size_t e) const {
    return FieldData{values[f].data() + offsets[f][e], offsets[f][e + 1] - offsets[f][e]};
  }
};

struct CocoInstances;  // dscache/ingest/coco.h

struct SourceOptions {
  std::string labels_file;               // idx: explicit labels file ("" = conventional sibling)
  std::vector<std::string> class_names;  // names for integer labels (idx, list); empty = "0".."n"
  // Tables (CSV/TSV/JSONL with a header; docs/FIELDS.md "Fields"):
  std::string image_column;  // the column naming the image; "" = "image_path", else "path"
  std::string label_column;  // the class label column; "" = "label" when present, else none
  // --field NAME=KIND: how column NAME becomes a field instead of being typed from its values.
  // KIND: "mask" (a path to a mask image, relative to the list file), "multi-hot" (a
  // ';'-separated list of names -> uint8 array of the sorted distinct names, the names recorded
  // as the field's classes), "int" (int64 scalar), "float" (float32 scalar), "text", "ignore".
  std::vector<std::pair<std::string, std::string>> field_kinds;
  // --field NAME=KIND:CLASS,CLASS,...: the class names of a mask or multi-hot column, in order
  // (a mask value v names classes[v]; a multi-hot vector follows this order and every name in
  // the column must be one of them). Absent: a mask's classes are unnamed, a multi-hot column's
  // its sorted distinct names.
  std::vector<std::pair<std::string, std::vector<std::string>>> field_classes;
  // COCO instances JSON (recognised by its content):
  std::string image_root;  // the folder the images' file_name are relative to (required)
  std::string coco_mask;   // "" / "none": no mask field; "semantic": a uint8 mask field `mask`
  // --confine: a path a list, table or COCO file names (image or mask) must stay inside the
  // list's folder (COCO: --image-root); one that leads outside (absolute, or `..` past it) makes
  // its entry bad. Default false: paths are followed wherever they lead.
  bool confine = false;
};

// A source option that does not fit the source as read: --field or --image-column naming no
// column, --classes for a table without labels, COCO options for another source... Its exit
// code is usage (2), like any bad option value (dscache/exit_codes.h).
class SourceOptionError : public Error, public ExitsWith<ExitCode::kUsage> {
 public:
  using Error::Error;
};

// Everything the build needs to know about its input. Owns the idx pixels for idx sources.
struct SourceListing {
  std::string kind;                      // "folder", "list" (CSV/TSV/JSONL), "coco" or "idx"
  std::string root;                      // absolute folder, list file or idx images file
  std::string labels_path;               // idx only
  std::vector<std::string> classes;      // class names, label i names classes[i]
  SourceEntries entries;                 // in build order
  std::shared_ptr<const IdxImages> idx;  // idx only
  uint64_t digest = 0;                   // XXH64 over entries' name, size and mtime, and (tables,
                                         // COCO) the field values and the annotation file
  std::vector<FieldSpec> fields;         // the fields every entry carries; empty: none
  FieldColumns columns;                  // their values, as listed (see FieldColumns)
  std::shared_ptr<const CocoInstances> coco;  // coco only: the parsed annotations
  // Advice the listing found for the user, one sentence each (a text column whose values all
  // name image files: probably a mask). The build prints them as notes.
  std::vector<std::string> notices;
};

// Lists `source`: a folder of class folders, a CSV/TSV list (`path,label`, or a table with a
// header row: see SourceOptions), a JSONL table (.jsonl), a COCO instances JSON (.json, with
// images/annotations/categories), or an idx3 images file. Throws Error: NotFound (missing
// source), InvalidArgument (bad list line,
// label out of range of --classes, an integer label >= 2^20 without --classes, a folder with no
// class folders), Corruption (bad idx file).
SourceListing list_source(const std::string& source, const SourceOptions& options);

// Resolves the file a recorded source name refers to (for verify --source).
std::string source_entry_path(const std::string& kind, const std::string& root,
                              const std::string& name);

// Absolute, lexically normalised form of a path (no symlink resolution).
std::string absolute_path(const std::string& path);

}  // namespace dscache
