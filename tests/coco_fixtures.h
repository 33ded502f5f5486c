// COCO instances files written by the coco tests (test_coco*.cpp): images, annotations and
// categories as JSON, and the file in a temp dir.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"

namespace dscache::test {

inline nlohmann::json image(int64_t id, const std::string& file, int w, int h) {
  return {{"id", id}, {"file_name", file}, {"width", w}, {"height", h}};
}

inline nlohmann::json annotation(int64_t id, int64_t image_id, int64_t category_id,
                                 std::vector<double> bbox,
                                 nlohmann::json segmentation = nlohmann::json::array(),
                                 int crowd = 0) {
  return {{"id", id},     {"image_id", image_id},         {"category_id", category_id},
          {"bbox", bbox}, {"segmentation", segmentation}, {"iscrowd", crowd}};
}

// Non-contiguous ids, listed out of id order: indexes follow the file's order.
inline nlohmann::json categories() {
  return nlohmann::json::array(
      {{{"id", 7}, {"name", "cat"}}, {{"id", 3}, {"name", "dog"}}, {{"id", 90}, {"name", "bird"}}});
}

inline std::string write_json(const TempDir& dir, const nlohmann::json& j,
                              const std::string& name = "ann.json") {
  write_all(dir.file(name), j.dump());
  return dir.file(name);
}

}  // namespace dscache::test
