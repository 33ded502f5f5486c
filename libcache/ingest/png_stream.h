// Row-by-row PNG decoding (libpng) into an AreaResizer: a PNG shrunk without ever holding the
// whole decoded image. Private to the ingest library; image_decode.cpp decides when it applies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "dscache/ingest/image_decode.h"

namespace dscache {

// What the streamed decode is asked for: the pixels OpenCV's decode (imdecode with the flags
// image_decode.cpp uses, then its alpha handling) would give, in OpenCV's channel order (B, G,
// R[, A] or grey), shrunk to dst_w x dst_h with INTER_AREA.
struct PngStreamRequest {
  uint32_t dst_w = 0;      // output columns; required
  uint32_t dst_h = 0;      // output rows; required
  int channels = 3;        // 1 (grey, as IMREAD_GRAYSCALE), 3 (BGR) or 4 (BGRA: keep)
  bool has_alpha = false;  // the file holds alpha as IMREAD_UNCHANGED sees it (4 channels)
  AlphaMode alpha = AlphaMode::kDrop;       // drop, composite (channels 3) or keep (channels 4)
  uint8_t background[3] = {255, 255, 255};  // composite's R, G, B
};

enum class PngStreamStatus {
  kDone,           // `out` holds dst_h * dst_w * channels bytes
  kNotApplicable,  // interlaced, or a shape the streamed path does not handle: use the old path
  kFailed,         // libpng rejected the data (`error` says why)
};

// Decodes the PNG in `data` and writes the shrunk pixels to `out`. *transparent: an alpha
// below its maximum at the source's depth was seen (set only when req.has_alpha). Needs
// libpng (DSCACHE_HAVE_LIBPNG); without it always kNotApplicable. Thread-safe.
PngStreamStatus stream_png(const uint8_t* data, size_t size, const PngStreamRequest& req,
                           uint8_t* out, bool* transparent, std::string* error);

}  // namespace dscache
