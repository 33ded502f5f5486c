// COCO instances parsed as a stream: nlohmann's SAX over the file with one small DOM per element
// of the root's arrays, each checked as coco.h says and reduced to a record, then the records
// resolved against the images and categories (the keys come in any order).
#include "coco_parse.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <istream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "coco_values.h"
#include "dscache/error.h"
#include "json/parse.h"

namespace dscache::ingest_detail {
namespace {

using json = nlohmann::json;

using coco::as_int;
using coco::corrupt;
using coco::int_member;
using coco::kMaxSide;
using coco::misfit;
using coco::parse_segmentation;
using coco::string_member;

// What parsing keeps of annotations[i] until the images and categories are known (the keys may
// come in any order): enough to decide its fate and its box exactly, and where its bytes are.
struct AnnotationRecord {
  int64_t image_id = 0, category_id = 0;
  double xywh[4] = {0, 0, 0, 0};  // bbox as written (box and clipping are computed in double)
  uint64_t offset = 0;            // its JSON object: bytes [offset, offset + length)
  float extent[4];                // its polygon points' x min, y min, x max, y max, rounded
                                  // outwards ({inf, inf, -inf, -inf}: no points)
  uint32_t length = 0;
  uint32_t rle_height = 0, rle_width = 0;  // RLE only: its size
  bool crowd = false;
};

// tests/cli/test_build_tables.py coco_memory bounds the peak memory per annotation from these.
static_assert(sizeof(AnnotationRecord) <= 88, "AnnotationRecord grew: see coco_memory's bound");
static_assert(sizeof(CocoAnnotation) <= 40, "CocoAnnotation grew: see coco_memory's bound");

// State of one of the root's three arrays. A repeated key replaces the earlier value (as
// nlohmann's DOM does).
struct SectionState {
  bool present = false;
  bool is_array = false;
  size_t count = 0;          // elements seen
  std::exception_ptr error;  // the first element that is not COCO's: later ones are skipped
};

enum Section { kImages = 0, kAnnotations = 1, kCategories = 2, kOther = 3 };
const char* const kSectionNames[] = {"images", "annotations", "categories"};

// Everything a parse gathers before the annotations are resolved.
struct CocoParse {
  CocoInstances coco;
  std::unordered_map<int64_t, size_t> category_of, image_of;
  std::vector<AnnotationRecord> anns;  // annotations[0 .. anns.size()), in file order
  SectionState sections[3];
  bool root_object = false;
  // The annotation that failed (sections[kAnnotations].error): its image id, when both of its
  // ids were read before the failure (a missing image is the error then, as it is checked first).
  bool failed_ids_read = false;
  int64_t failed_image_id = 0;
};

float round_down(double v) {
  float f = static_cast<float>(v);
  return f > v ? std::nextafter(f, -std::numeric_limits<float>::infinity()) : f;
}

float round_up(double v) {
  float f = static_cast<float>(v);
  return f < v ? std::nextafter(f, std::numeric_limits<float>::infinity()) : f;
}

void add_category(const json& c, size_t i, const std::string& path, CocoParse* p) {
  const std::string where = "categories[" + std::to_string(i) + "]";
  if (!c.is_object()) corrupt(path, where + " is not an object");
  const int64_t id = int_member(c, "id", where, path);
  if (!p->category_of.emplace(id, i).second) {
    corrupt(path, where + " repeats category id " + std::to_string(id));
  }
  p->coco.category_ids.push_back(id);
  p->coco.categories.push_back(string_member(c, "name", where, path));
}

void add_image(const json& m, size_t i, const std::string& path, CocoParse* p) {
  const std::string where = "images[" + std::to_string(i) + "]";
  if (!m.is_object()) corrupt(path, where + " is not an object");
  CocoImage img;
  img.id = int_member(m, "id", where, path);
  img.file_name = string_member(m, "file_name", where, path);
  if (img.file_name.empty()) corrupt(path, where + ".file_name is empty");
  const int64_t h = int_member(m, "height", where, path);
  const int64_t w = int_member(m, "width", where, path);
  if (h <= 0 || w <= 0 || h > kMaxSide || w > kMaxSide) {
    corrupt(path, where + " is " + std::to_string(w) + "x" + std::to_string(h) +
                      ": expected a positive width and height");
  }
  img.height = static_cast<uint32_t>(h);
  img.width = static_cast<uint32_t>(w);
  if (!p->image_of.emplace(img.id, i).second) {
    corrupt(path, where + " repeats image id " + std::to_string(img.id));
  }
  p->coco.images.push_back(std::move(img));
}

// Checks annotations[i] as far as it can be without its image and category, and records it.
void add_annotation(const json& a, size_t i, uint64_t offset, uint64_t end, const std::string& path,
                    CocoParse* p) {
  const std::string where = "annotations[" + std::to_string(i) + "]";
  if (!a.is_object()) corrupt(path, where + " is not an object");
  AnnotationRecord r;
  r.image_id = int_member(a, "image_id", where, path);
  r.category_id = int_member(a, "category_id", where, path);
  p->failed_ids_read = true;
  p->failed_image_id = r.image_id;
  auto bbox = a.find("bbox");
  if (bbox == a.end()) corrupt(path, where + " has no bbox");
  if (!bbox->is_array() || bbox->size() != 4) {
    corrupt(path, where + ".bbox has " +
                      (bbox->is_array() ? std::to_string(bbox->size()) + " numbers"
                                        : std::string("no list of numbers")) +
                      ": expected x, y, width, height");
  }
  for (size_t j = 0; j < 4; ++j) {
    if (!(*bbox)[j].is_number()) corrupt(path, where + ".bbox holds a value not a number");
    r.xywh[j] = (*bbox)[j].get<double>();
  }
  auto crowd = a.find("iscrowd");
  if (crowd != a.end() && !crowd->is_null()) {
    int64_t c;
    if (crowd->is_boolean()) {
      r.crowd = crowd->get<bool>();
    } else if (as_int(*crowd, &c) && (c == 0 || c == 1)) {
      r.crowd = c == 1;
    } else {
      corrupt(path, where + ".iscrowd is not 0 or 1");
    }
  }
  CocoSegmentation seg;
  auto s = a.find("segmentation");
  if (s != a.end() && !s->is_null()) parse_segmentation(*s, where + ".segmentation", path, &seg);
  double lo[2] = {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
  double hi[2] = {-lo[0], -lo[1]};
  for (const auto& poly : seg.polygons) {
    for (size_t j = 0; j < poly.size(); ++j) {
      lo[j % 2] = std::min(lo[j % 2], poly[j]);
      hi[j % 2] = std::max(hi[j % 2], poly[j]);
    }
  }
  r.extent[0] = round_down(lo[0]);
  r.extent[1] = round_down(lo[1]);
  r.extent[2] = round_up(hi[0]);
  r.extent[3] = round_up(hi[1]);
  if (seg.is_rle()) {
    r.rle_height = seg.rle_height;
    r.rle_width = seg.rle_width;
  }
  r.offset = offset;
  r.length = static_cast<uint32_t>(end - offset);
  p->failed_ids_read = false;
  p->anns.push_back(r);
}

// nlohmann SAX events of a whole COCO file: each element of the root's "images", "annotations"
// and "categories" arrays is built as a small DOM (nlohmann's own builder), checked and
// recorded, and dropped; everything else is only counted for the nesting bound. Errors in the
// elements are kept, not thrown, so that a syntax error later in the file is the one reported
// (as when the whole text was parsed first).
class CocoSax {
 public:
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  CocoSax(const JsonStreamBuf& in, const std::string& path, CocoParse* out)
      : in_(in), path_(path), p_(out) {}

  bool null() {
    return value([](Dom& d) { return d.null(); });
  }
  bool boolean(bool v) {
    return value([v](Dom& d) { return d.boolean(v); });
  }
  bool number_integer(number_integer_t v) {
    return value([v](Dom& d) { return d.number_integer(v); });
  }
  bool number_unsigned(number_unsigned_t v) {
    return value([v](Dom& d) { return d.number_unsigned(v); });
  }
  bool number_float(number_float_t v, const string_t& s) {
    return value([&](Dom& d) { return d.number_float(v, s); });
  }
  bool string(string_t& v) {
    return value([&](Dom& d) { return d.string(v); });
  }
  bool binary(binary_t& v) {
    return value([&](Dom& d) { return d.binary(v); });
  }
  bool start_object(std::size_t n) {
    return open([n](Dom& d) { return d.start_object(n); }, true);
  }
  bool start_array(std::size_t n) {
    return open([n](Dom& d) { return d.start_array(n); }, false);
  }
  bool end_object() {
    return close([](Dom& d) { return d.end_object(); });
  }
  bool end_array() {
    return close([](Dom& d) { return d.end_array(); });
  }
  bool key(string_t& k) {
    if (capturing_) return dom_->key(k);
    if (depth_ == 1) {
      key_section_ = kOther;
      for (int s = 0; s < 3; ++s) {
        if (k == kSectionNames[s]) key_section_ = static_cast<Section>(s);
      }
    }
    return true;
  }
  bool parse_error(std::size_t byte, const std::string&, const nlohmann::detail::exception& e) {
    error_byte_ = byte;
    error_reason_ = e.what();
    return false;
  }

  // Why the parse stopped: a syntax error (reason non-empty) or the nesting bound, at this
  // 1-based byte.
  size_t error_byte_ = 0;
  std::string error_reason_;

 private:
  using Dom = nlohmann::detail::json_sax_dom_parser<json>;

  // A new value of a root key that is one of the three: the key's earlier value is forgotten.
  void reset(Section s, bool is_array) {
    p_->sections[s] = SectionState{true, is_array, 0, nullptr};
    if (s == kCategories) {
      p_->coco.categories.clear();
      p_->coco.category_ids.clear();
      p_->category_of.clear();
    } else if (s == kImages) {
      p_->coco.images.clear();
      p_->image_of.clear();
    } else {
      p_->anns.clear();
      p_->failed_ids_read = false;
    }
  }

  template <typename F>
  bool value(F&& f) {
    if (capturing_) return f(*dom_);
    if (depth_ == 1 && p_->root_object && key_section_ != kOther) reset(key_section_, false);
    if (depth_ == 2 && in_section_ != kOther) {  // a scalar element
      dom_.emplace(element_, false);
      f(*dom_);
      finish(0, 0);
    }
    return true;
  }

  template <typename F>
  bool open(F&& f, bool object) {
    if (++depth_ > kMaxJsonDepth) {
      error_byte_ = in_.offset();
      return false;
    }
    if (capturing_) return f(*dom_);
    if (depth_ == 1) {
      p_->root_object = object;
    } else if (depth_ == 2 && p_->root_object && key_section_ != kOther) {
      reset(key_section_, !object);
      if (!object) in_section_ = key_section_;
    } else if (depth_ == 3 && in_section_ != kOther) {
      capturing_ = true;
      begin_ = in_.offset() - 1;
      dom_.emplace(element_, false);
      return f(*dom_);
    }
    return true;
  }

  template <typename F>
  bool close(F&& f) {
    const size_t depth = depth_--;
    if (capturing_) {
      const bool ok = f(*dom_);
      if (depth == 3) {
        capturing_ = false;
        finish(begin_, in_.offset());
      }
      return ok;
    }
    if (depth == 2) in_section_ = kOther;
    return true;
  }

  // Checks and records the element just built, then drops it.
  void finish(uint64_t begin, uint64_t end) {
    SectionState& st = p_->sections[in_section_];
    const size_t i = st.count++;
    if (!st.error) {
      try {
        if (in_section_ == kCategories) add_category(element_, i, path_, p_);
        if (in_section_ == kImages) add_image(element_, i, path_, p_);
        if (in_section_ == kAnnotations) add_annotation(element_, i, begin, end, path_, p_);
      } catch (const Error&) {
        st.error = std::current_exception();
      }
    }
    dom_.reset();
    element_ = json();
  }

  const JsonStreamBuf& in_;
  const std::string& path_;
  CocoParse* p_;
  size_t depth_ = 0;              // arrays and objects open
  Section key_section_ = kOther;  // the section the root's current key names
  Section in_section_ = kOther;   // the section whose array is open (depth 2)
  bool capturing_ = false;        // an element's array or object is open (depth >= 3)
  uint64_t begin_ = 0;            // where that element starts
  json element_;
  std::optional<Dom> dom_;
};

json annotation_at(const BytesAt& bytes_at, uint64_t offset, uint32_t length,
                   const std::string& path) {
  return parse_json(bytes_at(offset, length), JsonOrigin{path, ErrorKind::kCorruption});
}

}  // namespace

CocoSegmentation segmentation_at(const BytesAt& bytes_at, uint64_t offset, uint32_t length,
                                 const std::string& path) {
  const json a = annotation_at(bytes_at, offset, length, path);
  CocoSegmentation seg;
  auto s = a.find("segmentation");
  if (s != a.end() && !s->is_null()) {
    parse_segmentation(*s, "the annotation at byte " + std::to_string(offset) + ".segmentation",
                       path, &seg);
  }
  return seg;
}

namespace {

// Gives each recorded annotation to its image, as the whole-DOM parser did in file order: a
// missing image is an error; an unknown category or a misfit makes the image bad.
void resolve_annotations(CocoParse* p, const BytesAt& bytes_at, const std::string& path) {
  CocoInstances& coco = p->coco;
  std::vector<uint32_t> image_index(p->anns.size());
  std::vector<uint32_t> per_image(coco.images.size(), 0);
  auto missing = [&](size_t i, int64_t image_id) {
    corrupt(path, "annotations[" + std::to_string(i) + "] names image id " +
                      std::to_string(image_id) + ", not in images");
  };
  for (size_t i = 0; i < p->anns.size(); ++i) {
    auto it = p->image_of.find(p->anns[i].image_id);
    if (it == p->image_of.end()) missing(i, p->anns[i].image_id);
    image_index[i] = static_cast<uint32_t>(it->second);
    ++per_image[it->second];
  }
  const SectionState& st = p->sections[kAnnotations];
  if (st.error) {
    if (p->failed_ids_read && p->image_of.count(p->failed_image_id) == 0) {
      missing(p->anns.size(), p->failed_image_id);
    }
    std::rethrow_exception(st.error);
  }
  for (size_t k = 0; k < coco.images.size(); ++k) coco.images[k].annotations.reserve(per_image[k]);
  for (size_t i = 0; i < p->anns.size(); ++i) {
    const AnnotationRecord& r = p->anns[i];
    CocoImage& img = coco.images[image_index[i]];
    if (!img.bad.empty()) continue;
    auto named = [&] {
      const std::string where = "annotations[" + std::to_string(i) + "]";
      const json a = annotation_at(bytes_at, r.offset, r.length, path);
      int64_t ann_id;
      auto id = a.find("id");
      return (id != a.end() && as_int(*id, &ann_id))
                 ? "annotation " + std::to_string(ann_id) + " (" + where + ")"
                 : where;
    };
    auto cat = p->category_of.find(r.category_id);
    if (cat == p->category_of.end()) {
      img.bad =
          named() + ": category id " + std::to_string(r.category_id) + " is not in categories";
      img.annotations.clear();
      continue;
    }
    if (!(r.xywh[2] > 0) || !(r.xywh[3] > 0)) continue;  // no area: dropped (coco.h)
    const double box[4] = {r.xywh[0], r.xywh[1], r.xywh[0] + r.xywh[2], r.xywh[1] + r.xywh[3]};
    // The box and an RLE's size decide from the record; a polygon point far out only when the
    // rounded extent says it may be, and then from the segmentation read again.
    CocoSegmentation seg;
    seg.rle_height = r.rle_height;
    seg.rle_width = r.rle_width;
    std::string why = misfit(seg, box, img);
    const double w = img.width, h = img.height;
    if (why.empty() &&
        !(r.extent[0] >= -w && r.extent[2] <= 2 * w && r.extent[1] >= -h && r.extent[3] <= 2 * h)) {
      why = misfit(segmentation_at(bytes_at, r.offset, r.length, path), box, img);
    }
    if (!why.empty()) {
      img.bad = named() + ", category id " + std::to_string(r.category_id) + ": " + why;
      img.annotations.clear();
      continue;
    }
    const double cx1 = std::max(box[0], 0.0), cy1 = std::max(box[1], 0.0);
    const double cx2 = std::min<double>(box[2], img.width);
    const double cy2 = std::min<double>(box[3], img.height);
    const float f[4] = {static_cast<float>(cx1), static_cast<float>(cy1), static_cast<float>(cx2),
                        static_cast<float>(cy2)};
    if (!(f[0] < f[2]) || !(f[1] < f[3])) continue;  // nothing left inside the image: dropped
    CocoAnnotation ann;
    std::copy(f, f + 4, ann.box);
    ann.category = cat->second;
    ann.offset = r.offset;
    ann.length = r.length;
    ann.crowd = r.crowd;
    img.annotations.push_back(ann);
  }
}

}  // namespace

CocoInstances parse_coco(JsonStreamBuf& in, const std::string& path, const BytesAt& bytes_at) {
  CocoParse p;
  p.coco.path = path;
  CocoSax sax(in, path, &p);
  {
    std::istream stream(&in);
    if (!json::sax_parse(stream, &sax)) {
      const JsonOrigin origin{path, ErrorKind::kCorruption};
      const JsonPosition at = in.position(sax.error_byte_);
      if (sax.error_reason_.empty()) throw_json_depth_at(origin, sax.error_byte_, at);
      throw_json_syntax_at(origin, sax.error_byte_, at, sax.error_reason_);
    }
  }
  if (!p.root_object) corrupt(path, "not a JSON object: not COCO instances");
  for (int s = 0; s < 3; ++s) {
    const std::string key = kSectionNames[s];
    if (!p.sections[s].present) corrupt(path, "no \"" + key + "\" array: not COCO instances");
    if (!p.sections[s].is_array) corrupt(path, "\"" + key + "\" is not an array");
  }
  if (p.sections[kCategories].error) std::rethrow_exception(p.sections[kCategories].error);
  if (p.sections[kImages].error) std::rethrow_exception(p.sections[kImages].error);
  resolve_annotations(&p, bytes_at, path);
  p.coco.images.shrink_to_fit();
  return std::move(p.coco);
}

}  // namespace dscache::ingest_detail
