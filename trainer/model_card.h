// OUTPUT/model.json: what inference needs besides model.pt's weights: the architecture, the
// input it expects and how to normalize it, and what the outputs mean (no torch types).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "data.h"
#include "options.h"
#include "targets.h"

namespace dscache {
namespace train {

constexpr const char* kModelCardFormat = "dscache-model/1";  // model.json's "format"

// The values model.json holds (docs/TRAINER.md, "Using model.pt for inference").
struct ModelCard {
  std::string model;                 // --model's name: "cnn", "resnet18", ...
  std::string task;                  // --task's name: "classify", "multilabel", "regress", ...
  uint32_t in_channels = 0;          // C of the NCHW input
  uint32_t height = 0;               // the input height the model was trained on; 0 = any
  uint32_t width = 0;                // and width; 0 = any
  int64_t outputs = 0;               // logits or values per sample (classes, targets)
  std::vector<std::string> classes;  // classify, segment: the name of each output; else empty
  std::vector<std::string> targets;  // multilabel, regress: the field behind each output;
                                     // segment: the mask field
  std::vector<double> target_mean;   // regress: prediction * std + mean is in the field's units
  std::vector<double> target_std;
  Normalization norm;                   // per channel, of pixel values scaled to [0, 1]
  std::string channels_order;           // what the cache stores: "RGB", "L" (grey) or "RGBA"
  std::optional<int64_t> ignore_index;  // segment: the mask value that counts nowhere
};

// The card of a run trained with `o` on `info`, normalized with `norm`; `targets` is the run's
// TargetSpec (read for multilabel, regress and segment).
ModelCard make_model_card(const TrainOptions& o, const DataInfo& info, const Normalization& norm,
                          const TargetSpec& targets);

// model.json's object, keys in this order (for people reading it): {"format": "dscache-model/1",
// "model", "task", "in_channels", "height", "width", "outputs"}, then "classes", "targets",
// "target_mean"/"target_std" where they apply, "normalization": {"mean", "std", "input"},
// "channels_order", and "ignore_index" where it applies.
nlohmann::ordered_json model_card_json(const ModelCard& card);

// Writes model_card_json(card) to `path` atomically (temp file, fsync, rename). Throws
// dscache::Error naming the file.
void write_model_card(const std::string& path, const ModelCard& card);

}  // namespace train
}  // namespace dscache
