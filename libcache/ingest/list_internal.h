// What the listers of list_source share (private to the ingest library): file stats, CSV/TSV
// splitting, label-to-class rules, and the table listers (CSV/TSV with a header, JSONL).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dscache/checksum.h"
#include "dscache/ingest/source_list.h"

namespace dscache::ingest_detail {

struct FileStat {
  bool exists = false;
  bool is_dir = false;
  bool is_file = false;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  dev_t dev = 0;
  ino_t ino = 0;
  std::string etag;  // an object on object storage (stat_listed): its ETag; mtime_ns stays 0
};

// stat(2), following symlinks; exists = false when it fails.
FileStat stat_follow(const std::string& path);

// The stats of the files a list, table or COCO file names, in order: local paths by stat_follow,
// URLs by stat_remote (dscache/remote.h: one ListObjectsV2 listing per bucket) as regular files
// with their size and ETag. An empty path, or an object that does not exist, is !exists.
std::vector<FileStat> stat_listed(const std::vector<std::string>& paths);

// Where a path a list, table or COCO file names leads, given `base`, the folder of the list file
// (or COCO's image root): `name` itself when it is a URL (s3://, http(s)://) or, under a local
// base, an absolute path; else base + "/" + name. Under a URL base, a name starting with '/'
// starts at the bucket or host, and '.' and '..' components are resolved as in a file system
// (no higher than the bucket or host), since an object store has no folders to resolve them.
std::string resolve_listed_path(const std::string& base, const std::string& name);

// The whole text of a list, table or COCO file: a local file (never a FIFO, which would block,
// or a device), or an object read with one GET (read_remote). Error(kCorruption) when it holds
// more than `max_bytes`; the read's own errors (kNotFound, kRemote) name the path or URL.
std::string read_listed_text(const std::string& path, uint64_t max_bytes);

// `s` without leading and trailing spaces, tabs and CRs.
std::string trim(const std::string& s);

// A non-negative decimal integer of at most 18 digits (a class index).
bool parse_index(const std::string& s, int64_t* out);

// One record of a CSV/TSV text.
struct Record {
  std::vector<std::string> fields;  // at least one
  size_t line = 0;                  // the line it starts on (1-based)
  bool unterminated = false;        // a quote was still open at the end of the text
  bool blank = false;               // nothing but spaces, tabs and CRs: not a record
};

// Reads a CSV/TSV text record by record (RFC 4180): fields split at `sep`; a field that starts
// with '"' is quoted, with "" for a quote and line ends inside it (kept as '\n'); a record ends
// at LF, CRLF or a lone CR (classic Mac files). A UTF-8 byte order mark at the start is skipped.
// Holds a reference to `text`; not thread-safe.
class RecordReader {
 public:
  RecordReader(const std::string& text, char sep);
  // The next record into *r; false at the end of the text.
  bool next(Record* r);

 private:
  const std::string& text_;
  char sep_;
  size_t pos_;
  size_t line_ = 1;
};

// Why a path a list, table or COCO file names cannot be read as given ("" = it can): a NUL
// byte, which would cut the name short; with `confine` (--confine), a path that leads outside
// `base` (absolute and normalised), lexically: absolute, or with `..` past it. `base_is` says
// what base is in the message ("the table's folder", "--image-root").
std::string path_problem(const std::string& name, const std::string& base, bool confine,
                         const std::string& base_is);

// Table options (--image-column, --label-column, --field) given for a source that is not a
// `table`, COCO options (--image-root, --coco-mask) for one that is not `coco`: an error rather
// than a silently different cache (SourceOptionError naming `source` and the options).
void check_options_apply(const std::string& source, const SourceOptions& o, bool table, bool coco);

// The classes of integer labels 0..max_label: --classes when given (max_label must be in range),
// else "0".."max_label". Error(kInvalidArgument, path) naming the label otherwise.
std::vector<std::string> numbered_classes(int64_t max_label, const SourceOptions& opt,
                                          const std::string& path);

// The class rules of a list's label column: when every label is a class index (parse_index)
// the classes are numbered_classes; otherwise labels are names, the classes their sorted
// distinct set (or --classes, which fixes the order and must hold every label). Returns the
// classes and sets (*indexes)[i] to labels[i]'s class. Error(kInvalidArgument, path) naming the
// offending label.
std::vector<std::string> label_classes(const std::vector<std::string_view>& labels,
                                       const SourceOptions& opt, const std::string& path,
                                       std::vector<int64_t>* indexes);

// Whether a .csv/.tsv whose first non-empty line splits into `head` is a table (a header row
// naming columns, fields beside the label) rather than a `path,label` list: a table option
// (--image-column, --label-column, --field) is given, the line has 3 or more columns, or it is
// the one column `image_path` or `path`. Two columns stay a list, as before tables existed.
bool is_table_header(const std::vector<std::string>& head, const SourceOptions& opt);

// One cell of a table row, as Table::cell gives it.
struct TableCell {
  bool present = false;            // false: the row lacks the column (short row, absent key)
  std::string text;                // the value (CSV: trimmed; JSON: a string as is, null as "",
                                   // anything else as its JSON text)
  bool is_array = false;           // JSONL: the value is a JSON array ...
  std::vector<std::string> items;  // ... of these strings
  bool non_string_item = false;    // ... and holds something else too
};

// A table as read, before any typing: a header and rows of cells, one per column. The cells'
// texts are kept in one arena and each cell is a 16-byte reference into it: a vector of
// TableCell rows took ~320 bytes a row of four columns (issue 33).
class Table {
 public:
  std::string path;                  // the list file, absolute
  std::vector<std::string> columns;  // the header's names, in order; unique, non-empty
  std::vector<size_t> lines;         // each row's line number in the file (1-based)

  size_t row_count() const { return lines.size(); }
  // Row r's cell of `column` (not present when the row lacks it). A JSON array's items are
  // parsed from its text.
  TableCell cell(size_t r, size_t column) const;
  // Its text alone, without copying (empty when not present).
  std::string_view text(size_t r, size_t column) const;

  // Reading: a new row (of no cells yet) from `line`, then its cells left to right (columns
  // past the last set one are not present).
  void start_row(size_t line);
  void set_cell(size_t column, std::string_view text, bool is_array = false,
                bool non_string_item = false);
  void reserve_text(size_t bytes) { arena_.reserve(bytes); }
  void reserve_rows(size_t rows) {  // of columns.size() cells
    lines.reserve(rows);
    row_end_.reserve(rows);
    cells_.reserve(rows * columns.size());
  }

 private:
  enum : uint8_t { kPresent = 1, kArray = 2, kNonString = 4 };
  struct Cell {
    uint64_t offset = 0;
    uint32_t length = 0;
    uint8_t flags = 0;
  };
  const Cell* find(size_t r, size_t column) const;
  std::string arena_;
  std::vector<Cell> cells_;        // every row's cells, row after row
  std::vector<uint64_t> row_end_;  // where row r's cells end in cells_
};

// Reads a CSV/TSV table whose whole file is `text`: the first non-empty line is the header (a
// UTF-8 byte order mark before it is dropped), every other non-empty line a row. Error
// (kInvalidArgument, path, "line N: ...") for a row with more fields than the header, an
// unterminated quote, or a header with an empty or repeated name.
Table read_delimited_table(const std::string& path, const std::string& text, char sep);

// Reads a JSONL table whose whole file is `text`: one JSON object per non-empty line, the columns
// the keys in order of first appearance. Error(kInvalidArgument, path, "line N: ...") for a line
// that is not an object.
Table read_jsonl_table(const std::string& path, const std::string& text);

// The values of table cells (table_values.cpp):
// `s` in single quotes, cut after 40 characters with "...", for messages.
std::string quote(const std::string& s);
// [+-]?digits in int64 range.
bool parse_int(const std::string& s, int64_t* out);
// A decimal number as people write one: [+-]? (d+ [. d*] | . d+) ([eE] [+-]? d+)? -- not inf,
// nan or hexadecimal.
bool is_number_text(const std::string& s);
// "" when `s` is a finite float32 (*out), else why not.
std::string parse_float(const std::string& s, float* out);
bool valid_utf8(const std::string& s);
// A multi-hot cell's names: a JSON array's strings, or the ';'-separated names of its text
// (trimmed; empty ones dropped).
std::vector<std::string> multi_hot_names(const TableCell& c);

// Types the columns of `table` and lists it (docs/FIELDS.md "Fields"): the image column, the label
// column, and every other column as a field, typed from its values or by --field. Rows that
// cannot become samples get SourceEntry::bad. Error(kInvalidArgument, path) for a table that
// cannot be listed (no image column, a --field naming no column, a column name that is not a
// valid field name, ...).
SourceListing list_table(const Table& table, const SourceOptions& opt);

// list_coco of the COCO file at `path` (local, or a URL) whose whole text is `text`.
SourceListing list_coco_text(const std::string& path, const std::string& text,
                             const SourceOptions& options);

// Folds the fields of a listing (specs, every entry's values and bad reason, and each mask
// file's size and mtime) into `h`, after the entries' names and stats.
void hash_fields(Xxh64& h, const SourceListing& listing);

}  // namespace dscache::ingest_detail
