// Decoding (OpenCV imdecode on in-memory bytes), JPEG reduced-scale decoding and the three
// resize policies. No global state is read or written here besides what OpenCV itself keeps
// (and its thread count, in set_decode_threads).
#include "dscache/ingest/image_decode.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "alpha.h"
#include "area_stream.h"
#include "dscache/error.h"
#include "jpeg_direct.h"
#include "png_stream.h"
#include "source_bytes.h"

namespace dscache {
namespace {

void validate(const DecodeOptions& opt, const void* out) {
  auto bad = [](const std::string& why) { throw Error(ErrorKind::kInvalidArgument, "", why); };
  if (opt.height == 0 || opt.height > INT_MAX) {
    bad("DecodeOptions.height must be in [1, " + std::to_string(INT_MAX) + "], got " +
        std::to_string(opt.height));
  }
  if (opt.width == 0 || opt.width > INT_MAX) {
    bad("DecodeOptions.width must be in [1, " + std::to_string(INT_MAX) + "], got " +
        std::to_string(opt.width));
  }
  if (opt.channels != 1 && opt.channels != 3 && opt.channels != 4) {
    bad("DecodeOptions.channels must be 1, 3 or 4, got " + std::to_string(opt.channels));
  }
  if ((opt.channels == 4) != (opt.alpha == AlphaMode::kKeep)) {
    bad("DecodeOptions.channels is " + std::to_string(opt.channels) +
        ": 4 channels (RGBA) go with alpha kKeep, and only they");
  }
  if (opt.resize != ResizePolicy::kStretch && opt.resize != ResizePolicy::kCrop &&
      opt.resize != ResizePolicy::kPad) {
    bad("DecodeOptions.resize is not a known policy");
  }
  if (out == nullptr) bad("output buffer is null");
}

// How an image of w x h becomes the target: resize to new_w x new_h, then copy src_roi of the
// resized image to dst_roi of the output (which is zero elsewhere for pad).
struct Plan {
  int new_w = 0;
  int new_h = 0;
  cv::Rect src_roi;
  cv::Rect dst_roi;
};

Plan plan_resize(uint64_t w, uint64_t h, const DecodeOptions& opt) {
  const int tw = static_cast<int>(opt.width);
  const int th = static_cast<int>(opt.height);
  Plan p;
  switch (opt.resize) {
    case ResizePolicy::kStretch:
      p.new_w = tw;
      p.new_h = th;
      p.src_roi = p.dst_roi = cv::Rect(0, 0, tw, th);
      break;
    case ResizePolicy::kCrop: {  // cover the target, then cut the middle out
      double s = std::max(double(th) / double(h), double(tw) / double(w));
      p.new_w =
          static_cast<int>(std::max<double>(tw, std::min<double>(INT_MAX, std::round(w * s))));
      p.new_h =
          static_cast<int>(std::max<double>(th, std::min<double>(INT_MAX, std::round(h * s))));
      p.src_roi = cv::Rect((p.new_w - tw) / 2, (p.new_h - th) / 2, tw, th);
      p.dst_roi = cv::Rect(0, 0, tw, th);
      break;
    }
    case ResizePolicy::kPad: {  // fit inside the target, then center on black
      double s = std::min(double(th) / double(h), double(tw) / double(w));
      p.new_w = static_cast<int>(std::clamp<double>(std::round(w * s), 1, tw));
      p.new_h = static_cast<int>(std::clamp<double>(std::round(h * s), 1, th));
      p.src_roi = cv::Rect(0, 0, p.new_w, p.new_h);
      p.dst_roi = cv::Rect((tw - p.new_w) / 2, (th - p.new_h) / 2, p.new_w, p.new_h);
      break;
    }
  }
  return p;
}

// True when a w x h source (upright) decoded at 1/f scale (libjpeg rounds up) is still at least
// the pre-crop/pre-pad size the policy resizes to, in both axes: the final resize only shrinks.
bool reduction_fits(uint64_t w, uint64_t h, int f, const DecodeOptions& opt) {
  uint64_t rw = (w + f - 1) / f;
  uint64_t rh = (h + f - 1) / f;
  Plan p = plan_resize(w, h, opt);
  return rw >= uint64_t(p.new_w) && rh >= uint64_t(p.new_h);
}

// The largest DCT scaling factor that keeps enough pixels whichever way EXIF orientation turns
// the image (the header gives stored dimensions; orientation may swap them).
int choose_reduction(uint32_t w, uint32_t h, const DecodeOptions& opt) {
  for (int f : {8, 4, 2}) {
    if (reduction_fits(w, h, f, opt) && reduction_fits(h, w, f, opt)) return f;
  }
  return 1;
}

int imread_flags(uint32_t channels, int reduction) {
  const bool color = channels != 1;
  switch (reduction) {
    case 2:
      return color ? cv::IMREAD_REDUCED_COLOR_2 : cv::IMREAD_REDUCED_GRAYSCALE_2;
    case 4:
      return color ? cv::IMREAD_REDUCED_COLOR_4 : cv::IMREAD_REDUCED_GRAYSCALE_4;
    case 8:
      return color ? cv::IMREAD_REDUCED_COLOR_8 : cv::IMREAD_REDUCED_GRAYSCALE_8;
    default:
      return color ? cv::IMREAD_COLOR : cv::IMREAD_GRAYSCALE;
  }
}

// Writes `resized` (the image at p.new_w x p.new_h) to `out` as the plan says: its src_roi to
// out's dst_roi (the rest black for pad), converting with `cvt_code` (a cv::COLOR_* code) on
// the way, or copying when it is negative.
void place(const cv::Mat& resized, const Plan& p, const DecodeOptions& opt, int cvt_code,
           uint8_t* out) {
  cv::Mat dst(static_cast<int>(opt.height), static_cast<int>(opt.width),
              CV_8UC(static_cast<int>(opt.channels)), out);
  if (opt.resize == ResizePolicy::kPad && !(p.dst_roi == cv::Rect(0, 0, dst.cols, dst.rows))) {
    dst.setTo(cv::Scalar::all(0));
  }
  cv::Mat from = resized(p.src_roi);
  cv::Mat to = dst(p.dst_roi);
  const uint8_t* to_data = to.data;
  if (cvt_code >= 0) {
    cv::cvtColor(from, to, cvt_code);
  } else {
    from.copyTo(to);
  }
  CV_Assert(to.data == to_data);  // written in place, not into a new allocation
}

// Resizes `img` per opt and writes it to `out`, converting with `cvt_code` (a cv::COLOR_* code)
// on the way, or copying when it is negative. `img` has the output's channel count unless the
// conversion changes it.
void fit_into(const cv::Mat& img, const DecodeOptions& opt, int cvt_code, uint8_t* out) {
  const Plan p = plan_resize(uint64_t(img.cols), uint64_t(img.rows), opt);
  cv::Mat dst(static_cast<int>(opt.height), static_cast<int>(opt.width),
              CV_8UC(static_cast<int>(opt.channels)), out);
  const bool whole = p.src_roi == cv::Rect(0, 0, p.new_w, p.new_h) &&
                     p.dst_roi == cv::Rect(0, 0, dst.cols, dst.rows);
  const bool same_size = img.cols == p.new_w && img.rows == p.new_h;
  // INTER_AREA averages every source pixel when shrinking; it is not meant for enlarging.
  const int interp =
      (p.new_w <= img.cols && p.new_h <= img.rows) ? cv::INTER_AREA : cv::INTER_LINEAR;

  if (whole && cvt_code < 0) {  // straight into the caller's buffer
    if (same_size) {
      img.copyTo(dst);
    } else {
      cv::resize(img, dst, dst.size(), 0, 0, interp);
    }
    CV_Assert(dst.data == out);
    return;
  }
  cv::Mat resized = img;
  if (!same_size) cv::resize(img, resized, cv::Size(p.new_w, p.new_h), 0, 0, interp);
  place(resized, p, opt, cvt_code, out);
}

// Everything up to a decoded cv::Mat in the output's channel order (BGR or grey; BGRA for an
// alpha kKeep of a transparent source): format sniffing, pixel limit, truncation check,
// reduced-scale choice via `choose`, the alpha look (may_have_alpha: an IMREAD_UNCHANGED decode
// sets r.transparent and stands in for the plain decode where it gives the same pixels),
// imdecode -- or, for a JPEG, libcache's decoder (jpeg_direct.h), which gives RGB: *rgb says
// so. On failure returns a result with ok=false and a reason; never throws for bad data.
template <typename ChooseReduction>
DecodeResult decode_to_mat(const uint8_t* data, size_t size, const DecodeOptions& opt,
                           ChooseReduction choose, cv::Mat* img, bool* rgb) {
  DecodeResult r;
  *rgb = false;
  if (data == nullptr || size == 0) {
    r.reason = "zero-byte file";
    return r;
  }
  const ImageHeaderInfo hdr = read_image_header(data, size);
  r.format = hdr.format;
  const std::string fmt = to_string(hdr.format);
  if (hdr.format == ImageFormat::kUnknown) {
    r.reason =
        "unrecognized image format (the file holds " + detail::content_kind(data, size) + ")";
    return r;
  }
  if (hdr.dims_known) {
    r.source_width = hdr.width;
    r.source_height = hdr.height;
    r.reason = detail::pixel_limit_reason(hdr.width, hdr.height, opt.max_pixels);
    if (!r.reason.empty()) return r;
  }
  if (hdr.format == ImageFormat::kJpeg && !detail::jpeg_has_eoi(data, size)) {
    r.reason = "truncated jpeg: no end-of-image marker after the scan data";
    return r;
  }
#if CV_VERSION_MAJOR < 4 || (CV_VERSION_MAJOR == 4 && CV_VERSION_MINOR < 11)
  if (hdr.format == ImageFormat::kGif) {  // OpenCV gained a GIF decoder in 4.11
    r.reason = "gif is not supported by OpenCV " CV_VERSION " (convert it to png)";
    return r;
  }
#endif
  if (size > size_t{INT_MAX}) {
    r.reason = "file is " + std::to_string(size) + " bytes, over the " + std::to_string(INT_MAX) +
               " OpenCV can decode from memory";
    return r;
  }
  if (hdr.format == ImageFormat::kJpeg && opt.reduced_decode && hdr.dims_known) {
    r.reduction = choose(hdr.width, hdr.height);
  }
  try {
    // A header over the caller's bytes: imdecode only reads them.
    const cv::Mat buf(1, static_cast<int>(size), CV_8U, const_cast<uint8_t*>(data));
    img->release();
    if (detail::may_have_alpha(hdr.format, data, size)) {
      const cv::Mat u = cv::imdecode(buf, cv::IMREAD_UNCHANGED);
      if (u.channels() == 4 && (u.depth() == CV_8U || u.depth() == CV_16U)) {
        const cv::Mat bgra = detail::bgra8(u, &r.transparent);
        if (r.transparent && opt.alpha == AlphaMode::kComposite) {
          *img = detail::composite(bgra, opt.background);
          if (opt.channels == 1) cv::cvtColor(*img, *img, cv::COLOR_BGR2GRAY);
        } else if (r.transparent && opt.alpha == AlphaMode::kKeep) {
          *img = bgra;
        } else if (opt.channels != 1 && u.depth() == CV_8U) {
          // What IMREAD_COLOR gives (libpng strips the alpha), without decoding twice.
          cv::cvtColor(bgra, *img, cv::COLOR_BGRA2BGR);
        }
      }
    }
    if (img->empty() && hdr.format == ImageFormat::kJpeg && hdr.dims_known && !opt.opencv_jpeg &&
        detail::decode_jpeg_rgb(data, size, hdr.width, hdr.height, r.reduction, opt.channels,
                                opt.ignore_orientation, img)) {
      *rgb = r.libjpeg_direct = true;
    }
    if (img->empty()) {
      int flags = imread_flags(opt.channels, r.reduction);
      if (opt.ignore_orientation) flags |= cv::IMREAD_IGNORE_ORIENTATION;
      *img = cv::imdecode(buf, flags);
    }
  } catch (const cv::Exception& e) {
    r.reason = "corrupt or unsupported " + fmt + ": OpenCV error: " + e.err;
    return r;
  } catch (const std::bad_alloc&) {
    r.reason = "out of memory decoding " + fmt + " of " + std::to_string(r.source_width) + "x" +
               std::to_string(r.source_height) + " pixels";
    return r;
  }
  if (img->empty()) {
    r.reason = "corrupt or truncated " + fmt + ": OpenCV could not decode it";
    return r;
  }
  if (!hdr.dims_known) {
    r.source_width = static_cast<uint32_t>(img->cols);
    r.source_height = static_cast<uint32_t>(img->rows);
    r.reason = detail::pixel_limit_reason(r.source_width, r.source_height, opt.max_pixels);
    if (!r.reason.empty()) return r;
  }
  r.decoded_width = static_cast<uint32_t>(img->cols);
  r.decoded_height = static_cast<uint32_t>(img->rows);
  const int want = img->channels() == 4 && opt.alpha == AlphaMode::kKeep ? 4
                   : opt.channels == 1                                   ? 1
                                                                         : 3;
  if (img->type() != CV_8UC(want)) {
    r.reason =
        "OpenCV decoded " + fmt + " to an unexpected pixel type " + cv::typeToString(img->type());
    return r;
  }
  r.ok = true;
  return r;
}

// The conversion of decode_to_mat's image to the output's channels: BGR(A) to RGB(A), or none
// (grey, or an image already in RGB order).
int to_output(const cv::Mat& img, const DecodeOptions& opt, bool rgb = false) {
  if (opt.channels == 4) return img.channels() == 4 ? cv::COLOR_BGRA2RGBA : cv::COLOR_BGR2RGBA;
  return opt.channels == 3 && !rgb ? cv::COLOR_BGR2RGB : -1;
}

}  // namespace

namespace {

// A PNG shrunk while it is decoded (png_stream.h), when that gives the pixels decode_to_mat +
// fit_into would: a non-interlaced PNG whose policy's resize is an INTER_AREA shrink. Memory
// stays O(width), so opt.max_pixels (there for the whole-image decode) is not applied. False:
// not done (not applicable, or libpng failed; the whole-image path then decides and words it).
bool decode_png_streamed(const uint8_t* data, size_t size, const DecodeOptions& opt, uint8_t* out,
                         DecodeResult* r) {
  if (data == nullptr || size < 33) return false;
  const ImageHeaderInfo hdr = read_image_header(data, size);
  if (hdr.format != ImageFormat::kPng || !hdr.dims_known) return false;
  const Plan p = plan_resize(hdr.width, hdr.height, opt);
  if (!AreaResizer::applies(hdr.width, hdr.height, uint32_t(p.new_w), uint32_t(p.new_h))) {
    return false;
  }
  PngStreamRequest req;
  req.dst_w = uint32_t(p.new_w);
  req.dst_h = uint32_t(p.new_h);
  req.channels = int(opt.channels);
  req.has_alpha = detail::may_have_alpha(ImageFormat::kPng, data, size);
  req.alpha = opt.alpha;
  std::memcpy(req.background, opt.background, 3);
  try {
    cv::Mat resized(p.new_h, p.new_w, CV_8UC(static_cast<int>(opt.channels)));
    bool transparent = false;
    std::string error;
    if (stream_png(data, size, req, resized.data, &transparent, &error) != PngStreamStatus::kDone) {
      return false;
    }
    place(resized, p, opt, to_output(resized, opt), out);
    r->transparent = transparent;
  } catch (const cv::Exception&) {
    return false;
  } catch (const std::bad_alloc&) {
    return false;
  }
  r->ok = true;
  r->format = ImageFormat::kPng;
  r->source_width = r->decoded_width = hdr.width;
  r->source_height = r->decoded_height = hdr.height;
  return true;
}

}  // namespace

DecodeResult decode_image(const uint8_t* data, size_t size, const DecodeOptions& opt,
                          uint8_t* out) {
  validate(opt, out);
  DecodeResult streamed;
  if (decode_png_streamed(data, size, opt, out, &streamed)) return streamed;
  cv::Mat img;
  bool rgb = false;
  DecodeResult r = decode_to_mat(
      data, size, opt, [&](uint32_t w, uint32_t h) { return choose_reduction(w, h, opt); }, &img,
      &rgb);
  if (!r.ok) return r;
  try {
    fit_into(img, opt, to_output(img, opt, rgb), out);
  } catch (const cv::Exception& e) {
    r.ok = false;
    r.reason = std::string("resize failed: OpenCV error: ") + e.err;
  }
  return r;
}

SampleGeometry fixed_geometry(uint32_t decoded_w, uint32_t decoded_h, int reduction,
                              const DecodeOptions& opt) {
  // fit_into's plan on the decoded image: resize to new_w x new_h, then cut src_roi (crop) or
  // place at dst_roi (pad).
  const Plan p = plan_resize(decoded_w, decoded_h, opt);
  SampleGeometry g;
  g.width = opt.width;
  g.height = opt.height;
  g.scale_x = double(p.new_w) / (double(decoded_w) * reduction);
  g.scale_y = double(p.new_h) / (double(decoded_h) * reduction);
  g.offset_x = double(p.dst_roi.x) - double(p.src_roi.x);
  g.offset_y = double(p.dst_roi.y) - double(p.src_roi.y);
  g.extent_x = double(decoded_w) * reduction;
  g.extent_y = double(decoded_h) * reduction;
  g.source_width = decoded_w;  // the caller sets the source's own size where DCT rounded it
  g.source_height = decoded_h;
  return g;
}

namespace {

// Shrinks (never enlarges) `img` so its shorter side is at most max_side, into `out`.
// `out_channels`: the output's (img's unless the conversion changes it).
void fit_ragged(const cv::Mat& img, uint32_t max_side, int cvt_code, uint32_t out_channels,
                std::vector<uint8_t>* out, uint32_t* out_h, uint32_t* out_w) {
  ragged_size(static_cast<uint32_t>(img.rows), static_cast<uint32_t>(img.cols), max_side, out_h,
              out_w);
  out->resize(size_t{*out_h} * *out_w * out_channels);
  cv::Mat dst(static_cast<int>(*out_h), static_cast<int>(*out_w),
              CV_8UC(static_cast<int>(out_channels)), out->data());
  if (dst.rows == img.rows && dst.cols == img.cols) {
    if (cvt_code >= 0) {
      cv::cvtColor(img, dst, cvt_code);
    } else {
      img.copyTo(dst);
    }
  } else if (cvt_code >= 0) {
    cv::Mat resized;
    cv::resize(img, resized, dst.size(), 0, 0, cv::INTER_AREA);
    cv::cvtColor(resized, dst, cvt_code);
  } else {
    cv::resize(img, dst, dst.size(), 0, 0, cv::INTER_AREA);
  }
  CV_Assert(dst.data == out->data());
}

}  // namespace

DecodeResult decode_image_ragged(const uint8_t* data, size_t size, const DecodeOptions& opt,
                                 uint32_t max_side, std::vector<uint8_t>* out, uint32_t* out_h,
                                 uint32_t* out_w) {
  if (max_side == 0) throw Error(ErrorKind::kInvalidArgument, "", "max_side must be positive");
  DecodeOptions checked = opt;  // validate() checks all but the size, which ragged ignores
  checked.height = checked.width = 1;
  validate(checked, out);
  cv::Mat img;
  bool rgb = false;
  // The shorter side does not change under EXIF rotation, so the factor is safe either way.
  DecodeResult r = decode_to_mat(
      data, size, opt,
      [&](uint32_t w, uint32_t h) {
        const uint64_t shorter = std::min(w, h);
        for (int f : {8, 4, 2}) {
          if ((shorter + f - 1) / f >= max_side) return f;
        }
        return 1;
      },
      &img, &rgb);
  if (!r.ok) return r;
  try {
    fit_ragged(img, max_side, to_output(img, opt, rgb), opt.channels, out, out_h, out_w);
  } catch (const cv::Exception& e) {
    r.ok = false;
    r.reason = std::string("resize failed: OpenCV error: ") + e.err;
  }
  return r;
}

void resize_pixels_ragged(const uint8_t* src, uint32_t src_h, uint32_t src_w, uint32_t channels,
                          uint32_t out_channels, uint32_t max_side, std::vector<uint8_t>* out,
                          uint32_t* out_h, uint32_t* out_w) {
  const cv::Mat img(static_cast<int>(src_h), static_cast<int>(src_w),
                    CV_8UC(static_cast<int>(channels)), const_cast<uint8_t*>(src));
  int code = -1;
  if (channels == 1 && out_channels == 3) code = cv::COLOR_GRAY2RGB;
  if (channels == 1 && out_channels == 4) code = cv::COLOR_GRAY2RGBA;
  if (channels == 3 && out_channels == 1) code = cv::COLOR_RGB2GRAY;
  if (channels == 3 && out_channels == 4) code = cv::COLOR_RGB2RGBA;
  if (code >= 0) {
    // Convert first (the channel count of `out` follows the converted image).
    cv::Mat conv;
    cv::cvtColor(img, conv, code);
    fit_ragged(conv, max_side, -1, out_channels, out, out_h, out_w);
  } else {
    fit_ragged(img, max_side, -1, out_channels, out, out_h, out_w);
  }
}

void resize_pixels(const uint8_t* src, uint32_t src_h, uint32_t src_w, uint32_t channels,
                   const DecodeOptions& opt, uint8_t* out) {
  validate(opt, out);
  auto bad = [](const std::string& why) { throw Error(ErrorKind::kInvalidArgument, "", why); };
  if (channels != 1 && channels != 3) {
    bad("source channels must be 1 or 3, got " + std::to_string(channels));
  }
  if (src_h == 0 || src_w == 0 || src_h > INT_MAX || src_w > INT_MAX) {
    bad("source shape " + std::to_string(src_h) + "x" + std::to_string(src_w) + " is invalid");
  }
  if (src == nullptr) bad("source buffer is null");
  try {
    const cv::Mat img(static_cast<int>(src_h), static_cast<int>(src_w),
                      CV_8UC(static_cast<int>(channels)), const_cast<uint8_t*>(src));
    if (channels == 3 && opt.channels == 1) {
      cv::Mat grey;
      cv::cvtColor(img, grey, cv::COLOR_RGB2GRAY);
      fit_into(grey, opt, -1, out);
    } else if (channels == 1 && opt.channels == 3) {
      fit_into(img, opt, cv::COLOR_GRAY2RGB, out);  // resize one plane, then replicate
    } else if (opt.channels == 4) {
      fit_into(img, opt, channels == 1 ? cv::COLOR_GRAY2RGBA : cv::COLOR_RGB2RGBA, out);
    } else {
      fit_into(img, opt, -1, out);
    }
  } catch (const cv::Exception& e) {
    throw Error(ErrorKind::kInvalidArgument, "", "resize failed: OpenCV error: " + e.err);
  }
}

void set_decode_threads(int threads) { cv::setNumThreads(threads < 0 ? -1 : threads); }

}  // namespace dscache
