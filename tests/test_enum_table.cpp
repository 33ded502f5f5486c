// EnumTable: every options enum's names round-trip, and unknown names fail listing the names.
#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "dscache/cache.h"
#include "dscache/enum_table.h"
#include "dscache/error.h"
#include "dscache/manifest.h"
#include "dscache/sampler.h"
#include "dscache/transform.h"

namespace {

using dscache::EnumTable;
using dscache::Error;
using dscache::ErrorKind;

// What a table must hold: these names for these values, in this order (the order messages list
// them in). The names are stored in manifests or typed by users: a change here is a format or
// interface change, not a refactoring.
template <typename E>
struct Expected {
  const EnumTable<E>& table;
  std::vector<std::pair<E, std::string>> names;
  std::string listed;  // names(): what an error message lists
};

template <typename E>
void check_table(const Expected<E>& want) {
  const EnumTable<E>& t = want.table;
  REQUIRE(t.size() == want.names.size());
  size_t i = 0;
  for (const auto& entry : t) {
    CAPTURE(entry.name);
    CHECK(entry.value == want.names[i].first);
    CHECK(std::string(entry.name) == want.names[i].second);
    ++i;
  }
  for (const auto& [value, name] : want.names) {
    CAPTURE(name);
    CHECK(std::string(t.to_string(value)) == name);
    REQUIRE(t.find(name).has_value());
    CHECK(*t.find(name) == value);
    CHECK(t.parse(name, "field") == value);
    // Exact match only: no case folding, no surrounding space, no prefix.
    std::string upper = name;
    upper[0] = static_cast<char>(upper[0] - 'a' + 'A');
    CHECK_FALSE(t.find(upper).has_value());
    CHECK_FALSE(t.find(" " + name).has_value());
    CHECK_FALSE(t.find(name.substr(0, name.size() - 1)).has_value());
  }
  CHECK(t.names() == want.listed);
  // A value outside the enum (an integer cast to it) has no name.
  CHECK(std::string(t.to_string(static_cast<E>(99))) == "?");
  for (const std::string bad : {"", "bogus", "?"}) {
    CAPTURE(bad);
    CHECK_FALSE(t.find(bad).has_value());
    try {
      t.parse(bad, "--opt");
      FAIL("parse accepted '" << bad << "'");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kInvalidArgument);
      CHECK(e.path().empty());
      CHECK(e.reason() == "--opt: '" + bad + "' is not one of " + want.listed);
      CHECK(t.unknown(bad, "--opt") == e.reason());
    }
  }
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("every library options enum round-trips through its table") {
    using namespace dscache;
    check_table<Storage>(
        {kStorageNames, {{Storage::kNpy, "npy"}, {Storage::kHdf5, "hdf5"}}, "npy, hdf5"});
    check_table<Layout>(
        {kLayoutNames, {{Layout::kFixed, "fixed"}, {Layout::kRagged, "ragged"}}, "fixed, ragged"});
    check_table<ResizePolicy>({kResizePolicyNames,
                               {{ResizePolicy::kStretch, "stretch"},
                                {ResizePolicy::kCrop, "crop"},
                                {ResizePolicy::kPad, "pad"}},
                               "stretch, crop, pad"});
    check_table<Codec>({kCodecNames, {{Codec::kRaw, "raw"}, {Codec::kJpeg, "jpeg"}}, "raw, jpeg"});
    check_table<MemoryMode>({kMemoryModeNames,
                             {{MemoryMode::kAuto, "auto"},
                              {MemoryMode::kPageCache, "page-cache"},
                              {MemoryMode::kInProcess, "in-process"},
                              {MemoryMode::kPread, "pread"}},
                             "auto, page-cache, in-process, pread"});
    check_table<AccessHint>({kAccessHintNames,
                             {{AccessHint::kRandom, "random"},
                              {AccessHint::kSequential, "sequential"},
                              {AccessHint::kWillNeed, "willneed"}},
                             "random, sequential, willneed"});
    check_table<Shuffle>(
        {kShuffleNames,
         {{Shuffle::kNone, "none"}, {Shuffle::kGlobal, "global"}, {Shuffle::kWindowed, "windowed"}},
         "none, global, windowed"});
    check_table<RankTail>(
        {kRankTailNames, {{RankTail::kPad, "pad"}, {RankTail::kDrop, "drop"}}, "pad, drop"});
    check_table<CropMode>({kCropModeNames,
                           {{CropMode::kNone, "none"},
                            {CropMode::kCenter, "center"},
                            {CropMode::kRandomResized, "random_resized"}},
                           "none, center, random_resized"});
  }

  TEST_CASE("to_string overloads print the tables' names") {
    using namespace dscache;
    CHECK(std::string(to_string(Storage::kHdf5)) == "hdf5");
    CHECK(std::string(to_string(Layout::kRagged)) == "ragged");
    CHECK(std::string(to_string(ResizePolicy::kStretch)) == "stretch");
    CHECK(std::string(to_string(Codec::kJpeg)) == "jpeg");
    CHECK(std::string(to_string(MemoryMode::kInProcess)) == "in-process");
  }

  TEST_CASE("a table over a local array, as a caller defines one") {
    enum class Colour { kRed, kGreen };
    static constexpr dscache::EnumName<Colour> kColours[] = {{Colour::kRed, "red"},
                                                             {Colour::kGreen, "green"}};
    constexpr EnumTable<Colour> table(kColours);
    static_assert(sizeof(table) <= 2 * sizeof(void*), "a view, not a copy of the names");
    CHECK(table.parse("green", "colour") == Colour::kGreen);
    CHECK(table.unknown("blue", "colour") == "colour: 'blue' is not one of red, green");
  }
}
