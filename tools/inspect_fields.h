// `dscache inspect`'s view of a cache's fields (docs/FORMAT.md "Fields"): the field list of the
// summary, one sample's values as text and JSON, and masks and boxes drawn over its picture.
#pragma once

#include <opencv2/core.hpp>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache_view.h"
#include "dscache/manifest.h"

namespace dscache {

// One sample's value of every field (manifest field order), as stored, and the size of its
// image (a mask's height and width).
struct SampleFields {
  std::vector<std::vector<uint8_t>> values;  // little-endian elements of the field's dtype
  std::vector<uint64_t> rows;                // CacheView::read_field's rows
  uint32_t height = 0, width = 0;            // the stored image's size
};

// Reads sample i's fields (empty for a cache without fields). Throws Corruption naming the file.
SampleFields read_sample_fields(CacheView& c, uint64_t i, uint32_t height, uint32_t width);

// The summary's field list: name, kind, dtype, shape, rows_of, classes (and their count).
nlohmann::json fields_json(const Manifest& m);
void print_fields(const Manifest& m);

// One sample's values: {name: value} (scalars as numbers, arrays flat, rows and boxes as lists,
// text as a string, bytes as hex, masks as per-id pixel counts), and the same as text lines.
nlohmann::json sample_fields_json(const Manifest& m, const SampleFields& s);
void print_sample_fields(const Manifest& m, const SampleFields& s);

// True when the cache has a field inspect draws (a mask or boxes).
bool has_drawn_fields(const Manifest& m);

// Draws the sample's masks (blended, one fixed colour per class id, 0 transparent) and boxes
// (rectangles in their label's colour, the label's name at the top left when `names`) over
// `bgr`, which shows the sample scaled to bgr's size. The same palette colours a mask id k and
// a box label k - 1 (COCO: box_labels are category indexes, mask ids indexes + 1).
void draw_fields(const Manifest& m, const SampleFields& s, bool names, cv::Mat* bgr);

// A legend strip `width` pixels wide: a swatch and a name for each mask id and box label the
// sample shows. Empty (0 rows) when there is nothing to name.
cv::Mat fields_legend(const Manifest& m, const SampleFields& s, int width);

}  // namespace dscache
