// Text on a Raster with a built-in 5x7 bitmap font (printable ASCII), for chart labels.
#pragma once

#include <string>

#include "raster.h"

namespace dscache {
namespace train {

// Glyph cells are 6 x 8 font pixels (5 x 7 above the baseline, a row for descenders, a column of
// spacing), each font pixel `scale` x `scale` raster pixels. Characters outside printable ASCII
// draw as '?'.
constexpr int kGlyphAdvance = 6;
constexpr int kGlyphHeight = 8;

inline int text_width(const std::string& text, int scale) {
  return static_cast<int>(text.size()) * kGlyphAdvance * scale;
}

// Draws `text` with its top-left corner at (x, y).
void draw_text(Raster* picture, int x, int y, const std::string& text, Rgb colour, int scale);

// The same turned 90 degrees anticlockwise (read bottom to top), its bottom-left corner at
// (x, y): for a vertical axis title.
void draw_text_up(Raster* picture, int x, int y, const std::string& text, Rgb colour, int scale);

}  // namespace train
}  // namespace dscache
