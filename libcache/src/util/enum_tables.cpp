// The spellings of libcache's options enums: one table each, for every parser and printer.
//
// The manifest stores Storage, Layout, ResizePolicy, Codec and AlphaMode names, and users type all
// of them (`dscache build`, Python keywords): a name here is never changed or removed.
#include "dscache/cache.h"
#include "dscache/direct_read.h"
#include "dscache/enum_table.h"
#include "dscache/manifest.h"
#include "dscache/mix_order.h"
#include "dscache/sampler.h"
#include "dscache/transform.h"

namespace dscache {
namespace {

constexpr EnumName<Storage> kStorage[] = {
    {Storage::kNpy, "npy"},
    {Storage::kHdf5, "hdf5"},
};
constexpr EnumName<Layout> kLayout[] = {
    {Layout::kFixed, "fixed"},
    {Layout::kRagged, "ragged"},
};
constexpr EnumName<ResizePolicy> kResizePolicy[] = {
    {ResizePolicy::kStretch, "stretch"},
    {ResizePolicy::kCrop, "crop"},
    {ResizePolicy::kPad, "pad"},
};
constexpr EnumName<Codec> kCodec[] = {
    {Codec::kRaw, "raw"},
    {Codec::kJpeg, "jpeg"},
};
constexpr EnumName<AlphaMode> kAlphaMode[] = {
    {AlphaMode::kDrop, "drop"},
    {AlphaMode::kComposite, "composite"},
    {AlphaMode::kKeep, "keep"},
};
constexpr EnumName<MemoryMode> kMemoryMode[] = {
    {MemoryMode::kAuto, "auto"},  // the default first, as messages list them
    {MemoryMode::kPageCache, "page-cache"},
    {MemoryMode::kInProcess, "in-process"},
    {MemoryMode::kPread, "pread"},
};
constexpr EnumName<AccessHint> kAccessHint[] = {
    {AccessHint::kRandom, "random"},
    {AccessHint::kSequential, "sequential"},
    {AccessHint::kWillNeed, "willneed"},
};
constexpr EnumName<Shuffle> kShuffle[] = {
    {Shuffle::kNone, "none"},
    {Shuffle::kGlobal, "global"},
    {Shuffle::kWindowed, "windowed"},
};
constexpr EnumName<RankTail> kRankTail[] = {
    {RankTail::kPad, "pad"},
    {RankTail::kDrop, "drop"},
};
constexpr EnumName<DirectRead> kDirectRead[] = {
    {DirectRead::kOff, "off"},
    {DirectRead::kOn, "on"},
    {DirectRead::kAuto, "auto"},
};
constexpr EnumName<MixBatching> kMixBatching[] = {
    {MixBatching::kRandom, "random"},
    {MixBatching::kStratified, "stratified"},
};
constexpr EnumName<CropMode> kCropMode[] = {
    {CropMode::kNone, "none"},
    {CropMode::kCenter, "center"},
    {CropMode::kRandomResized, "random_resized"},
};

}  // namespace

// constexpr: constant-initialized, so usable from other translation units' static initializers.
constexpr EnumTable<Storage> kStorageNames(kStorage);
constexpr EnumTable<Layout> kLayoutNames(kLayout);
constexpr EnumTable<ResizePolicy> kResizePolicyNames(kResizePolicy);
constexpr EnumTable<Codec> kCodecNames(kCodec);
constexpr EnumTable<AlphaMode> kAlphaModeNames(kAlphaMode);
constexpr EnumTable<MemoryMode> kMemoryModeNames(kMemoryMode);
constexpr EnumTable<AccessHint> kAccessHintNames(kAccessHint);
constexpr EnumTable<Shuffle> kShuffleNames(kShuffle);
constexpr EnumTable<RankTail> kRankTailNames(kRankTail);
constexpr EnumTable<CropMode> kCropModeNames(kCropMode);
constexpr EnumTable<DirectRead> kDirectReadNames(kDirectRead);
constexpr EnumTable<MixBatching> kMixBatchingNames(kMixBatching);

const char* to_string(Storage s) { return kStorageNames.to_string(s); }
const char* to_string(Layout l) { return kLayoutNames.to_string(l); }
const char* to_string(ResizePolicy r) { return kResizePolicyNames.to_string(r); }
const char* to_string(Codec c) { return kCodecNames.to_string(c); }
const char* to_string(AlphaMode a) { return kAlphaModeNames.to_string(a); }
const char* to_string(MemoryMode mode) { return kMemoryModeNames.to_string(mode); }

}  // namespace dscache
