#include "inspect_fields.h"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

namespace dscache {
using json = nlohmann::json;

namespace {

// 20 distinct colours (Sasha Trubetskoy's list), RGB; mask id k > 0 and box label k - 1 get
// kPalette[(k - 1) % 20].
constexpr uint8_t kPalette[20][3] = {
    {230, 25, 75},   {60, 180, 75},   {255, 225, 25},  {0, 130, 200},   {245, 130, 48},
    {145, 30, 180},  {70, 240, 240},  {240, 50, 230},  {210, 245, 60},  {250, 190, 212},
    {0, 128, 128},   {220, 190, 255}, {170, 110, 40},  {255, 250, 200}, {128, 0, 0},
    {170, 255, 195}, {128, 128, 0},   {255, 215, 180}, {0, 0, 128},     {128, 128, 128}};
// Boxes without a label field.
const cv::Scalar kBoxColour(0, 255, 255);  // BGR yellow

cv::Scalar colour_of_id(uint64_t id) {  // id > 0
  const uint8_t* c = kPalette[(id - 1) % 20];
  return cv::Scalar(c[2], c[1], c[0]);
}

int64_t int_at(FieldType t, const uint8_t* p, uint64_t k) {
  if (t == FieldType::kInt64) {
    int64_t v;
    std::memcpy(&v, p + 8 * k, 8);
    return v;
  }
  return static_cast<int64_t>(element_at(t, p, k));
}

json element_json(FieldType t, const uint8_t* p, uint64_t k) {
  if (t == FieldType::kFloat32) return element_at(t, p, k);
  return int_at(t, p, k);
}

std::string element_text(FieldType t, const uint8_t* p, uint64_t k) {
  char buf[40];
  if (t == FieldType::kFloat32) {
    std::snprintf(buf, sizeof buf, "%g", element_at(t, p, k));
  } else {
    std::snprintf(buf, sizeof buf, "%" PRId64, int_at(t, p, k));
  }
  return buf;
}

// The name of value v of a class-valued field, or "".
std::string class_of(const FieldSpec& f, int64_t v) {
  if (v >= 0 && static_cast<uint64_t>(v) < f.classes.size()) {
    return f.classes[static_cast<size_t>(v)];
  }
  return "";
}

std::string shape_text(const std::vector<uint32_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// One sample's value shape as a reader gets it: a mask is its image's [H,W] (ragged: each
// image's own [h,w]), a kind of n rows [n,...row shape], a fixed kind the spec's shape.
std::string value_shape_text(const Manifest& m, const FieldSpec& f) {
  if (f.kind == FieldKind::kMask) {
    if (m.layout == Layout::kRagged) return "[h,w] (its image's)";
    return "[" + std::to_string(m.height) + "," + std::to_string(m.width) + "]";
  }
  if (!f.variable()) return shape_text(f.shape);
  std::string s = "[n";
  for (uint32_t d : f.shape) s += "," + std::to_string(d);
  return s + "]";
}

std::string hex(const std::vector<uint8_t>& v, size_t limit) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < std::min(v.size(), limit); ++i) {
    s += d[v[i] >> 4];
    s += d[v[i] & 15];
  }
  return s;
}

// Pixels per mask id.
std::map<uint64_t, uint64_t> mask_histogram(const FieldSpec& f, const std::vector<uint8_t>& v,
                                            uint64_t pixels) {
  std::map<uint64_t, uint64_t> h;
  for (uint64_t k = 0; k < pixels; ++k) ++h[static_cast<uint64_t>(int_at(f.dtype, v.data(), k))];
  return h;
}

// The index of the int-valued rows field that labels boxes field `b` (its first such field),
// or -1.
int label_field_of(const Manifest& m, size_t b) {
  for (size_t f = 0; f < m.fields.size(); ++f) {
    const FieldSpec& s = m.fields[f];
    if (s.kind == FieldKind::kRows && s.rows_of == m.fields[b].name && s.row_elements() == 1 &&
        s.dtype != FieldType::kFloat32) {
      return static_cast<int>(f);
    }
  }
  return -1;
}

// A box label's text: its class name, else its number.
std::string label_text(const FieldSpec& f, int64_t v) {
  std::string n = class_of(f, v);
  return n.empty() ? std::to_string(v) : n;
}

}  // namespace

SampleFields read_sample_fields(CacheView& c, uint64_t i, uint32_t height, uint32_t width) {
  SampleFields s;
  s.height = height;
  s.width = width;
  const size_t n = c.manifest().fields.size();
  s.values.resize(n);
  s.rows.resize(n);
  for (size_t f = 0; f < n; ++f) c.read_field(i, f, &s.values[f], &s.rows[f]);
  return s;
}

json fields_json(const Manifest& m) {
  json out = json::array();
  for (const FieldSpec& f : m.fields) {
    out.push_back({{"name", f.name},
                   {"kind", to_string(f.kind)},
                   {"dtype", to_string(f.dtype)},
                   {"shape", f.shape},
                   {"rows_of", f.rows_of.empty() ? json(nullptr) : json(f.rows_of)},
                   {"classes", f.classes},
                   {"class_count", f.classes.size()},
                   {"allow_nonfinite", f.allow_nonfinite}});
  }
  return out;
}

void print_fields(const Manifest& m) {
  if (m.fields.empty()) return;
  std::printf("fields     %zu\n", m.fields.size());
  size_t width = 4;
  for (const FieldSpec& f : m.fields) width = std::max(width, f.name.size());
  for (const FieldSpec& f : m.fields) {
    std::string extra;
    if (!f.rows_of.empty()) extra += ", rows of " + f.rows_of;
    if (!f.classes.empty()) extra += ", " + std::to_string(f.classes.size()) + " classes";
    if (f.allow_nonfinite) extra += ", NaN/inf allowed";
    std::printf("  %-*s %-6s %-7s shape %s%s\n", static_cast<int>(width), f.name.c_str(),
                to_string(f.kind), to_string(f.dtype), value_shape_text(m, f).c_str(),
                extra.c_str());
  }
}

json sample_fields_json(const Manifest& m, const SampleFields& s) {
  json out = json::object();
  for (size_t f = 0; f < m.fields.size(); ++f) {
    const FieldSpec& spec = m.fields[f];
    const std::vector<uint8_t>& v = s.values[f];
    const uint8_t* p = v.data();
    switch (spec.kind) {
      case FieldKind::kScalar:
        out[spec.name] = element_json(spec.dtype, p, 0);
        break;
      case FieldKind::kArray: {
        json a = json::array();
        for (uint64_t k = 0; k < spec.row_elements(); ++k)
          a.push_back(element_json(spec.dtype, p, k));
        out[spec.name] = a;
        break;
      }
      case FieldKind::kBoxes:
      case FieldKind::kRows: {
        json a = json::array();
        const uint64_t e = spec.row_elements();
        for (uint64_t r = 0; r < s.rows[f]; ++r) {
          if (spec.kind == FieldKind::kRows && spec.shape.empty()) {
            a.push_back(element_json(spec.dtype, p, r));
            continue;
          }
          json row = json::array();
          for (uint64_t k = 0; k < e; ++k) row.push_back(element_json(spec.dtype, p, r * e + k));
          a.push_back(row);
        }
        out[spec.name] = a;
        break;
      }
      case FieldKind::kText:
        out[spec.name] = std::string(v.begin(), v.end());
        break;
      case FieldKind::kBytes:
        out[spec.name] = {{"bytes", v.size()}, {"hex", hex(v, 256)}};
        break;
      case FieldKind::kMask: {
        json ids = json::array();
        for (const auto& [id, n] : mask_histogram(spec, v, s.rows[f])) {
          const std::string name = class_of(spec, static_cast<int64_t>(id));
          ids.push_back(
              {{"id", id}, {"pixels", n}, {"class", name.empty() ? json(nullptr) : json(name)}});
        }
        out[spec.name] = {{"height", s.height}, {"width", s.width}, {"ids", ids}};
        break;
      }
    }
  }
  return out;
}

void print_sample_fields(const Manifest& m, const SampleFields& s) {
  if (m.fields.empty()) return;
  size_t width = 4;
  for (const FieldSpec& f : m.fields) width = std::max(width, f.name.size());
  const int w = static_cast<int>(width);
  for (size_t f = 0; f < m.fields.size(); ++f) {
    const FieldSpec& spec = m.fields[f];
    const std::vector<uint8_t>& v = s.values[f];
    const uint8_t* p = v.data();
    std::string line;
    switch (spec.kind) {
      case FieldKind::kScalar:
        line = element_text(spec.dtype, p, 0);
        break;
      case FieldKind::kArray: {
        line = "[";
        std::string names;
        for (uint64_t k = 0; k < spec.row_elements(); ++k) {
          line += (k ? " " : "") + element_text(spec.dtype, p, k);
          if (spec.shape.size() == 1 && k < spec.classes.size() && element_at(spec.dtype, p, k)) {
            names += (names.empty() ? "" : ", ") + spec.classes[k];
          }
        }
        line += "]";
        if (!spec.classes.empty()) line += " (" + (names.empty() ? "none" : names) + ")";
        break;
      }
      case FieldKind::kBoxes: {
        line = std::to_string(s.rows[f]) + " box" + (s.rows[f] == 1 ? "" : "es") + " (x1 y1 x2 y2)";
        break;
      }
      case FieldKind::kRows: {
        const uint64_t e = spec.row_elements();
        line = std::to_string(s.rows[f]) + " row" + (s.rows[f] == 1 ? "" : "s");
        if (!spec.rows_of.empty()) line += " (one per " + spec.rows_of + " row, shown there)";
        if (spec.rows_of.empty()) {
          for (uint64_t r = 0; r < s.rows[f] && r < 20; ++r) {
            line += r ? "; " : ": ";
            for (uint64_t k = 0; k < e; ++k)
              line += (k ? " " : "") + element_text(spec.dtype, p, r * e + k);
            if (e == 1) {
              const std::string n = class_of(spec, int_at(spec.dtype, p, r));
              if (!n.empty()) line += " (" + n + ")";
            }
          }
          if (s.rows[f] > 20) line += "; ...";
        }
        break;
      }
      case FieldKind::kText: {
        std::string t(v.begin(), v.end());
        if (t.size() > 200) t = t.substr(0, 200) + "...";
        line = json(t).dump(-1, ' ', false, json::error_handler_t::replace);
        break;
      }
      case FieldKind::kBytes:
        line = std::to_string(v.size()) + " bytes" + (v.empty() ? "" : ": " + hex(v, 32)) +
               (v.size() > 32 ? "..." : "");
        break;
      case FieldKind::kMask: {
        line = std::to_string(s.height) + "x" + std::to_string(s.width) + ", ids";
        for (const auto& [id, n] : mask_histogram(spec, v, s.rows[f])) {
          const std::string name = class_of(spec, static_cast<int64_t>(id));
          line += " " + std::to_string(id) + (name.empty() ? "" : " (" + name + ")") + ": " +
                  std::to_string(n) + " px;";
        }
        if (line.back() == ';') line.pop_back();
        break;
      }
    }
    std::printf("  %-*s %s\n", w, spec.name.c_str(), line.c_str());
    if (spec.kind != FieldKind::kBoxes) continue;
    // Each box with the rows that follow it.
    for (uint64_t r = 0; r < s.rows[f]; ++r) {
      std::string b = "    box " + std::to_string(r) + ":";
      for (int k = 0; k < 4; ++k) b += " " + element_text(spec.dtype, p, r * 4 + k);
      for (size_t g = 0; g < m.fields.size(); ++g) {
        const FieldSpec& rs = m.fields[g];
        if (rs.kind != FieldKind::kRows || rs.rows_of != spec.name || r >= s.rows[g]) continue;
        const uint64_t e = rs.row_elements();
        b += "  " + rs.name + " ";
        for (uint64_t k = 0; k < e; ++k) {
          b += (k ? " " : "") + element_text(rs.dtype, s.values[g].data(), r * e + k);
        }
        if (e == 1) {
          const std::string n = class_of(rs, int_at(rs.dtype, s.values[g].data(), r));
          if (!n.empty()) b += " (" + n + ")";
        }
      }
      std::printf("%s\n", b.c_str());
    }
  }
}

bool has_drawn_fields(const Manifest& m) {
  for (const FieldSpec& f : m.fields) {
    if (f.kind == FieldKind::kMask || f.kind == FieldKind::kBoxes) return true;
  }
  return false;
}

void draw_fields(const Manifest& m, const SampleFields& s, bool names, cv::Mat* bgr) {
  if (s.height == 0 || s.width == 0) return;
  const double sx = static_cast<double>(bgr->cols) / s.width;
  const double sy = static_cast<double>(bgr->rows) / s.height;
  // Masks first, so that boxes stay visible over them.
  for (size_t f = 0; f < m.fields.size(); ++f) {
    const FieldSpec& spec = m.fields[f];
    if (spec.kind != FieldKind::kMask || s.rows[f] != uint64_t{s.height} * s.width) continue;
    cv::Mat ids(static_cast<int>(s.height), static_cast<int>(s.width),
                spec.dtype == FieldType::kUint16 ? CV_16UC1 : CV_8UC1,
                const_cast<uint8_t*>(s.values[f].data()));
    cv::Mat big;
    cv::resize(ids, big, bgr->size(), 0, 0, cv::INTER_NEAREST);
    big.convertTo(big, CV_32S);
    for (int y = 0; y < big.rows; ++y) {
      const int32_t* id = big.ptr<int32_t>(y);
      cv::Vec3b* px = bgr->ptr<cv::Vec3b>(y);
      for (int x = 0; x < big.cols; ++x) {
        if (id[x] == 0) continue;
        // Blended at one half; the region's edge fully coloured, so that touching regions of
        // one class stay apart from the picture.
        const cv::Scalar c = colour_of_id(static_cast<uint64_t>(id[x]));
        const bool edge = (x > 0 && id[x - 1] != id[x]) ||
                          (x + 1 < big.cols && id[x + 1] != id[x]) ||
                          (y > 0 && big.ptr<int32_t>(y - 1)[x] != id[x]) ||
                          (y + 1 < big.rows && big.ptr<int32_t>(y + 1)[x] != id[x]);
        const double a = edge ? 1.0 : 0.5;
        for (int ch = 0; ch < 3; ++ch) {
          px[x][ch] = cv::saturate_cast<uint8_t>((1 - a) * px[x][ch] + a * c[ch]);
        }
      }
    }
  }
  const int thick = std::max(1, static_cast<int>(std::lround(std::min(sx, sy) / 4)));
  const double fs = std::max(0.3, std::min(0.5, std::min(bgr->cols, bgr->rows) / 500.0));
  for (size_t b = 0; b < m.fields.size(); ++b) {
    if (m.fields[b].kind != FieldKind::kBoxes) continue;
    const int lf = label_field_of(m, b);
    const uint8_t* p = s.values[b].data();
    for (uint64_t r = 0; r < s.rows[b]; ++r) {
      const double x1 = element_at(FieldType::kFloat32, p, r * 4),
                   y1 = element_at(FieldType::kFloat32, p, r * 4 + 1),
                   x2 = element_at(FieldType::kFloat32, p, r * 4 + 2),
                   y2 = element_at(FieldType::kFloat32, p, r * 4 + 3);
      cv::Scalar colour = kBoxColour;
      std::string text;
      if (lf >= 0 && r < s.rows[static_cast<size_t>(lf)]) {
        const FieldSpec& ls = m.fields[static_cast<size_t>(lf)];
        const int64_t label = int_at(ls.dtype, s.values[static_cast<size_t>(lf)].data(), r);
        if (label >= 0) colour = colour_of_id(static_cast<uint64_t>(label) + 1);
        text = label_text(ls, label);
      }
      // Box edges to the pixels they enclose: [x1, x2) scaled, the last pixel inside.
      const cv::Point a(static_cast<int>(std::lround(x1 * sx)),
                        static_cast<int>(std::lround(y1 * sy)));
      const cv::Point z(std::max(a.x, static_cast<int>(std::lround(x2 * sx)) - 1),
                        std::max(a.y, static_cast<int>(std::lround(y2 * sy)) - 1));
      cv::rectangle(*bgr, a, z, colour, thick, cv::LINE_8);
      if (!names || text.empty()) continue;
      int base = 0;
      const cv::Size ts = cv::getTextSize(text, cv::FONT_HERSHEY_SIMPLEX, fs, 1, &base);
      // Above the box when there is room, else just inside its top edge.
      int ty = a.y - 2 >= ts.height + 2 ? a.y - 2 : a.y + ts.height + 2;
      int tx = std::min(a.x, std::max(0, bgr->cols - ts.width - 2));
      cv::rectangle(*bgr, cv::Point(tx, ty - ts.height - 2), cv::Point(tx + ts.width + 2, ty + 2),
                    colour, cv::FILLED);
      const bool light = colour[0] * 0.114 + colour[1] * 0.587 + colour[2] * 0.299 > 140;
      cv::putText(*bgr, text, cv::Point(tx + 1, ty), cv::FONT_HERSHEY_SIMPLEX, fs,
                  light ? cv::Scalar(0, 0, 0) : cv::Scalar(255, 255, 255), 1, cv::LINE_AA);
    }
  }
}

cv::Mat fields_legend(const Manifest& m, const SampleFields& s, int width) {
  // (palette id, text), each once: masks' ids, then box labels (label k as id k + 1) that no
  // mask id of the same colour names.
  std::map<uint64_t, std::set<std::string>> entries;
  for (size_t f = 0; f < m.fields.size(); ++f) {
    const FieldSpec& spec = m.fields[f];
    if (spec.kind == FieldKind::kMask && s.rows[f] == uint64_t{s.height} * s.width) {
      for (const auto& [id, n] : mask_histogram(spec, s.values[f], s.rows[f])) {
        if (id == 0) continue;
        const std::string name = class_of(spec, static_cast<int64_t>(id));
        entries[id].insert(std::to_string(id) + (name.empty() ? "" : " " + name));
      }
    }
  }
  for (size_t f = 0; f < m.fields.size(); ++f) {
    if (m.fields[f].kind != FieldKind::kBoxes) continue;
    const int lf = label_field_of(m, f);
    if (lf < 0) continue;
    const FieldSpec& ls = m.fields[static_cast<size_t>(lf)];
    for (uint64_t r = 0; r < s.rows[static_cast<size_t>(lf)]; ++r) {
      const int64_t label = int_at(ls.dtype, s.values[static_cast<size_t>(lf)].data(), r);
      if (label < 0) continue;
      const uint64_t id = static_cast<uint64_t>(label) + 1;
      // A mask entry of the same colour already names it when the names agree.
      const std::string t = label_text(ls, label);
      bool named = false;
      for (const std::string& e : entries[id])
        named = named || e.find(" " + t) != std::string::npos;
      if (!named) entries[id].insert("box " + t);
    }
  }
  if (entries.empty()) return cv::Mat();
  const double fs = 0.4;
  const int line = 16, pad = 4;
  std::vector<std::pair<cv::Scalar, std::string>> items;
  for (const auto& [id, texts] : entries) {
    for (const std::string& t : texts) items.emplace_back(colour_of_id(id), t);
  }
  // Lay the items out in rows.
  std::vector<cv::Point> at;
  int x = pad, y = pad;
  for (const auto& [c, t] : items) {
    int base = 0;
    const int w = 14 + cv::getTextSize(t, cv::FONT_HERSHEY_SIMPLEX, fs, 1, &base).width + 10;
    if (x > pad && x + w > width) {
      x = pad;
      y += line;
    }
    at.emplace_back(x, y);
    x += w;
  }
  cv::Mat strip(y + line + pad, width, CV_8UC3, cv::Scalar(40, 40, 40));
  for (size_t k = 0; k < items.size(); ++k) {
    cv::rectangle(strip, cv::Rect(at[k].x, at[k].y + 2, 10, 10), items[k].first, cv::FILLED);
    cv::putText(strip, items[k].second, cv::Point(at[k].x + 14, at[k].y + 11),
                cv::FONT_HERSHEY_SIMPLEX, fs, cv::Scalar(235, 235, 235), 1, cv::LINE_AA);
  }
  return strip;
}

}  // namespace dscache
