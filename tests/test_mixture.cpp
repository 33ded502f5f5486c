// Mixture::make's checks (every difference listed in one message), the unified classes and
// label remap, the counts, the fingerprint, and view(): the sources back to back.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "dscache/error.h"
#include "dscache/mixture.h"
#include "loader_fixtures.h"
#include "test_util.h"

using namespace dscache::test;
using dscache::FieldKind;
using dscache::FieldSpec;
using dscache::FieldType;
using dscache::MixBatching;
using dscache::MixSource;
using dscache::Mixture;
using dscache::MixtureOptions;

namespace {

// A source that only describes itself (the checks read nothing else): size, shape, fields,
// encoding; sample i's label is labels[i % labels.size()].
class FakeSource : public SampleSource {
 public:
  uint64_t n = 4;
  SampleShape shape_{28, 28, 1};
  std::vector<FieldSpec> fields_;
  bool encoded_ = false;
  std::vector<int64_t> labels{0};
  uint64_t size() const override { return n; }
  Layout layout() const override { return Layout::kFixed; }
  SampleShape shape() const override { return shape_; }
  int64_t label(uint64_t i) const override { return labels[i % labels.size()]; }
  uint64_t locality_block() const override { return 2; }
  void copy_sample(uint64_t i, uint8_t* out) const override {
    std::memset(out, static_cast<int>(i), shape_.bytes());
  }
  ImageView view(uint64_t) const override { throw Error(ErrorKind::kUnsupported, "", "no"); }
  bool encoded() const override { return encoded_; }
  const std::vector<FieldSpec>& fields() const override { return fields_; }
};

FieldSpec field(const std::string& name, FieldKind kind, FieldType dtype) {
  FieldSpec f;
  f.name = name;
  f.kind = kind;
  f.dtype = dtype;
  if (kind == FieldKind::kBoxes) f.shape = {4};
  return f;
}

MixSource mix_source(std::shared_ptr<const SampleSource> s, const std::string& name,
                     double weight = -1, double repeat = -1,
                     std::vector<std::string> classes = {"x"}) {
  MixSource m;
  m.source = std::move(s);
  m.name = name;
  m.weight = weight;
  m.repeat = repeat;
  m.classes = std::move(classes);
  return m;
}

std::string make_message(std::vector<MixSource> sources, const MixtureOptions& o = {}) {
  return invalid_argument_message([&] { Mixture::make(std::move(sources), o); });
}

std::shared_ptr<FakeSource> boxes_source() {
  auto s = std::make_shared<FakeSource>();
  s->fields_ = {field("boxes", FieldKind::kBoxes, FieldType::kFloat32)};
  return s;
}

}  // namespace

TEST_SUITE("mixture") {
  TEST_CASE("make lists every difference from the first source in one message") {
    auto a = boxes_source();
    auto b = boxes_source();
    b->shape_.channels = 3;
    auto c = std::make_shared<FakeSource>();
    c->fields_ = {field("mask", FieldKind::kMask, FieldType::kUint8)};
    CHECK(make_message({mix_source(a, "a"), mix_source(b, "b"), mix_source(c, "c")}) ==
          "mixture: sources differ from a (28x28x1, fields [boxes]): b has 3 channels; c has "
          "fields [mask]");

    auto d = boxes_source();
    d->fields_[0].classes = {"person"};
    auto e = boxes_source();
    e->encoded_ = true;
    auto f = boxes_source();
    auto g = boxes_source();
    g->fields_[0].dtype = FieldType::kInt64;
    const std::string m = make_message({mix_source(a, "a"), mix_source(d, "d"), mix_source(e, "e"),
                                        mix_source(f, "f", -1, -1, {}), mix_source(g, "g")});
    CHECK(m ==
          "mixture: sources differ from a (28x28x1, fields [boxes]): d's field boxes has other "
          "classes; e is encoded (JPEG); f has no classes; g's field boxes has dtype int64");
  }

  TEST_CASE("make refuses bad shares, empty sources with a share and repeated names by name") {
    auto a = std::make_shared<FakeSource>();
    auto empty = std::make_shared<FakeSource>();
    empty->n = 0;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    struct Case {
      std::vector<MixSource> sources;
      std::vector<std::string> parts;  // each must appear in the message
    };
    const std::vector<Case> cases = {
        {{mix_source(a, "a", 0.5), mix_source(a, "b", -1, 2)},
         {"weight or every source a repeat, not both (weights: a; repeats: b)"}},
        {{mix_source(a, "a", 0.5), mix_source(a, "b")}, {"b has no weight"}},
        {{mix_source(a, "a", nan), mix_source(a, "b", 0.5)}, {"a weight"}},
        {{mix_source(a, "a", -0.5), mix_source(a, "b", 0.5)}, {"a weight"}},
        {{mix_source(a, "a", 0), mix_source(a, "b", 0)}, {"every weight is 0"}},
        {{mix_source(a, "a", 1), mix_source(empty, "e", 0.5)},
         {"e is empty (0 samples) but has weight 0.5"}},
        {{mix_source(a, "a"), mix_source(a, "a")}, {"two sources are named a"}},
        // Two problems at once: both named.
        {{mix_source(a, "a", 0.5), mix_source(a, "a", nan)},
         {"two sources are named a", "a weight"}},
    };
    for (size_t i = 0; i < cases.size(); ++i) {
      CAPTURE(i);
      const std::string m = make_message(cases[i].sources);
      CAPTURE(m);
      CHECK(m.rfind("mixture: ", 0) == 0);
      for (const std::string& p : cases[i].parts) CHECK(m.find(p) != std::string::npos);
    }
    // Weight 0 with an empty source is fine (the source only lends its class names).
    CHECK_NOTHROW(Mixture::make({mix_source(a, "a", 1), mix_source(empty, "e", 0)}));
  }

  TEST_CASE("names default to source<k>; shares, counts and describe_shares") {
    auto a = std::make_shared<FakeSource>();
    a->n = 53;
    auto b = std::make_shared<FakeSource>();
    b->n = 10;
    auto m = Mixture::make({mix_source(a, "", 0.7), mix_source(b, "", 0.3)});
    CHECK(m->source(0).name == "source0");
    CHECK(m->source(1).name == "source1");
    CHECK_FALSE(m->repeats());
    // E = 63: 0.7 x 63 = 44.1, 0.3 x 63 = 18.9: floors 44 + 18, the one left over to the
    // larger remainder (source 1).
    CHECK(m->epoch_samples() == 63);
    CHECK(m->counts() == std::vector<uint64_t>{44, 19});
    CHECK(m->counts_for(10) == std::vector<uint64_t>{7, 3});
    CHECK(m->counts_for(0) == std::vector<uint64_t>{0, 0});
    CHECK(m->describe_shares() == "source0 0.7, source1 0.3");

    // Neither weights nor repeats: repeat 1 each; repeats: round(n x r).
    auto plain = Mixture::make({mix_source(a, "a"), mix_source(b, "b")});
    CHECK(plain->repeats());
    CHECK(plain->counts() == std::vector<uint64_t>{53, 10});
    CHECK(plain->describe_shares() == "a repeat 1, b repeat 1");
    auto rep = Mixture::make({mix_source(a, "a", -1, 1), mix_source(b, "b", -1, 2.5)});
    CHECK(rep->counts() == std::vector<uint64_t>{53, 25});
    CHECK(rep->epoch_samples() == 78);
    CHECK(rep->describe_shares() == "a repeat 1, b repeat 2.5");
    // The rest of an epoch under repeats splits by the counts: 39 x 53/78 = 26.5, 39 x 25/78 =
    // 12.5: a tie, to the lower index.
    CHECK(rep->counts_for(39) == std::vector<uint64_t>{27, 12});
  }

  TEST_CASE("fingerprint: the same for the same mixture, another for anything the order uses") {
    auto a = std::make_shared<FakeSource>();
    auto b = std::make_shared<FakeSource>();
    b->n = 9;
    const auto make = [&](double wa, const std::string& id, MixBatching batching,
                          uint64_t epoch_samples) {
      MixtureOptions o;
      o.batching = batching;
      o.epoch_samples = epoch_samples;
      auto s0 = mix_source(a, "a", wa);
      s0.identity = id;
      return Mixture::make({s0, mix_source(b, "b", 0.5)}, o);
    };
    const uint64_t base = make(0.5, "x", MixBatching::kRandom, 0)->fingerprint(8);
    CHECK(make(0.5, "x", MixBatching::kRandom, 0)->fingerprint(8) == base);
    CHECK(make(0.5, "x", MixBatching::kRandom, 0)->fingerprint(16) == base);  // random: no stratum
    CHECK(make(0.6, "x", MixBatching::kRandom, 0)->fingerprint(8) != base);
    CHECK(make(0.5, "y", MixBatching::kRandom, 0)->fingerprint(8) != base);
    CHECK(make(0.5, "x", MixBatching::kRandom, 20)->fingerprint(8) != base);
    const uint64_t strat = make(0.5, "x", MixBatching::kStratified, 0)->fingerprint(8);
    CHECK(strat != base);
    CHECK(make(0.5, "x", MixBatching::kStratified, 0)->fingerprint(16) != strat);
    // Saved states carry the digest: it must not drift between builds or platforms (a change
    // here refuses every saved mixture position).
    CHECK(base == 5869807697360394295ull);
  }

  TEST_CASE("classes unify by name across two caches; labels remapped through the view") {
    TempDir dir;
    Spec sa;
    sa.classes = {"cat", "dog", "emu"};
    sa.shard_counts = {7, 5};
    Spec sb;
    sb.classes = {"emu", "fox", "cat"};
    sb.shard_counts = {6};
    sb.seed = 2;
    const Built a = build_cache(dir.path() + "/a", sa);
    const Built b = build_cache(dir.path() + "/b", sb);
    auto m = Mixture::make({mix_source(a.cache, "a", -1, -1, sa.classes),
                            mix_source(b.cache, "b", -1, -1, sb.classes)});
    CHECK(m->classes() == std::vector<std::string>{"cat", "dog", "emu", "fox"});
    CHECK(m->remap(0) == std::vector<int64_t>{0, 1, 2});
    CHECK(m->remap(1) == std::vector<int64_t>{2, 3, 0});
    auto view = m->view();
    REQUIRE(view->size() == 18);
    CHECK(m->offset(0) == 0);
    CHECK(m->offset(1) == 12);
    const std::vector<int64_t> b_to_unified = {2, 3, 0};  // emu, fox, cat
    for (uint64_t i = 0; i < 18; ++i) {
      CAPTURE(i);
      const bool in_a = i < 12;
      const uint64_t local = in_a ? i : i - 12;
      CHECK(m->locate(i) == std::pair<uint32_t, uint64_t>{in_a ? 0u : 1u, local});
      const int64_t expected = in_a ? a.labels[local] : b_to_unified[b.labels[local]];
      CHECK(view->label(i) == expected);
      CHECK(view->view(i).label == expected);
      std::vector<uint8_t> px(view->shape().bytes());
      view->copy_sample(i, px.data());
      CHECK(px == (in_a ? a.samples[local] : b.samples[local]));
    }
    // A run across the boundary is split between the sources.
    std::vector<uint8_t> run(4 * view->shape().bytes());
    view->copy_samples(10, 4, run.data());
    std::vector<uint8_t> want;
    for (const auto* s : {&a.samples[10], &a.samples[11], &b.samples[0], &b.samples[1]}) {
      want.insert(want.end(), s->begin(), s->end());
    }
    CHECK(run == want);
    CHECK(view->layout() == Layout::kFixed);
    CHECK(view->stored_bytes() == a.cache->stored_bytes() + b.cache->stored_bytes());
    CHECK(view->locality_block() == std::min(a.cache->locality_block(), b.cache->locality_block()));

    // A given class list must hold every source's names.
    MixtureOptions given;
    given.classes = {"dog", "cat", "emu"};
    CHECK(make_message({mix_source(a.cache, "a", -1, -1, sa.classes),
                        mix_source(b.cache, "b", -1, -1, sb.classes)},
                       given) == "mixture: b's classes [fox] are not in the given class list");
    given.classes = {"fox", "emu", "dog", "cat"};
    auto fixed = Mixture::make({mix_source(a.cache, "a", -1, -1, sa.classes),
                                mix_source(b.cache, "b", -1, -1, sb.classes)},
                               given);
    CHECK(fixed->classes() == given.classes);
    CHECK(fixed->remap(0) == std::vector<int64_t>{3, 2, 1});
    CHECK(fixed->remap(1) == std::vector<int64_t>{1, 0, 3});
  }

  TEST_CASE("a label outside its source's classes is Corruption naming the source and sample") {
    auto a = std::make_shared<FakeSource>();
    auto b = std::make_shared<FakeSource>();
    b->labels = {0, 1, 7};
    auto m =
        Mixture::make({mix_source(a, "a", -1, -1, {"x"}), mix_source(b, "b", -1, -1, {"x", "y"})});
    CHECK(m->view()->label(5) == 1);  // b's sample 1: "y", unified 1
    try {
      m->view()->label(6);  // b's sample 2
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kCorruption);
      CHECK(e.reason() == "mixture source b, sample 2: label 7 is outside its 2 classes");
    }
  }

  TEST_CASE("sources of different sizes make a ragged view; sample shapes forwarded") {
    TempDir dir;
    Spec sa;
    sa.shard_counts = {3};
    Spec sb;
    sb.shard_counts = {4};
    sb.height = 8;
    sb.width = 9;
    const Built a = build_cache(dir.path() + "/a", sa);
    const Built b = build_cache(dir.path() + "/b", sb);
    auto m = Mixture::make({mix_source(a.cache, "a", -1, -1, sa.classes),
                            mix_source(b.cache, "b", -1, -1, sb.classes)});
    auto view = m->view();
    CHECK(view->layout() == Layout::kRagged);
    CHECK(view->shape().height == 0);
    CHECK(view->shape().channels == 3);
    CHECK(view->sample_shape(1).height == 6);
    CHECK(view->sample_shape(4).height == 8);
    CHECK(view->sample_shape(4).width == 9);
  }
}
