// AreaResizer: cv::resize(INTER_AREA)'s arithmetic, one source row at a time.
#include "area_stream.h"

#include <algorithm>
#include <cassert>
#include <cfloat>
#include <climits>
#include <cmath>

namespace dscache {
namespace {

// OpenCV's saturate_cast<uchar>(float): round half to even (cvRound), then clamp.
inline uint8_t to_u8(float v) {
  const long r = std::lrint(v);
  return static_cast<uint8_t>(std::clamp<long>(r, 0, 255));
}

// OpenCV's saturate_cast<int>(double): round half to even, clamped to int.
int round_to_int(double v) {
  return static_cast<int>(std::clamp<long long>(std::llrint(v), INT_MIN, INT_MAX));
}

// The scale OpenCV derives from the sizes (source pixels per output pixel), and whether it
// takes the integer block-average path: inverse of the inverse, as cv::resize computes it.
struct Scale {
  double x = 1, y = 1;
  int ix = 1, iy = 1;
  bool integer = false;
};

Scale scale_of(uint32_t src_w, uint32_t src_h, uint32_t dst_w, uint32_t dst_h) {
  Scale s;
  s.x = 1. / (double(dst_w) / double(src_w));
  s.y = 1. / (double(dst_h) / double(src_h));
  s.ix = round_to_int(s.x);
  s.iy = round_to_int(s.y);
  s.integer = std::abs(s.x - s.ix) < DBL_EPSILON && std::abs(s.y - s.iy) < DBL_EPSILON;
  return s;
}

}  // namespace

// One row's weighted sums per output pixel, for a channel count known to the compiler. Each
// output value is a chain of float additions that must run in table order (OpenCV's), so the
// chains of two neighbouring output pixels are run side by side: the same additions, in the
// same order per value, without waiting on one chain's latency.
template <int kCn>
void AreaResizer::accumulate(const std::vector<Weight>& xtab, const std::vector<size_t>& starts,
                             const uint8_t* row, float* buf) {
  const Weight* w = xtab.data();
  const size_t n_out = starts.size() - 1;
  auto run = [&](const Weight* p, const Weight* end, float* acc) {
    for (; p < end; ++p) {
      const uint8_t* s = row + p->si;
      for (int c = 0; c < kCn; ++c) acc[c] = acc[c] + s[c] * p->alpha;
    }
  };
  size_t dx = 0;
  for (; dx + 1 < n_out; dx += 2) {
    const Weight *a = w + starts[dx], *a_end = w + starts[dx + 1];
    const Weight *b = a_end, *b_end = w + starts[dx + 2];
    float sa[kCn] = {}, sb[kCn] = {};
    for (; a < a_end && b < b_end; ++a, ++b) {
      const uint8_t* s = row + a->si;
      const uint8_t* t = row + b->si;
      for (int c = 0; c < kCn; ++c) {
        sa[c] = sa[c] + s[c] * a->alpha;
        sb[c] = sb[c] + t[c] * b->alpha;
      }
    }
    run(a, a_end, sa);
    run(b, b_end, sb);
    for (int c = 0; c < kCn; ++c) {
      buf[dx * kCn + c] = sa[c];
      buf[(dx + 1) * kCn + c] = sb[c];
    }
  }
  for (; dx < n_out; ++dx) {
    float sa[kCn] = {};
    run(w + starts[dx], w + starts[dx + 1], sa);
    for (int c = 0; c < kCn; ++c) buf[dx * kCn + c] = sa[c];
  }
}

bool AreaResizer::applies(uint32_t src_w, uint32_t src_h, uint32_t dst_w, uint32_t dst_h) {
  if (src_w == 0 || src_h == 0 || dst_w == 0 || dst_h == 0) return false;
  if (src_w > INT_MAX / 4 || src_h > INT_MAX) return false;
  if (dst_w > src_w || dst_h > src_h || (dst_w == src_w && dst_h == src_h)) return false;
  const Scale s = scale_of(src_w, src_h, dst_w, dst_h);
  if (s.x < 1 || s.y < 1) return false;
  // The block path assumes whole blocks (true whenever OpenCV takes it for a shrink).
  return !s.integer || (uint64_t{dst_w} * s.ix == src_w && uint64_t{dst_h} * s.iy == src_h);
}

AreaResizer::AreaResizer(uint32_t src_w, uint32_t src_h, uint32_t dst_w, uint32_t dst_h, int cn,
                         uint8_t* dst)
    : src_w_(int(src_w)),
      src_h_(int(src_h)),
      dst_w_(int(dst_w)),
      dst_h_(int(dst_h)),
      cn_(cn),
      dst_(dst) {
  assert(applies(src_w, src_h, dst_w, dst_h) && cn >= 1 && cn <= 4);
  const Scale s = scale_of(src_w, src_h, dst_w, dst_h);
  const size_t row = size_t(dst_w_) * cn_;
  if (s.integer) {
    fast_ = true;
    kx_ = s.ix;
    ky_ = s.iy;
    block_.assign(row, 0);
    return;
  }
  // For each output position d, the source positions that overlap its cell [d*scale,
  // (d+1)*scale): a partial one on each side (skipped under 1e-3) and whole ones between, each
  // weighted by its overlap over the cell's width (the last cell is clipped to the source).
  auto table = [](int n_src, int n_dst, int stride, double scale) {
    std::vector<Weight> t;
    t.reserve(size_t(n_src) + n_dst * 2);
    for (int d = 0; d < n_dst; ++d) {
      const double lo = d * scale;
      const double hi = lo + scale;
      const double cell = std::min(scale, n_src - lo);
      int last = std::min(static_cast<int>(std::floor(hi)), n_src - 1);
      const int first = std::min(static_cast<int>(std::ceil(lo)), last);
      if (first - lo > 1e-3) {
        t.push_back({(first - 1) * stride, d * stride, float((first - lo) / cell)});
      }
      for (int s = first; s < last; ++s) t.push_back({s * stride, d * stride, float(1.0 / cell)});
      if (hi - last > 1e-3) {
        t.push_back(
            {last * stride, d * stride, float(std::min(std::min(hi - last, 1.), cell) / cell)});
      }
    }
    return t;
  };
  xtab_ = table(src_w_, dst_w_, cn_, s.x);
  xstart_.assign(size_t(dst_w_) + 1, xtab_.size());  // each output pixel's run in xtab_
  for (size_t k = xtab_.size(); k-- > 0;) xstart_[size_t(xtab_[k].di / cn_)] = k;
  for (size_t d = size_t(dst_w_); d-- > 0;) xstart_[d] = std::min(xstart_[d], xstart_[d + 1]);
  ytab_ = table(src_h_, dst_h_, 1, s.y);
  buf_.assign(row, 0.f);
  sum_.assign(row, 0.f);
  prev_dy_ = ytab_.empty() ? 0 : ytab_[0].di;
}

void AreaResizer::push_row(const uint8_t* row) {
  assert(next_row_ < src_h_);
  if (fast_) {
    push_fast(row);
  } else {
    push_weighted(row);
  }
  ++next_row_;
  if (!fast_ && done()) flush_weighted(prev_dy_);
}

void AreaResizer::push_fast(const uint8_t* row) {
  int* acc = block_.data();
  for (int dx = 0; dx < dst_w_; ++dx) {
    const uint8_t* s = row + size_t(dx) * kx_ * cn_;
    int* a = acc + dx * cn_;
    for (int j = 0; j < kx_; ++j, s += cn_) {
      for (int c = 0; c < cn_; ++c) a[c] += s[c];
    }
  }
  if ((next_row_ + 1) % ky_ != 0) return;
  uint8_t* d = dst_ + size_t(next_row_ / ky_) * dst_w_ * cn_;
  const size_t n = block_.size();
  if (kx_ == 2 && ky_ == 2 && cn_ != 2) {  // OpenCV's 2x2 kernel: integer rounding half up
    for (size_t i = 0; i < n; ++i) d[i] = static_cast<uint8_t>((acc[i] + 2) >> 2);
  } else {
    const float scale = 1.f / float(kx_ * ky_);
    for (size_t i = 0; i < n; ++i) d[i] = to_u8(static_cast<float>(acc[i]) * scale);
  }
  std::fill(block_.begin(), block_.end(), 0);
}

void AreaResizer::push_weighted(const uint8_t* row) {
  const int sy = next_row_;
  if (next_y_ >= ytab_.size() || ytab_[next_y_].si != sy) return;  // a sliver under 1e-3
  // The row's horizontal sums, added in table order (float addition is not associative).
  float* buf = buf_.data();
  switch (cn_) {
    case 1:
      accumulate<1>(xtab_, xstart_, row, buf);
      break;
    case 3:
      accumulate<3>(xtab_, xstart_, row, buf);
      break;
    case 4:
      accumulate<4>(xtab_, xstart_, row, buf);
      break;
    default:
      accumulate<2>(xtab_, xstart_, row, buf);
  }
  const size_t n = sum_.size();
  float* sum = sum_.data();
  for (; next_y_ < ytab_.size() && ytab_[next_y_].si == sy; ++next_y_) {
    const float beta = ytab_[next_y_].alpha;
    const int dy = ytab_[next_y_].di;
    if (dy != prev_dy_) {
      flush_weighted(prev_dy_);
      for (size_t i = 0; i < n; ++i) sum[i] = beta * buf[i];
      prev_dy_ = dy;
    } else {
      for (size_t i = 0; i < n; ++i) sum[i] += beta * buf[i];
    }
  }
}

void AreaResizer::flush_weighted(int dy) {
  uint8_t* d = dst_ + size_t(dy) * dst_w_ * cn_;
  for (size_t i = 0; i < sum_.size(); ++i) d[i] = to_u8(sum_[i]);
}

}  // namespace dscache
