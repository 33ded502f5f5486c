// The values of one element of a COCO instances file (internal to coco_parse.cpp): integers and
// strings read as COCO writes them, a segmentation's polygons or RLE, and the rule that decides
// whether an annotation fits its image. Every failure is Corruption naming the file.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "dscache/ingest/coco.h"

namespace dscache::ingest_detail::coco {

// A box may pass its image's edge by this many pixels (COCO's own files do, by float rounding
// of x + w); it is clipped. Farther out, the annotation does not describe this image.
constexpr double kBoxTolerance = 1.0;
// Images larger than this on a side are refused as corrupt (a typo, not a photograph).
constexpr int64_t kMaxSide = int64_t{1} << 20;

// Error(kCorruption, path, reason).
[[noreturn]] void corrupt(const std::string& path, const std::string& reason);
// An integer JSON value (a float with an integral value too: some exporters write 480.0).
bool as_int(const nlohmann::json& v, int64_t* out);
// obj[key] as an integer; Corruption "WHERE has no KEY" / "WHERE.KEY is not an integer".
int64_t int_member(const nlohmann::json& obj, const char* key, const std::string& where,
                   const std::string& path);
// obj[key] as a string; Corruption "WHERE has no KEY" / "WHERE.KEY is not a string".
std::string string_member(const nlohmann::json& obj, const char* key, const std::string& where,
                          const std::string& path);
// Parses annotations[i].segmentation into `seg`. Corruption for a structure that is not COCO's.
void parse_segmentation(const nlohmann::json& s, const std::string& where, const std::string& path,
                        CocoSegmentation* seg);
// Why annotation `a` cannot be part of image `img` ("" = it can). `box` is x1 y1 x2 y2.
std::string misfit(const CocoSegmentation& seg, const double box[4], const CocoImage& img);

}  // namespace dscache::ingest_detail::coco
