// model.json (trainer/model_card.h): what each task's card holds, and its atomic write.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../temp_dir.h"
#include "dscache/error.h"
#include "model_card.h"

namespace {

using namespace dscache::train;
using nlohmann::json;

DataInfo rgb_info() {
  DataInfo info;
  info.height = 32;
  info.width = 24;
  info.channels = 3;
  info.classes = {"cat", "dog", "emu"};
  return info;
}

TargetSpec spec(TaskKind kind, std::vector<std::string> names, std::vector<double> mean,
                std::vector<double> std) {
  TargetSpec t;
  t.kind = kind;
  t.names = std::move(names);
  t.mean = std::move(mean);
  t.std = std::move(std);
  return t;
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE(
      "model.json per task: the architecture, input, normalization and the outputs' meaning") {
    const Normalization norm{{0.25, 0.5, 0.75}, {0.1, 0.2, 0.3}};
    struct Row {
      const char* name;
      TaskKind task;
      ModelKind model;
      uint32_t image_size;
      TargetSpec targets;
      json want;  // the keys that differ between rows
    };
    const Row rows[] = {
        {"classify",
         TaskKind::kClassify,
         ModelKind::kCnn,
         0,
         {},
         {{"model", "cnn"},
          {"task", "classify"},
          {"height", 32},
          {"width", 24},
          {"outputs", 3},
          {"classes", {"cat", "dog", "emu"}}}},
        {"multilabel, resnet18 at --image-size 16",
         TaskKind::kMultilabel,
         ModelKind::kResnet18,
         16,
         spec(TaskKind::kMultilabel, {"tags[0]", "tags[1]"}, {0, 0}, {1, 1}),
         {{"model", "resnet18"},
          {"task", "multilabel"},
          {"height", 16},
          {"width", 16},
          {"outputs", 2},
          {"targets", {"tags[0]", "tags[1]"}}}},
        {"regress",
         TaskKind::kRegress,
         ModelKind::kCnn,
         0,
         spec(TaskKind::kRegress, {"age", "score"}, {40.5, 0.25}, {12.0, 2.0}),
         {{"model", "cnn"},
          {"task", "regress"},
          {"height", 32},
          {"width", 24},
          {"outputs", 2},
          {"targets", {"age", "score"}},
          {"target_mean", {40.5, 0.25}},
          {"target_std", {12.0, 2.0}}}},
    };
    for (const Row& r : rows) {
      CAPTURE(r.name);
      TrainOptions o;
      o.task.kind = r.task;
      o.model = r.model;
      o.image_size = r.image_size;
      const auto card = model_card_json(make_model_card(o, rgb_info(), norm, r.targets));
      CHECK(card.begin().key() == "format");  // written in the documented order
      const json got = json::parse(card.dump());
      json want = {
          {"format", "dscache-model/1"},
          {"in_channels", 3},
          {"normalization",
           {{"mean", {0.25, 0.5, 0.75}},
            {"std", {0.1, 0.2, 0.3}},
            {"input", "NCHW float32, x = (pixel/255 - mean[c]) / std[c]"}}},
          {"channels_order", "RGB"},
      };
      want.update(r.want);
      CHECK(got == want);
    }
  }

  TEST_CASE("model.json: grey caches say L; a segmentation card carries its ignore index") {
    DataInfo grey = rgb_info();
    grey.channels = 1;
    ModelCard card = make_model_card(TrainOptions{}, grey, {{0.5}, {0.25}}, {});
    CHECK(model_card_json(card)["channels_order"] == "L");
    CHECK(model_card_json(card)["in_channels"] == 1);
    CHECK_FALSE(model_card_json(card).contains("ignore_index"));
    card.ignore_index = 255;
    CHECK(model_card_json(card)["ignore_index"] == 255);
  }

  TEST_CASE("write_model_card: the whole file or an error naming the path") {
    dscache::test::TempDir tmp;
    const ModelCard card = make_model_card(TrainOptions{}, rgb_info(), {{0, 0, 0}, {1, 1, 1}}, {});
    const std::string path = tmp.path() + "/model.json";
    write_model_card(path, card);
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    CHECK(text.str() == model_card_json(card).dump(2) + "\n");
    CHECK(json::parse(text.str())["format"] == "dscache-model/1");
    const std::string missing = tmp.path() + "/no/such/dir/model.json";
    try {
      write_model_card(missing, card);
      FAIL("wrote into a missing directory");
    } catch (const dscache::Error& e) {
      CHECK(std::string(e.what()).find(tmp.path() + "/no/such/dir") != std::string::npos);
    }
  }
}
