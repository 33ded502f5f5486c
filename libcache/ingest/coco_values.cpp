// The values of one element of a COCO instances file (coco_values.h).
#include "coco_values.h"

#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

#include "dscache/error.h"

namespace dscache::ingest_detail::coco {
namespace {

using json = nlohmann::json;

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

void corrupt(const std::string& path, const std::string& reason) {
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

}  // namespace dscache::ingest_detail::coco
