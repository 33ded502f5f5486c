// model.json: the card of a trained model.
#include "model_card.h"

#include "dscache/atomic_file.h"

namespace dscache {
namespace train {

ModelCard make_model_card(const TrainOptions& o, const DataInfo& info, const Normalization& norm,
                          const TargetSpec& targets) {
  ModelCard c;
  c.model = to_string(o.model);
  c.task = to_string(o.task.kind);
  c.in_channels = info.channels;
  // the size build_model() gave the model: --image-size, else the cache's
  c.height = o.image_size ? o.image_size : info.height;
  c.width = o.image_size ? o.image_size : info.width;
  c.norm = norm;
  c.channels_order = info.channels == 1 ? "L" : info.channels == 4 ? "RGBA" : "RGB";
  if (o.task.kind == TaskKind::kClassify) {
    c.classes = info.classes;
    c.outputs = static_cast<int64_t>(info.classes.size());
  } else if (o.task.kind == TaskKind::kSegment) {  // a score per class and pixel
    c.classes = targets.names;
    c.targets = targets.fields;  // the mask field
    c.outputs = targets.outputs();
    c.ignore_index = targets.ignore_index;
  } else {
    c.targets = targets.names;
    c.outputs = targets.outputs();
    if (o.task.kind == TaskKind::kRegress) {
      c.target_mean = targets.mean;
      c.target_std = targets.std;
    }
  }
  return c;
}

nlohmann::ordered_json model_card_json(const ModelCard& c) {
  nlohmann::ordered_json j = {
      {"format", kModelCardFormat},   {"model", c.model},   {"task", c.task},
      {"in_channels", c.in_channels}, {"height", c.height}, {"width", c.width},
      {"outputs", c.outputs},
  };
  if (!c.classes.empty()) j["classes"] = c.classes;
  if (!c.targets.empty()) j["targets"] = c.targets;
  if (!c.target_mean.empty()) {
    j["target_mean"] = c.target_mean;
    j["target_std"] = c.target_std;
  }
  j["normalization"] = {{"mean", c.norm.mean},
                        {"std", c.norm.std},
                        {"input", "NCHW float32, x = (pixel/255 - mean[c]) / std[c]"}};
  j["channels_order"] = c.channels_order;
  if (c.ignore_index) j["ignore_index"] = *c.ignore_index;
  return j;
}

void write_model_card(const std::string& path, const ModelCard& card) {
  const std::string text = model_card_json(card).dump(2) + "\n";
  write_file_atomic(path, text.data(), text.size());
}

}  // namespace train
}  // namespace dscache
