// What a source's bytes say before any decode: the kind of content for a message, the pixel
// limit's reason, whether a JPEG's scan ends, whether a PNG or WebP header promises alpha.
// Private to the ingest library (image_decode.cpp). Every read stays within [data, data + n).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "dscache/ingest/image_decode.h"

namespace dscache {
namespace detail {

// What a file that is no image holds, from its first 512 bytes, for a "not an image" message:
// "zero bytes", "HTML", "XML", "PDF", "a ZIP archive", "gzip data", "text" or "binary data".
// Never the bytes themselves: a path that leads elsewhere (/etc/passwd) must not be quoted
// into skipped.jsonl.
std::string content_kind(const uint8_t* data, size_t size);

// Empty when within the limit; otherwise the skip reason.
std::string pixel_limit_reason(uint64_t w, uint64_t h, uint64_t max_pixels);

// True when a JPEG's main image has an end-of-image marker after its first scan. OpenCV decodes a
// file cut mid-scan "successfully", filling the rest with grey; we would rather skip it.
bool jpeg_has_eoi(const uint8_t* d, size_t n);

// True when a JPEG's header holds no EXIF orientation that imdecode would apply: no APP1 "Exif"
// segment, or each one's IFD0 has no Orientation tag (0x0112) or has 1. False for anything else,
// a segment it cannot read included (the caller then leaves the decode to OpenCV).
bool jpeg_orientation_is_identity(const uint8_t* d, size_t n);

// True when the file may hold an alpha channel that IMREAD_UNCHANGED keeps, from its header: PNG
// and WebP. No other format's alpha is looked at (TIFF, BMP, JPEG 2000).
bool may_have_alpha(ImageFormat f, const uint8_t* d, size_t n);

}  // namespace detail
}  // namespace dscache
