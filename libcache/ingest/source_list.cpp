#include "dscache/ingest/source_list.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "dscache/checksum.h"
#include "dscache/error.h"
#include "dscache/file.h"
#include "dscache/ingest/coco.h"
#include "dscache/remote.h"
#include "list_internal.h"

namespace dscache {
namespace ingest_detail {

// The most bytes a list or table file may hold.
constexpr uint64_t kMaxListBytes = uint64_t{1} << 32;

}  // namespace ingest_detail

namespace {

namespace fs = std::filesystem;
using namespace ingest_detail;  // NOLINT: this file's own helpers

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<std::string> sorted_children(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) throw_errno(dir, "cannot list directory");
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;  // hidden files, ".", ".."
    names.emplace_back(e->d_name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());  // char_traits<char> compares as unsigned bytes
  return names;
}

// Walks `dir` recursively, following symlinks; every real directory is walked once, so a
// symlink loop (or two links to one folder) cannot list a file twice.
void walk(const std::string& dir, const std::string& rel, std::set<std::pair<dev_t, ino_t>>& seen,
          std::vector<std::pair<std::string, FileStat>>& out) {
  for (const auto& name : sorted_children(dir)) {
    std::string path = dir + "/" + name;
    std::string r = rel.empty() ? name : rel + "/" + name;
    FileStat st = stat_follow(path);
    if (!st.exists) continue;  // dangling symlink
    if (st.is_dir) {
      if (!seen.insert({st.dev, st.ino}).second) continue;
      walk(path, r, seen, out);
    } else if (st.is_file) {
      out.emplace_back(r, st);
    }
  }
}

void hash_entry(Xxh64& h, std::string_view name, uint64_t size, int64_t mtime_ns,
                const std::string& etag) {
  h.update(name.data(), name.size());
  h.update("\0", 1);
  h.update(&size, sizeof size);
  h.update(&mtime_ns, sizeof mtime_ns);
  if (!etag.empty()) h.update(etag.data(), etag.size() + 1);  // remote: what changes
}

// A folder of class folders on object storage (s3://BUCKET/PREFIX), listed with ListObjectsV2
// under the rules of a local folder: the first path component is the class, every object below
// it a sample (keys in byte order), names starting with '.' skipped, objects directly under the
// prefix (no class) and "folder" markers (keys ending in '/') skipped.
SourceListing list_remote_folder(const std::string& root, const SourceOptions& opt) {
  SourceListing out;
  out.kind = "folder";
  out.root = root;
  out.entries.set_path_prefix(root + "/");
  std::vector<RemoteObject> objects = list_remote(root);
  std::sort(objects.begin(), objects.end(),
            [](const RemoteObject& a, const RemoteObject& b) { return a.key < b.key; });
  std::map<std::string, int64_t> label_of;
  for (const RemoteObject& o : objects) {
    const size_t slash = o.key.find('/');
    if (slash == std::string::npos || o.key.back() == '/') continue;
    bool hidden = o.key[0] == '.';
    for (size_t i = o.key.find('/'); i != std::string::npos; i = o.key.find('/', i + 1)) {
      if (i + 1 < o.key.size() && o.key[i + 1] == '.') hidden = true;
    }
    if (hidden) continue;
    const std::string cls = o.key.substr(0, slash);
    auto [it, added] = label_of.emplace(cls, static_cast<int64_t>(out.classes.size()));
    if (added) out.classes.push_back(cls);
    SourceEntry e;
    e.path = root + "/" + o.key;
    e.name = o.key;
    e.label = it->second;
    e.size = o.size;
    e.etag = o.etag;
    out.entries.push_back(std::move(e));
  }
  if (out.classes.empty()) {
    throw Error(ErrorKind::kInvalidArgument, root,
                "no class folders: expected one key prefix per class (CLASS/NAME.jpg)");
  }
  if (!opt.class_names.empty()) {
    throw Error(
        ErrorKind::kInvalidArgument, root,
        "--classes applies to list and idx sources; a folder's classes are its sub-folders");
  }
  return out;
}

SourceListing list_folder(const std::string& root, const SourceOptions& opt) {
  SourceListing out;
  out.kind = "folder";
  out.root = root;
  out.entries.set_path_prefix(root + "/");
  std::set<std::pair<dev_t, ino_t>> seen;
  FileStat rs = stat_follow(root);
  seen.insert({rs.dev, rs.ino});
  for (const auto& cls : sorted_children(root)) {
    std::string cdir = root + "/" + cls;
    FileStat cs = stat_follow(cdir);
    if (!cs.is_dir) continue;  // files directly in SOURCE belong to no class
    if (!seen.insert({cs.dev, cs.ino}).second) continue;
    int64_t label = static_cast<int64_t>(out.classes.size());
    out.classes.push_back(cls);
    std::vector<std::pair<std::string, FileStat>> files;
    walk(cdir, cls, seen, files);
    // Walking visits "sub/" before "sub-a.jpg"; the promised order is relative path bytes.
    std::sort(files.begin(), files.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [rel, st] : files) {
      SourceEntry e;
      e.path = root + "/" + rel;
      e.name = rel;
      e.label = label;
      e.size = st.size;
      e.mtime_ns = st.mtime_ns;
      out.entries.push_back(std::move(e));
    }
  }
  if (out.classes.empty()) {
    throw Error(ErrorKind::kInvalidArgument, root,
                "no class folders: expected one sub-folder per class");
  }
  if (!opt.class_names.empty()) {
    throw Error(
        ErrorKind::kInvalidArgument, root,
        "--classes applies to list and idx sources; a folder's classes are its sub-folders");
  }
  return out;
}

// The first non-empty record of `text`, split; a UTF-8 byte order mark before it is dropped.
std::vector<std::string> first_line(const std::string& text, char sep) {
  RecordReader in(text, sep);
  Record r;
  while (in.next(&r)) {
    if (!r.blank) return r.fields;
  }
  return {};
}

SourceListing list_file(const std::string& list_path, const SourceOptions& opt) {
  char sep = ends_with(list_path, ".tsv") ? '\t' : ',';
  std::string text = read_listed_text(list_path, kMaxListBytes);
  if (is_table_header(first_line(text, sep), opt)) {
    const Table table = read_delimited_table(list_path, text, sep);
    std::string().swap(text);  // the table holds its cells: the file's text goes before listing
    return list_table(table, opt);
  }
  SourceListing out;
  out.kind = "list";
  out.root = list_path;
  RecordReader in(text, sep);
  std::string base = list_path.substr(0, list_path.find_last_of('/'));
  out.entries.set_path_prefix(base + "/");
  std::vector<std::pair<std::string, std::string>> rows;
  Record record;
  while (in.next(&record)) {
    if (record.blank) continue;
    const size_t lineno = record.line;
    const std::vector<std::string>& f = record.fields;
    if (record.unterminated) {
      throw Error(ErrorKind::kInvalidArgument, list_path,
                  "line " + std::to_string(lineno) +
                      ": unterminated quote (the quoted field runs to the end of the file)");
    }
    if (f.size() != 2) {
      throw Error(ErrorKind::kInvalidArgument, list_path,
                  "line " + std::to_string(lineno) + ": expected 2 fields (path" +
                      (sep == ',' ? std::string(",") : std::string("<TAB>")) + "label), found " +
                      std::to_string(f.size()));
    }
    std::string p = trim(f[0]), l = trim(f[1]);
    if (rows.empty() && lineno == 1 && p == "path" && l == "label") continue;  // header
    if (p.empty() || l.empty()) {
      throw Error(ErrorKind::kInvalidArgument, list_path,
                  "line " + std::to_string(lineno) + ": empty path or label");
    }
    rows.emplace_back(p, l);
  }
  std::vector<std::string> paths;
  for (const auto& r : rows) paths.push_back(resolve_listed_path(base, r.first));
  std::vector<FileStat> stats = stat_listed(paths);
  // A header row under another name than `path,label` (pandas writes its column names, such as
  // `image_path,label` or `file,class`): the first row, when its path names no file and its label
  // is not an integer while every other row's is, or is the label of no other row. Such a row
  // is not a sample (it would be a skip and a phantom class, and its non-integer label would turn
  // integer labels into class names sorted as strings). docs/BUILD.md "Sources".
  if (!rows.empty() && !stats[0].exists) {
    int64_t v;
    const std::string& head = rows[0].second;
    bool others_numeric = rows.size() > 1, head_elsewhere = false;
    for (size_t i = 1; i < rows.size(); ++i) {
      if (!parse_index(rows[i].second, &v)) others_numeric = false;
      if (rows[i].second == head) head_elsewhere = true;
    }
    if (!parse_index(head, &v) && (others_numeric || !head_elsewhere)) {
      rows.erase(rows.begin());
      paths.erase(paths.begin());
      stats.erase(stats.begin());
    }
  }
  std::vector<std::string_view> labels;
  for (auto& r : rows) labels.push_back(r.second);
  std::vector<int64_t> indexes;
  out.classes = label_classes(labels, opt, list_path, &indexes);
  for (size_t i = 0; i < rows.size(); ++i) {
    SourceEntry e;
    e.name = rows[i].first;
    e.path = paths[i];
    e.label = indexes[i];
    e.bad = path_problem(e.name, base, opt.confine, "the list's folder");
    e.size = stats[i].size;
    e.mtime_ns = stats[i].mtime_ns;
    e.etag = std::move(stats[i].etag);
    out.entries.push_back(std::move(e));
  }
  return out;
}

SourceListing list_idx(const std::string& images_path, const SourceOptions& opt) {
  SourceListing out;
  out.kind = "idx";
  out.root = images_path;
  out.labels_path =
      opt.labels_file.empty() ? idx_labels_sibling(images_path) : absolute_path(opt.labels_file);
  if (out.labels_path.empty()) {
    throw Error(
        ErrorKind::kNotFound, images_path,
        "no labels file beside it (expected ...-labels-idx1-ubyte[.gz]); pass --labels FILE");
  }
  auto images = std::make_shared<IdxImages>(read_idx_images(images_path));
  auto labels = read_idx_labels(out.labels_path);
  if (labels.size() != images->count) {
    throw Error(ErrorKind::kCorruption, out.labels_path,
                "holds " + std::to_string(labels.size()) + " labels for " +
                    std::to_string(images->count) + " images in " + images_path);
  }
  int64_t max_label = -1;
  for (uint8_t l : labels) max_label = std::max<int64_t>(max_label, l);
  out.classes = numbered_classes(max_label, opt, out.labels_path);
  std::string base = images_path.substr(images_path.find_last_of('/') + 1);
  FileStat is = stat_follow(images_path), ls = stat_follow(out.labels_path);
  for (uint32_t i = 0; i < images->count; ++i) {
    SourceEntry e;
    e.name = base + "#" + std::to_string(i);
    e.label = labels[i];
    out.entries.push_back(std::move(e));
  }
  // The digest covers both files once rather than every entry's (identical) stat.
  Xxh64 h;
  hash_entry(h, base, is.size, is.mtime_ns, "");
  hash_entry(h, out.labels_path, ls.size, ls.mtime_ns, "");
  out.digest = h.digest();
  out.idx = std::move(images);
  return out;
}

}  // namespace

std::string absolute_path(const std::string& path) {
  if (is_remote_location(path)) {  // already absolute; a folder's URL without its trailing '/'
    std::string url = path;
    while (url.size() > 1 && url.back() == '/' && url.compare(url.size() - 3, 3, "://") != 0) {
      url.pop_back();
    }
    return url;
  }
  return fs::absolute(fs::path(path)).lexically_normal().string();
}

SourceListing list_source(const std::string& source, const SourceOptions& options) {
  std::string root = absolute_path(source);
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  const bool json = ends_with(root, ".json");
  const bool table =
      ends_with(root, ".csv") || ends_with(root, ".tsv") || ends_with(root, ".jsonl");
  FileStat st;
  if (is_remote_location(root)) {
    // Object storage has no file types: a table's or COCO file's name says what it is, and
    // anything else is a folder of class folders, which only S3 can list.
    if (ends_with(root, "idx3-ubyte") || ends_with(root, "idx3-ubyte.gz")) {
      throw Error(ErrorKind::kUnsupported, source,
                  "idx files are not read from object storage: copy the images and labels files "
                  "to a local disk");
    }
    st.exists = true;
    st.is_file = json || table;
    st.is_dir = !st.is_file;
    if (st.is_dir && root.rfind("s3://", 0) != 0) {
      throw SourceOptionError(ErrorKind::kInvalidArgument, source,
                              "an http(s) location cannot be listed: a SOURCE on a web server is "
                              "a .csv/.tsv/.jsonl table or a COCO .json file; a folder of class "
                              "folders on object storage is at s3://BUCKET/PREFIX");
    }
  } else {
    st = stat_follow(root);
  }
  if (!st.exists) throw Error(ErrorKind::kNotFound, source, "no such file or directory");
  if (st.is_file && json) {
    // A .json source is COCO instances or nothing: one that is not (truncated, NaN, another
    // structure) gets the parser's reason and position, not a word on options. Its own digest
    // (the JSON's bytes and each image). A local file is parsed as it is read, never held
    // whole (a 448 MB train2017 file); an object is one GET into memory.
    if (!is_remote_location(root)) return list_coco(root, options);
    return list_coco_text(root, read_listed_text(root, kMaxListBytes), options);
  }
  check_options_apply(source, options, st.is_file && table, false);
  SourceListing out;
  if (st.is_dir && is_remote_location(root)) {
    out = list_remote_folder(root, options);
  } else if (st.is_dir) {
    out = list_folder(root, options);
  } else if (ends_with(root, ".csv") || ends_with(root, ".tsv")) {
    out = list_file(root, options);
  } else if (ends_with(root, ".jsonl")) {
    out = list_table(read_jsonl_table(root, read_listed_text(root, kMaxListBytes)), options);
  } else if (is_idx_images_file(root)) {
    return list_idx(root, options);
  } else {
    throw Error(ErrorKind::kInvalidArgument, source,
                "not a folder of class folders, a .csv/.tsv/.jsonl list, a COCO instances .json or "
                "an idx3 images file");
  }
  Xxh64 h;
  const SourceEntries& es = out.entries;
  for (size_t i = 0; i < es.size(); ++i) {
    hash_entry(h, es.name(i), es.file_size(i), es.mtime_ns(i), es.etag(i));
  }
  if (!out.fields.empty()) hash_fields(h, out);
  for (size_t i = 0; i < es.size(); ++i) {  // hash_fields has them; without fields, bad ones
    const std::string& bad = es.bad(i);
    if (out.fields.empty() && !bad.empty()) h.update(bad.data(), bad.size() + 1);
  }
  out.digest = h.digest();
  return out;
}

std::string source_entry_path(const std::string& kind, const std::string& root,
                              const std::string& name) {
  if (kind == "folder") return root + "/" + name;
  if (kind == "coco") return ingest_detail::resolve_listed_path(root, name);  // the image root
  if (kind == "list") {
    return ingest_detail::resolve_listed_path(root.substr(0, root.find_last_of('/')), name);
  }
  return root;  // idx: the images file itself
}

}  // namespace dscache
