// Running dscache-train and comparing its runs (train_runs.h): the one LibTorch file of the
// binary's tests, for loading model.pt.
#include "train_runs.h"
#include "torch_doctest.h"  // first: LibTorch, then doctest

#include <sys/wait.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
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
  auto m = make_model(kind, c, classes, h, w, kind == ModelKind::kUnetSmall);
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

std::vector<std::string> with_output(const std::vector<std::string>& args, const std::string& out) {
  return cat(cat({train_exe()}, args), {"--output", out, "--no-progress"});
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
    if (ma[i]["kind"] != "epoch") continue;
    for (const auto& [key, value] : ma[i].items()) {  // every task's validation numbers
      if (key.rfind("val_", 0) != 0 || !value.is_number()) continue;
      CAPTURE(key);
      CHECK(value.get<double>() == mb[i][key].get<double>());
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

void check_resume(const std::string& work, const std::vector<std::string>& args, int kill_after,
                  ModelKind kind, int64_t c, int64_t classes, int64_t h, int64_t w, size_t lines,
                  bool scaling) {
  const std::string a_dir = work + "/a", b_dir = work + "/b", log = work + "/log.txt";
  std::system(("rm -rf '" + a_dir + "' '" + b_dir + "' '" + log + "'").c_str());
  int st = trainer_test::run_process(with_output(args, a_dir), {}, log);
  INFO(trainer_test::read_file(log));
  REQUIRE(WIFEXITED(st));
  REQUIRE(WEXITSTATUS(st) == 0);
  st = trainer_test::run_process(with_output(args, b_dir),
                                 {"DSCACHE_TEST_KILL_AFTER_STEPS=" + std::to_string(kill_after)},
                                 log);
  REQUIRE(WIFSIGNALED(st));
  REQUIRE(WTERMSIG(st) == SIGKILL);
  CHECK_FALSE(std::ifstream(b_dir + "/model.pt").good());
  auto resumed = with_output(args, b_dir);
  resumed.push_back("--resume");
  st = trainer_test::run_process(resumed, {}, log);
  REQUIRE(WIFEXITED(st));
  REQUIRE(WEXITSTATUS(st) == 0);

  check_same_result(a_dir, b_dir, kind, c, classes, h, w, lines);
  const auto ma = read_metrics(a_dir + "/metrics.jsonl");
  CHECK(ma.front()["scale"].get<double>() == (scaling ? 65536.0 : 1.0));
}

}  // namespace trainer_test
