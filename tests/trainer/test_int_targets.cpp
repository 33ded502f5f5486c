// --task regress on integer scalar fields (suite unit): accepted, read as float32 by
// batch_targets, and named by integer_targets_note (the line dscache-train prints once).
#include "torch_doctest.h"  // first: LibTorch, then doctest

#include <cstdint>
#include <string>
#include <vector>

#include "dscache/loader.h"
#include "fixtures.h"
#include "targets.h"
#include "task.h"
#include "task_caches.h"

namespace {

using namespace dscache::train;

TaskOptions regress(std::vector<std::string> targets) {
  TaskOptions t;
  t.kind = TaskKind::kRegress;
  t.targets = std::move(targets);
  return t;
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("tasks: an integer scalar is a regression target, read as float32 and said once") {
    trainer_test::TempDir tmp;
    const auto cache = trainer_test::brightness_cache(tmp.path() + "/c", 40, 9);
    // id: int64, the sample number; r: float32.
    const TargetSpec ids = resolve_targets(regress({"id"}), *cache, "--train c");
    CHECK(ids.names == std::vector<std::string>{"id"});
    CHECK(integer_targets_note(ids, *cache) ==
          "--task regress: target id (int64) holds integers, read as float32");
    const TargetSpec two = resolve_targets(regress({"r", "id", "a"}), *cache, "--train c");
    CHECK(integer_targets_note(two, *cache) ==
          "--task regress: targets a (int64), id (int64) hold integers, read as float32");
    CHECK(integer_targets_note(resolve_targets(regress({"r"}), *cache, "x"), *cache).empty());
    TaskOptions ml = regress({"a"});
    ml.kind = TaskKind::kMultilabel;  // its int64 0/1 targets are no cast worth a note
    CHECK(integer_targets_note(resolve_targets(ml, *cache, "x"), *cache).empty());

    auto loader = trainer_test::fields_loader(cache, 40, ids.fields, dscache::Shuffle::kNone);
    loader->start_epoch(0, 0);
    const dscache::Batch* b = loader->next();
    REQUIRE(b != nullptr);
    const torch::Tensor y = batch_targets(ids, *b, torch::kCPU, "--train c");
    CHECK((y.scalar_type() == torch::kFloat));
    REQUIRE(y.size(0) == 40);
    for (int64_t s = 0; s < 40; ++s) {
      CAPTURE(s);
      CHECK(y[s][0].item<float>() == static_cast<float>(b->indices[s]));
    }
  }
}
