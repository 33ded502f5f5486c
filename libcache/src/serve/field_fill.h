// Private: the Loader's fields — which of the source's fields a batch carries, and how one
// sample's values are copied into a ring slot's field buffers with the sample's SpatialTransform
// (masks resampled, boxes mapped/clipped/dropped with their rows_of rows, the rest copied).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dscache/fields.h"
#include "dscache/loader.h"
#include "dscache/sample_source.h"
#include "dscache/transform.h"

namespace dscache {
namespace detail {

// Growable 64-byte-aligned bytes (the Loader's image and field buffers): grows (keeping what it
// holds) only when asked for more. From `allocator` when it has one (memory given back with its
// release; `name`, the option, names it in errors), else aligned host memory.
class AlignedBuffer {
 public:
  explicit AlignedBuffer(const BufferAllocator* allocator = nullptr, const char* name = "")
      : p_(nullptr, Free{allocator, name}) {}
  uint8_t* data() const { return p_.get(); }
  size_t capacity() const { return capacity_; }
  // Room for `bytes`, keeping the first `keep` (<= capacity) bytes when it moves.
  void reserve(size_t bytes, size_t keep);
  // Hands the memory over (released to the allocator, which keeps it while a holder of the
  // batch does) and takes new memory of the same capacity; what it held is not copied.
  void renew();

 private:
  struct Free {
    const BufferAllocator* allocator;
    const char* name;
    void operator()(uint8_t* p) const;
  };
  uint8_t* allocate(size_t bytes) const;
  std::unique_ptr<uint8_t, Free> p_;
  size_t capacity_ = 0;
};

// One ring slot's field memory: allocated when the slot is made, reused by every batch, grown
// only when a batch needs more than any before it. Filled by one worker at a time.
struct FieldBuffers {
  struct Field {
    AlignedBuffer data;            // the batch's values (fixed: size x value; variable: rows)
    std::vector<int64_t> offsets;  // variable kinds: batch_size + 1 row offsets
    uint64_t rows = 0;             // variable kinds: rows so far in this batch
  };
  std::vector<Field> fields;  // one per selected field, in selection order
  // Scratch of add(): a mask's crop window, one sample's values, boxes not served.
  std::vector<uint8_t> window, value;
  std::vector<float> boxes_in, boxes_out;
  std::vector<std::vector<uint32_t>> kept;  // per boxes group: input rows of the boxes kept
  std::vector<uint64_t> kept_count, group_rows;
};

// Immutable after construction; add() may run on several slots' buffers at once.
class FieldFill {
 public:
  // Checks the selection (`names`: unset = all of source.fields(), empty = none; an unknown or
  // repeated name is Error(kInvalidArgument) listing the source's fields) and
  // min_box_visibility (in [0, 1]). Batches hold out_h x out_w images.
  FieldFill(const SampleSource& source, const std::optional<std::vector<std::string>>& names,
            double min_box_visibility, uint32_t out_h, uint32_t out_w);

  bool empty() const { return selected_.empty(); }
  // Bytes one sample adds to a batch's fixed-size fields (masks, scalars, arrays); false when
  // it does not fit in 64 bits.
  bool fixed_bytes_per_sample(uint64_t* out) const;

  // A slot's buffers for batches of up to batch_size samples (fixed kinds allocated now), from
  // `allocator` (null or empty: aligned host memory), and the Batch::fields entries that
  // finish() keeps up to date.
  FieldBuffers make_buffers(uint32_t batch_size, const BufferAllocator* allocator) const;
  std::vector<FieldBatch> make_batch_fields() const;
  // Every field's values handed over (AlignedBuffer::renew): the batch keeps the memory it
  // points at, the slot fills new memory.
  static void hand_off(FieldBuffers* b);

  // Starts a batch in `b`.
  void begin(FieldBuffers* b) const;
  // Adds sample `sample` of `source` (src_h x src_w as stored) as the batch's k-th: `t` is the
  // transform its image gets. `source` is the one given at construction, or a mixture's member
  // source (its fields the same, in the same order: Mixture::make checks). Errors name the
  // field and the sample.
  void add(FieldBuffers* b, uint32_t k, const SampleSource& source, uint64_t sample, uint32_t src_h,
           uint32_t src_w, const SpatialTransform& t) const;
  // Points `out` (from make_batch_fields) at b's buffers for a batch of `count` samples.
  void finish(FieldBuffers* b, uint32_t count, std::vector<FieldBatch>* out) const;

 private:
  struct Selected {
    const FieldSpec* spec = nullptr;
    size_t source_index = 0;
    int group = -1;            // boxes: its group; rows with rows_of: the group it follows
    uint64_t value_bytes = 0;  // fixed kinds: bytes of one sample's value in the batch
  };
  // A boxes field whose kept rows some selected field needs (itself or a rows_of follower).
  struct Group {
    size_t source_index = 0;
    int selected = -1;  // its index in selected_, or -1 when only its followers are served
  };

  const SampleSource& source_;
  double min_box_visibility_;
  uint32_t out_h_, out_w_;
  std::vector<Selected> selected_;
  std::vector<Group> groups_;
};

}  // namespace detail
}  // namespace dscache
