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

// The EXIF orientation (1..8) imdecode applies to a JPEG: 1 when no APP1 "Exif" segment holds an
// Orientation tag (0x0112) in IFD0 other than 1; otherwise that tag's value, when every Exif
// segment agrees on it and the first APP1 segment (the one OpenCV reads) is Exif. 0 for anything
// else, a segment it cannot read or a value outside 1..8 included (the caller then leaves the
// decode to OpenCV).
uint32_t jpeg_orientation(const uint8_t* d, size_t n);

// True when the file may hold an alpha channel that IMREAD_UNCHANGED keeps, from its header: PNG
// and WebP. No other format's alpha is looked at (TIFF, BMP, JPEG 2000).
bool may_have_alpha(ImageFormat f, const uint8_t* d, size_t n);

}  // namespace detail
}  // namespace dscache
