// What the listers of list_source share (list_internal.h): file stats, the paths and texts a
// list names, CSV/TSV records, and the rules that turn labels into classes.
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dscache/error.h"
#include "dscache/file.h"
#include "dscache/remote.h"
#include "list_internal.h"

namespace dscache {
namespace ingest_detail {

// The most classes integer labels may imply without --classes (ImageNet-21k has ~21,800).
constexpr int64_t kMaxNumberedClasses = int64_t{1} << 20;

namespace {

// Whether a URL names an object: a bucket or host, then a key or path ("s3://bucket" does not).
bool names_object(const std::string& url) {
  const size_t host = url.find("://");
  const size_t slash = host == std::string::npos ? host : url.find('/', host + 3);
  return slash != std::string::npos && slash > host + 3 && slash + 1 < url.size();
}

}  // namespace

FileStat stat_follow(const std::string& path) {
  FileStat s;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return s;
  s.exists = true;
  s.is_dir = S_ISDIR(st.st_mode);
  s.is_file = S_ISREG(st.st_mode);
  s.size = static_cast<uint64_t>(st.st_size);
  s.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  s.dev = st.st_dev;
  s.ino = st.st_ino;
  return s;
}

std::vector<FileStat> stat_listed(const std::vector<std::string>& paths) {
  std::vector<FileStat> out(paths.size());
  std::vector<std::string> urls;
  std::vector<size_t> url_at;
  for (size_t i = 0; i < paths.size(); ++i) {
    if (paths[i].empty()) continue;
    if (is_remote_location(paths[i])) {
      if (!names_object(paths[i])) continue;  // path_problem makes its entry bad
      urls.push_back(paths[i]);
      url_at.push_back(i);
    } else {
      out[i] = stat_follow(paths[i]);
    }
  }
  if (urls.empty()) return out;
  std::vector<std::optional<RemoteObject>> objects = stat_remote(urls);
  for (size_t k = 0; k < urls.size(); ++k) {
    if (!objects[k]) continue;
    FileStat& st = out[url_at[k]];
    st.exists = st.is_file = true;
    st.size = objects[k]->size;
    st.etag = std::move(objects[k]->etag);
  }
  return out;
}

std::string resolve_listed_path(const std::string& base, const std::string& name) {
  if (is_remote_location(name)) return name;
  if (!is_remote_location(base)) return !name.empty() && name[0] == '/' ? name : base + "/" + name;
  const size_t host = base.find("://") + 3;
  const size_t slash = base.find('/', host);
  const std::string root = base.substr(0, slash);  // s3://BUCKET or http(s)://HOST[:PORT]
  std::string path = name;
  if (!name.empty() && name[0] == '/') {
    path.erase(0, 1);
  } else if (slash != std::string::npos) {
    path = base.substr(slash + 1) + "/" + name;
  }
  std::vector<std::string> parts;
  size_t begin = 0;
  while (true) {
    const size_t end = path.find('/', begin);
    const std::string part = path.substr(begin, end - begin);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (part != ".") {
      parts.push_back(part);  // "" too: a key may hold "//", and S3 keeps it
    }
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  std::string out = root;
  for (const std::string& part : parts) out += "/" + part;
  return out;
}

std::string read_listed_text(const std::string& path, uint64_t max_bytes) {
  if (!is_remote_location(path)) return File::open(path).read_all(max_bytes);
  std::vector<uint8_t> bytes;
  read_remote(path, &bytes);
  if (bytes.size() > max_bytes) {
    throw Error(ErrorKind::kCorruption, path,
                "object holds " + std::to_string(bytes.size()) + " bytes, more than the " +
                    std::to_string(max_bytes) + " allowed");
  }
  return std::string(bytes.begin(), bytes.end());
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

bool parse_index(const std::string& s, int64_t* out) {
  if (s.empty() || s.size() > 18) return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

RecordReader::RecordReader(const std::string& text, char sep)
    : text_(text), sep_(sep), pos_(text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0) {}

bool RecordReader::next(Record* r) {
  r->fields.assign(1, std::string());
  r->line = line_;
  r->unterminated = false;
  bool quoted = false, any_quote = false;
  const size_t n = text_.size();
  if (pos_ >= n) return false;
  while (pos_ < n) {
    const char c = text_[pos_++];
    const bool line_end = c == '\n' || c == '\r';
    if (line_end) {
      if (c == '\r' && pos_ < n && text_[pos_] == '\n') ++pos_;  // CRLF: one line end
      ++line_;
      if (!quoted) break;
      r->fields.back() += '\n';  // a line end inside a quoted field (RFC 4180) is part of it
    } else if (quoted) {
      if (c == '"' && pos_ < n && text_[pos_] == '"') {
        r->fields.back() += '"';
        ++pos_;
      } else if (c == '"') {
        quoted = false;
      } else {
        r->fields.back() += c;
      }
    } else if (c == '"' && r->fields.back().empty()) {
      quoted = any_quote = true;
    } else if (c == sep_) {
      r->fields.emplace_back();
    } else {
      r->fields.back() += c;
    }
  }
  r->unterminated = quoted;
  r->blank = !any_quote && r->fields.size() == 1 && trim(r->fields[0]).empty();
  return true;
}

std::string path_problem(const std::string& name, const std::string& base, bool confine,
                         const std::string& base_is) {
  const size_t nul = name.find('\0');
  if (nul != std::string::npos) {
    return "the path holds a NUL byte after '" + name.substr(0, nul) +
           "' (a file name cannot hold one)";
  }
  if (is_remote_location(name) && !names_object(name)) {
    return "the URL '" + name +
           "' names no object (expected s3://BUCKET/KEY or http(s)://HOST/PATH)";
  }
  if (!confine || name.empty()) return "";
  const std::string p = absolute_path(resolve_listed_path(base, name));
  if (p.compare(0, base.size(), base) == 0 && (p.size() == base.size() || p[base.size()] == '/')) {
    return "";
  }
  return "the path '" + name + "' leads outside " + base_is + " " + base + " (--confine)";
}

void check_options_apply(const std::string& source, const SourceOptions& o, bool table, bool coco) {
  if (!table && (!o.image_column.empty() || !o.label_column.empty() || !o.field_kinds.empty())) {
    throw SourceOptionError(
        ErrorKind::kInvalidArgument, source,
        "--image-column, --label-column and --field apply to .csv/.tsv/.jsonl tables");
  }
  if (!coco && (!o.image_root.empty() || (!o.coco_mask.empty() && o.coco_mask != "none"))) {
    throw SourceOptionError(ErrorKind::kInvalidArgument, source,
                            "--image-root and --coco-mask apply to COCO instances JSON sources");
  }
}

std::vector<std::string> numbered_classes(int64_t max_label, const SourceOptions& opt,
                                          const std::string& path) {
  if (!opt.class_names.empty()) {
    if (max_label >= static_cast<int64_t>(opt.class_names.size())) {
      throw Error(ErrorKind::kInvalidArgument, path,
                  "label " + std::to_string(max_label) + " but --classes names only " +
                      std::to_string(opt.class_names.size()) + " classes");
    }
    return opt.class_names;
  }
  // Integer labels name the classes "0".."max", one string each: a label far past any real class
  // count (an id column, a typo) would allocate billions of them. Past kMaxNumberedClasses the
  // user must name the classes.
  if (max_label >= kMaxNumberedClasses) {
    throw Error(ErrorKind::kInvalidArgument, path,
                "label " + std::to_string(max_label) + ": integer labels are class indexes below " +
                    std::to_string(kMaxNumberedClasses) + " (name the classes with --classes)");
  }
  std::vector<std::string> classes;
  for (int64_t i = 0; i <= max_label; ++i) classes.push_back(std::to_string(i));
  return classes;
}

std::vector<std::string> label_classes(const std::vector<std::string_view>& labels,
                                       const SourceOptions& opt, const std::string& path,
                                       std::vector<int64_t>* indexes) {
  indexes->assign(labels.size(), 0);
  bool numeric = true;
  int64_t max_label = -1;
  for (size_t i = 0; i < labels.size() && numeric; ++i) {
    numeric = parse_index(std::string(labels[i]), &(*indexes)[i]);
    max_label = std::max(max_label, (*indexes)[i]);
  }
  if (numeric) return numbered_classes(max_label, opt, path);
  std::vector<std::string> classes = opt.class_names;  // names given: they fix the order
  if (classes.empty()) {
    std::set<std::string, std::less<>> names;
    for (std::string_view l : labels) names.emplace(l);
    classes.assign(names.begin(), names.end());
  }
  std::map<std::string, int64_t, std::less<>> by_name;
  for (size_t i = 0; i < classes.size(); ++i) by_name[classes[i]] = static_cast<int64_t>(i);
  for (size_t i = 0; i < labels.size(); ++i) {
    auto it = by_name.find(labels[i]);
    if (it == by_name.end()) {
      throw Error(ErrorKind::kInvalidArgument, path,
                  "label '" + std::string(labels[i]) + "' is not in --classes");
    }
    (*indexes)[i] = it->second;
  }
  return classes;
}

}  // namespace ingest_detail
}  // namespace dscache
