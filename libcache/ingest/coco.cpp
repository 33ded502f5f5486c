// COCO instances annotations: sniffing and parsing (nlohmann::json), and listing them as build
// entries with fields. Masks (RLE strings, rasterising, mask images): coco_mask.cpp.
#include "dscache/ingest/coco.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "dscache/checksum.h"
#include "dscache/error.h"
#include "dscache/file.h"
#include "json_parse.h"
#include "list_internal.h"

namespace dscache {
namespace {

using json = nlohmann::json;

// The largest annotation file read (COCO 2017's train instances are ~450 MiB).
constexpr uint64_t kMaxJsonBytes = uint64_t{1} << 32;
// A box may pass its image's edge by this many pixels (COCO's own files do, by float rounding
// of x + w); it is clipped. Farther out, the annotation does not describe this image.
constexpr double kBoxTolerance = 1.0;
// Images larger than this on a side are refused as corrupt (a typo, not a photograph).
constexpr int64_t kMaxSide = int64_t{1} << 20;

[[noreturn]] void corrupt(const std::string& path, const std::string& reason) {
  throw Error(ErrorKind::kCorruption, path, reason);
}

// An integer JSON value (a float with an integral value too: some exporters write 480.0).
bool as_int(const json& v, int64_t* out) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}) return false;
    *out = v.get<int64_t>();
    return true;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9e15) return false;
    *out = static_cast<int64_t>(d);
    return true;
  }
  return false;
}

// obj[key] as an integer; Corruption "WHERE has no KEY" / "WHERE.KEY is not an integer".
int64_t int_member(const json& obj, const char* key, const std::string& where,
                   const std::string& path) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) corrupt(path, where + " has no " + key);
  int64_t v;
  if (!as_int(*it, &v)) corrupt(path, where + "." + key + " is not an integer");
  return v;
}

std::string string_member(const json& obj, const char* key, const std::string& where,
                          const std::string& path) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) corrupt(path, where + " has no " + key);
  if (!it->is_string()) corrupt(path, where + "." + key + " is not a string");
  return it->get<std::string>();
}

const json& array_member(const json& root, const char* key, const std::string& path) {
  auto it = root.find(key);
  if (it == root.end()) corrupt(path, std::string("no \"") + key + "\" array: not COCO instances");
  if (!it->is_array()) corrupt(path, std::string("\"") + key + "\" is not an array");
  return *it;
}

// Parses annotations[i].segmentation into `seg`. Corruption for a structure that is not COCO's.
void parse_segmentation(const json& s, const std::string& where, const std::string& path,
                        CocoSegmentation* seg) {
  if (s.is_array()) {
    for (size_t j = 0; j < s.size(); ++j) {
      const std::string w = where + "[" + std::to_string(j) + "]";
      if (!s[j].is_array()) corrupt(path, w + " is not a list of numbers");
      if (s[j].size() % 2 != 0) {
        corrupt(path, w + " has an odd count of numbers (" + std::to_string(s[j].size()) + ")");
      }
      std::vector<double> poly;
      poly.reserve(s[j].size());
      for (const auto& v : s[j]) {
        if (!v.is_number()) corrupt(path, w + " holds a value that is not a number");
        poly.push_back(v.get<double>());
      }
      if (!poly.empty()) seg->polygons.push_back(std::move(poly));
    }
    return;
  }
  if (!s.is_object()) corrupt(path, where + " is neither polygons nor an RLE object");
  auto size = s.find("size");
  int64_t h, w;
  if (size == s.end() || !size->is_array() || size->size() != 2 || !as_int((*size)[0], &h) ||
      !as_int((*size)[1], &w) || h <= 0 || w <= 0 || h > kMaxSide || w > kMaxSide) {
    corrupt(path, where + ".size is not [height, width]");
  }
  seg->rle_height = static_cast<uint32_t>(h);
  seg->rle_width = static_cast<uint32_t>(w);
  auto counts = s.find("counts");
  if (counts == s.end()) corrupt(path, where + " has no counts");
  if (counts->is_string()) {
    try {
      seg->rle_counts = decode_rle_string(counts->get<std::string>(), where + ".counts");
    } catch (const Error& e) {
      corrupt(path, e.path() + ": " + e.reason());
    }
  } else if (counts->is_array()) {
    for (const auto& v : *counts) {
      int64_t c;
      if (!as_int(v, &c) || c < 0 || c > int64_t{UINT32_MAX}) {
        corrupt(path, where + ".counts holds a value that is not a count");
      }
      seg->rle_counts.push_back(static_cast<uint32_t>(c));
    }
  } else {
    corrupt(path, where + ".counts is neither a string nor a list");
  }
  uint64_t total = 0;
  for (uint32_t c : seg->rle_counts) total += c;
  if (total != static_cast<uint64_t>(h) * static_cast<uint64_t>(w)) {
    corrupt(path, where + ".counts cover " + std::to_string(total) + " pixels, size [" +
                      std::to_string(h) + ", " + std::to_string(w) + "] has " +
                      std::to_string(h * w));
  }
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// Why annotation `a` cannot be part of image `img` ("" = it can). `box` is x1 y1 x2 y2.
std::string misfit(const CocoSegmentation& seg, const double box[4], const CocoImage& img) {
  const double w = img.width, h = img.height, t = kBoxTolerance;
  if (box[0] < -t || box[1] < -t || box[2] > w + t || box[3] > h + t) {
    return "box " + fmt(box[0]) + "," + fmt(box[1]) + "," + fmt(box[2]) + "," + fmt(box[3]) +
           " (x1,y1,x2,y2) lies outside the " + std::to_string(img.width) + "x" +
           std::to_string(img.height) + " image";
  }
  if (seg.is_rle() && (seg.rle_height != img.height || seg.rle_width != img.width)) {
    return "RLE size [" + std::to_string(seg.rle_height) + ", " + std::to_string(seg.rle_width) +
           "] differs from the image's [" + std::to_string(img.height) + ", " +
           std::to_string(img.width) + "]";
  }
  // Polygon points are traced at 5x: a point far outside would cost a trace that long.
  for (const auto& poly : seg.polygons) {
    for (size_t j = 0; j < poly.size(); j += 2) {
      if (!(poly[j] >= -w && poly[j] <= 2 * w && poly[j + 1] >= -h && poly[j + 1] <= 2 * h)) {
        return "polygon point (" + fmt(poly[j]) + ", " + fmt(poly[j + 1]) +
               ") lies far outside the " + std::to_string(img.width) + "x" +
               std::to_string(img.height) + " image";
      }
    }
  }
  return "";
}

void parse_annotations(const json& anns, const std::map<int64_t, size_t>& image_of,
                       const std::map<int64_t, size_t>& category_of, const std::string& path,
                       CocoInstances* coco) {
  for (size_t i = 0; i < anns.size(); ++i) {
    const json& a = anns[i];
    const std::string where = "annotations[" + std::to_string(i) + "]";
    if (!a.is_object()) corrupt(path, where + " is not an object");
    const int64_t image_id = int_member(a, "image_id", where, path);
    const int64_t category_id = int_member(a, "category_id", where, path);
    auto img_it = image_of.find(image_id);
    if (img_it == image_of.end()) {
      corrupt(path, where + " names image id " + std::to_string(image_id) + ", not in images");
    }
    auto bbox = a.find("bbox");
    if (bbox == a.end()) corrupt(path, where + " has no bbox");
    if (!bbox->is_array() || bbox->size() != 4) {
      corrupt(path, where + ".bbox has " +
                        (bbox->is_array() ? std::to_string(bbox->size()) + " numbers"
                                          : std::string("no list of numbers")) +
                        ": expected x, y, width, height");
    }
    double xywh[4];
    for (size_t j = 0; j < 4; ++j) {
      if (!(*bbox)[j].is_number()) corrupt(path, where + ".bbox holds a value not a number");
      xywh[j] = (*bbox)[j].get<double>();
    }
    CocoAnnotation ann;
    auto crowd = a.find("iscrowd");
    if (crowd != a.end() && !crowd->is_null()) {
      int64_t c;
      if (crowd->is_boolean()) {
        ann.crowd = crowd->get<bool>();
      } else if (as_int(*crowd, &c) && (c == 0 || c == 1)) {
        ann.crowd = c == 1;
      } else {
        corrupt(path, where + ".iscrowd is not 0 or 1");
      }
    }
    auto seg = a.find("segmentation");
    if (seg != a.end() && !seg->is_null()) {
      parse_segmentation(*seg, where + ".segmentation", path, &ann.segmentation);
    }
    CocoImage& img = coco->images[img_it->second];
    if (!img.bad.empty()) continue;
    int64_t ann_id;
    auto id = a.find("id");
    const std::string named = (id != a.end() && as_int(*id, &ann_id))
                                  ? "annotation " + std::to_string(ann_id) + " (" + where + ")"
                                  : where;
    auto cat = category_of.find(category_id);
    if (cat == category_of.end()) {
      img.bad = named + ": category id " + std::to_string(category_id) + " is not in categories";
      img.annotations.clear();
      continue;
    }
    if (!(xywh[2] > 0) || !(xywh[3] > 0)) continue;  // no area: dropped (coco.h)
    const double box[4] = {xywh[0], xywh[1], xywh[0] + xywh[2], xywh[1] + xywh[3]};
    std::string why = misfit(ann.segmentation, box, img);
    if (!why.empty()) {
      img.bad = named + ", category id " + std::to_string(category_id) + ": " + why;
      img.annotations.clear();
      continue;
    }
    const double cx1 = std::max(box[0], 0.0), cy1 = std::max(box[1], 0.0);
    const double cx2 = std::min<double>(box[2], img.width);
    const double cy2 = std::min<double>(box[3], img.height);
    const float f[4] = {static_cast<float>(cx1), static_cast<float>(cy1), static_cast<float>(cx2),
                        static_cast<float>(cy2)};
    if (!(f[0] < f[2]) || !(f[1] < f[3])) continue;  // nothing left inside the image: dropped
    std::copy(f, f + 4, ann.box);
    ann.category = cat->second;
    img.annotations.push_back(std::move(ann));
  }
}

CocoInstances parse_coco(const std::string& text, const std::string& path) {
  const json root = parse_json(text, JsonOrigin{path, ErrorKind::kCorruption});
  if (!root.is_object()) corrupt(path, "not a JSON object: not COCO instances");
  const json& images = array_member(root, "images", path);
  const json& anns = array_member(root, "annotations", path);
  const json& cats = array_member(root, "categories", path);
  CocoInstances coco;
  coco.path = path;
  std::map<int64_t, size_t> category_of, image_of;
  for (size_t i = 0; i < cats.size(); ++i) {
    const std::string where = "categories[" + std::to_string(i) + "]";
    if (!cats[i].is_object()) corrupt(path, where + " is not an object");
    const int64_t id = int_member(cats[i], "id", where, path);
    if (!category_of.emplace(id, i).second) {
      corrupt(path, where + " repeats category id " + std::to_string(id));
    }
    coco.category_ids.push_back(id);
    coco.categories.push_back(string_member(cats[i], "name", where, path));
  }
  coco.images.reserve(images.size());
  for (size_t i = 0; i < images.size(); ++i) {
    const std::string where = "images[" + std::to_string(i) + "]";
    if (!images[i].is_object()) corrupt(path, where + " is not an object");
    CocoImage img;
    img.id = int_member(images[i], "id", where, path);
    img.file_name = string_member(images[i], "file_name", where, path);
    if (img.file_name.empty()) corrupt(path, where + ".file_name is empty");
    const int64_t h = int_member(images[i], "height", where, path);
    const int64_t w = int_member(images[i], "width", where, path);
    if (h <= 0 || w <= 0 || h > kMaxSide || w > kMaxSide) {
      corrupt(path, where + " is " + std::to_string(w) + "x" + std::to_string(h) +
                        ": expected a positive width and height");
    }
    img.height = static_cast<uint32_t>(h);
    img.width = static_cast<uint32_t>(w);
    if (!image_of.emplace(img.id, i).second) {
      corrupt(path, where + " repeats image id " + std::to_string(img.id));
    }
    coco.images.push_back(std::move(img));
  }
  parse_annotations(anns, image_of, category_of, path, &coco);
  return coco;
}

// Stops at the first event that tells: the top level is not an object (false), or it has shown
// all three arrays (true).
class CocoSniffer : public nlohmann::json_sax<json> {
 public:
  bool is_coco() const { return found_ == 7; }
  bool null() override { return scalar(); }
  bool boolean(bool) override { return scalar(); }
  bool number_integer(number_integer_t) override { return scalar(); }
  bool number_unsigned(number_unsigned_t) override { return scalar(); }
  bool number_float(number_float_t, const string_t&) override { return scalar(); }
  bool string(string_t&) override { return scalar(); }
  bool binary(binary_t&) override { return scalar(); }
  bool start_object(std::size_t) override {
    if (depth_ == 0 && started_) return false;
    started_ = true;
    ++depth_;
    key_.clear();
    return true;
  }
  bool end_object() override { return --depth_ > 0; }
  bool key(string_t& k) override {
    if (depth_ == 1) key_ = k;
    return true;
  }
  bool start_array(std::size_t) override {
    if (depth_ == 0) return false;
    if (depth_ == 1) {
      if (key_ == "images") found_ |= 1;
      if (key_ == "annotations") found_ |= 2;
      if (key_ == "categories") found_ |= 4;
      if (found_ == 7) return false;
    }
    ++depth_;
    return true;
  }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  bool scalar() { return depth_ > 0; }
  int depth_ = 0;
  bool started_ = false;
  int found_ = 0;
  std::string key_;
};

template <typename T>
void append_le(std::vector<uint8_t>& out, T v) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 4 || sizeof(T) == 8, "element size");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof v);
  for (size_t b = 0; b < sizeof v; ++b) out.push_back(static_cast<uint8_t>(bits >> (8 * b)));
}

}  // namespace

bool is_coco_instances(const std::string& path) {
  try {
    File f = File::open(path);
    // A first look: JSON objects start with '{' (after a BOM and blanks); anything else is
    // told apart without reading the whole file.
    char head[64];
    const uint64_t n = std::min<uint64_t>(sizeof head, f.size());
    f.read_at(0, n, head);
    size_t i = (n >= 3 && std::memcmp(head, "\xEF\xBB\xBF", 3) == 0) ? 3 : 0;
    while (i < n && (head[i] == ' ' || head[i] == '\t' || head[i] == '\n' || head[i] == '\r')) {
      ++i;
    }
    if (i == n || head[i] != '{') return false;
    const std::string text = f.read_all(kMaxJsonBytes);
    CocoSniffer sniffer;
    json::sax_parse(text, &sniffer);
    return sniffer.is_coco();
  } catch (const std::exception&) {
    return false;
  }
}

CocoInstances read_coco_instances(const std::string& path) {
  const std::string abs = absolute_path(path);
  return parse_coco(ingest_detail::read_listed_text(abs, kMaxJsonBytes), abs);
}

SourceListing list_coco(const std::string& path, const SourceOptions& options) {
  const std::string abs = absolute_path(path);
  return ingest_detail::list_coco_text(abs, ingest_detail::read_listed_text(abs, kMaxJsonBytes),
                                       options);
}

SourceListing ingest_detail::list_coco_text(const std::string& abs, const std::string& text,
                                            const SourceOptions& options) {
  auto coco = std::make_shared<CocoInstances>(parse_coco(text, abs));
  // The file first: a broken one is named as such whatever the options.
  ingest_detail::check_options_apply(abs, options, false, true);
  if (options.image_root.empty()) {
    throw SourceOptionError(
        ErrorKind::kInvalidArgument, abs,
        "a COCO instances file needs --image-root (the folder its file_name are in)");
  }
  const bool mask = options.coco_mask == "semantic";
  if (!mask && !options.coco_mask.empty() && options.coco_mask != "none") {
    throw SourceOptionError(ErrorKind::kInvalidArgument, abs,
                            "--coco-mask " + options.coco_mask + ": expected none or semantic");
  }
  if (mask && coco->categories.size() > 255) {
    throw Error(ErrorKind::kUnsupported, abs,
                std::to_string(coco->categories.size()) +
                    " categories: --coco-mask semantic stores uint8 masks (at most 255)");
  }
  const std::string root = absolute_path(options.image_root);

  SourceListing out;
  out.kind = "coco";
  out.root = abs;
  out.labels_path = absolute_path(options.image_root);  // the manifest's source.labels: where
                                                        // the images are (verify --source)
  FieldSpec boxes{"boxes", FieldKind::kBoxes, FieldType::kFloat32, {4}, "", {}};
  FieldSpec labels{"box_labels", FieldKind::kRows, FieldType::kInt64,
                   {},           "boxes",          coco->categories};
  FieldSpec crowd{"box_crowd", FieldKind::kRows, FieldType::kUint8, {}, "boxes", {}};
  FieldSpec image_id{"image_id", FieldKind::kScalar, FieldType::kInt64, {}, "", {}};
  out.fields = {boxes, labels, crowd, image_id};
  if (mask) {
    FieldSpec m{"mask", FieldKind::kMask, FieldType::kUint8, {}, "", {"background"}};
    m.classes.insert(m.classes.end(), coco->categories.begin(), coco->categories.end());
    out.fields.push_back(std::move(m));
  }
  const size_t nf = out.fields.size();
  out.columns.values.assign(nf, {});
  out.columns.offsets.assign(nf, std::vector<uint64_t>{0});

  Xxh64 h;
  h.update(text.data(), text.size());
  out.entries.set_path_prefix(root + "/");
  out.entries.reserve(coco->images.size());
  std::vector<std::string> paths;
  paths.reserve(coco->images.size());
  for (const CocoImage& img : coco->images) {
    paths.push_back(ingest_detail::resolve_listed_path(root, img.file_name));
  }
  std::vector<ingest_detail::FileStat> stats = ingest_detail::stat_listed(paths);
  for (size_t k = 0; k < coco->images.size(); ++k) {
    const CocoImage& img = coco->images[k];
    SourceEntry e;
    e.name = img.file_name;
    e.path = paths[k];
    if (stats[k].is_file) {
      e.size = stats[k].size;
      e.mtime_ns = stats[k].mtime_ns;
      e.etag = std::move(stats[k].etag);
    }
    e.bad = img.bad.empty()
                ? ingest_detail::path_problem(img.file_name, root, options.confine, "--image-root")
                : img.bad;
    auto& v = out.columns.values;
    if (e.bad.empty()) {
      for (const CocoAnnotation& a : img.annotations) {
        for (float c : a.box) append_le(v[0], c);
        append_le(v[1], static_cast<int64_t>(a.category));
        append_le(v[2], static_cast<uint8_t>(a.crowd ? 1 : 0));
      }
      append_le(v[3], img.id);
    }
    for (size_t f = 0; f < nf; ++f) out.columns.offsets[f].push_back(v[f].size());
    h.update(e.name.data(), e.name.size());
    h.update("\0", 1);
    h.update(&e.size, sizeof e.size);
    h.update(&e.mtime_ns, sizeof e.mtime_ns);
    if (!e.etag.empty()) h.update(e.etag.data(), e.etag.size() + 1);  // remote: what changes
    out.entries.push_back(std::move(e));
  }
  out.digest = h.digest();
  out.coco = std::move(coco);
  return out;
}

}  // namespace dscache
