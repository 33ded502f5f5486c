// Loader and Transform options from Python keywords, for _dscache.cpp's Loader binding and
// dscache.Transform's check (validated by libcache, which names the field).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "_binding.h"
#include "dscache/loader.h"
#include "dscache/transform.h"

namespace dscache {
namespace {

// Each keyword's names come from libcache's table; an unknown one is Error(kInvalidArgument)
// naming the keyword and listing the names (ValueError in Python).
CropMode parse_crop(const std::string& s) { return kCropModeNames.parse(s, "transform.crop"); }

}  // namespace

// dscache.Transform's values as libcache's options (the crop name parsed: an unknown one is
// InvalidArgument listing the known names).
TransformOptions transform_options(const std::string& crop, uint32_t height, uint32_t width,
                                   double scale_min, double scale_max, double ratio_min,
                                   double ratio_max, bool flip) {
  TransformOptions t;
  t.crop = parse_crop(crop);
  t.height = height;
  t.width = width;
  t.scale_min = scale_min;
  t.scale_max = scale_max;
  t.ratio_min = ratio_min;
  t.ratio_max = ratio_max;
  t.flip = flip;
  return t;
}

LoaderOptions make_loader_options(uint32_t batch_size, bool drop_last, const std::string& shuffle,
                                  uint64_t block, uint64_t window_blocks, uint64_t block_bytes,
                                  uint64_t window_bytes, uint32_t rank, uint32_t world_size,
                                  const std::string& rank_tail, uint32_t workers, uint32_t prefetch,
                                  const std::string& crop, uint32_t height, uint32_t width,
                                  double scale_min, double scale_max, double ratio_min,
                                  double ratio_max, bool flip,
                                  const std::optional<std::vector<std::string>>& fields,
                                  double min_box_visibility, uint32_t batch_stride,
                                  uint32_t batch_offset) {
  LoaderOptions o;
  o.batch_size = batch_size;
  o.drop_last = drop_last;
  o.batch_stride = batch_stride;
  o.batch_offset = batch_offset;
  o.sampler = sampler_options(shuffle, block, window_blocks, rank, world_size, rank_tail);
  o.sampler.block_bytes = block_bytes;
  o.sampler.window_bytes = window_bytes;
  o.workers = workers;
  o.prefetch = prefetch;
  o.transform =
      transform_options(crop, height, width, scale_min, scale_max, ratio_min, ratio_max, flip);
  o.fields = fields;
  o.min_box_visibility = min_box_visibility;
  return o;
}

}  // namespace dscache
