// EnumTable: every options enum's names round-trip, and unknown names fail listing the names.
#include <doctest/doctest.h>

#include <string>

#include "dscache/cache.h"
#include "dscache/direct_read.h"
#include "dscache/enum_table.h"
#include "dscache/manifest.h"
#include "dscache/sampler.h"
#include "dscache/transform.h"
#include "enum_table_check.h"

namespace {

using dscache::EnumTable;
using dscache::test::check_table;

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
    check_table<DirectRead>(
        {kDirectReadNames,
         {{DirectRead::kOff, "off"}, {DirectRead::kOn, "on"}, {DirectRead::kAuto, "auto"}},
         "off, on, auto"});
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
