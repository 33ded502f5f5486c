// Parsing COCO instances JSON as a stream (internal to the ingest library): the root's "images",
// "annotations" and "categories" arrays element by element, never the whole text at once.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "dscache/ingest/coco.h"
#include "json/stream.h"

namespace dscache::ingest_detail {

// The largest annotation file read (COCO 2017's train instances are ~450 MiB).
constexpr uint64_t kMaxJsonBytes = uint64_t{1} << 32;

// Reads `length` bytes at `offset` of the document parsed: the text or file being parsed, or for
// a listed CocoInstances its file or held bytes.
using BytesAt = std::function<std::string(uint64_t offset, uint32_t length)>;

// Parses the COCO document `in` delivers (the file or text at `path`) as read_coco_instances
// says (coco.h), with its errors; `bytes_at` reads an annotation again for the message of an
// image it makes bad. file_size, file_mtime_ns and held are left for the caller to set.
CocoInstances parse_coco(JsonStreamBuf& in, const std::string& path, const BytesAt& bytes_at);

// The segmentation of the annotation object at bytes [offset, offset + length); Error(kCorruption,
// path) when those bytes are not one (the file changed unnoticed).
CocoSegmentation segmentation_at(const BytesAt& bytes_at, uint64_t offset, uint32_t length,
                                 const std::string& path);

}  // namespace dscache::ingest_detail
