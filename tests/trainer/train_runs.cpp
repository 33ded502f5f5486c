// Running dscache-train and comparing its runs (train_runs.h): the one LibTorch file of the
// binary's tests, for loading model.pt.
#include "train_runs.h"
#include "torch_doctest.h"  // first: LibTorch, then doctest

#include <cstdlib>
#include <map>
#include <sstream>

#include "fixtures.h"
#include "models.h"

namespace trainer_test {

using dscache::train::make_model;
using dscache::train::ModelKind;

namespace {

// Named parameters and buffers of a model.pt written by dscache-train.
std::map<std::string, torch::Tensor> load_weights(const std::string& path, ModelKind kind,
                                                  int64_t c, int64_t classes, int64_t h,
                                                  int64_t w) {
  auto m = make_model(kind, c, classes, h, w);
  torch::serialize::InputArchive a;
  a.load_from(path);
  m->load(a);
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : m->named_parameters()) out[p.key()] = p.value().detach().clone();
  for (const auto& b : m->named_buffers()) out[b.key()] = b.value().detach().clone();
  return out;
}

}  // namespace

std::string train_exe() {
  const char* p = std::getenv("DSCACHE_TRAIN");
  REQUIRE_MESSAGE(p != nullptr, "DSCACHE_TRAIN must name the built dscache-train");
  return p;
}

std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::istringstream in(trainer_test::read_file(path));
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

void check_same_result(const std::string& a_dir, const std::string& b_dir, ModelKind kind,
                       int64_t c, int64_t classes, int64_t h, int64_t w, size_t lines) {
  const auto wa = load_weights(a_dir + "/model.pt", kind, c, classes, h, w);
  const auto wb = load_weights(b_dir + "/model.pt", kind, c, classes, h, w);
  REQUIRE(wa.size() == wb.size());
  for (const auto& [name, t] : wa) {
    CAPTURE(name);
    CHECK(torch::equal(t, wb.at(name)));
  }
  const auto ma = read_metrics(a_dir + "/metrics.jsonl");
  const auto mb = read_metrics(b_dir + "/metrics.jsonl");
  // The same history draws the same curves.png: a resumed run's covers the whole run.
  const std::string png_a = trainer_test::read_file(a_dir + "/curves.png");
  CHECK(png_a.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
  CHECK(png_a == trainer_test::read_file(b_dir + "/curves.png"));
  REQUIRE(ma.size() == mb.size());
  CHECK(ma.size() == lines);
  for (size_t i = 0; i < ma.size(); ++i) {
    CAPTURE(i);
    CHECK(ma[i]["kind"] == mb[i]["kind"]);
    CHECK(ma[i]["step"] == mb[i]["step"]);
    CHECK(ma[i]["loss"].get<double>() == mb[i]["loss"].get<double>());
    if (ma[i]["kind"] == "epoch" && !ma[i]["val_acc"].is_null()) {
      CHECK(ma[i]["val_acc"].get<double>() == mb[i]["val_acc"].get<double>());
    }
  }
}

void check_close_weights(const std::string& a, const std::string& b, ModelKind kind, int64_t c,
                         int64_t classes, int64_t h, int64_t w, double rtol, double atol) {
  const auto w1 = load_weights(a, kind, c, classes, h, w);
  const auto w2 = load_weights(b, kind, c, classes, h, w);
  for (const auto& [name, t] : w1) {
    CAPTURE(name);
    CHECK(torch::allclose(t, w2.at(name), rtol, atol));
  }
}

}  // namespace trainer_test
