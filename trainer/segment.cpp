// --task segment: masks, the pixel loss and its window normaliser, IoU metrics.
#include "segment.h"

#include <stdexcept>
#include <string>

#include "dscache/error.h"
#include "dscache/fields.h"
#include "evaluate.h"

namespace dscache {
namespace train {

namespace {

torch::Tensor weight_tensor(const TargetSpec& spec, torch::Device device) {
  if (spec.class_weights.empty()) return {};
  return torch::tensor(spec.class_weights, torch::kDouble).to(torch::kFloat).to(device);
}

}  // namespace

torch::Tensor batch_masks(const TargetSpec& spec, const Batch& batch, torch::Device device) {
  const FieldBatch* fb = batch.field(spec.fields.at(0));
  if (!fb) throw std::logic_error("batch_masks: the Loader did not serve field " + spec.fields[0]);
  if (fb->offsets || fb->shape.size() != 3 || fb->shape[0] != batch.size ||
      fb->shape[1] != batch.height || fb->shape[2] != batch.width) {
    throw std::logic_error("batch_masks: mask '" + spec.fields[0] +
                           "' is not stacked at the images' size");
  }
  const std::vector<int64_t> shape = {batch.size, batch.height, batch.width};
  auto* data = const_cast<uint8_t*>(fb->data);  // from_blob wants non-const; only read
  torch::Tensor m;
  if (fb->spec->dtype == FieldType::kUint16) {  // torch has no uint16: int16 bits, widened
    m = torch::from_blob(data, shape, torch::kShort).to(torch::kLong).bitwise_and(0xFFFF);
  } else {
    m = torch::from_blob(data, shape, torch::kByte).to(torch::kLong);
  }
  const torch::Tensor bad = (m >= spec.outputs()) & (m != spec.ignore_index);
  if (bad.any().item<bool>()) {
    const int64_t s = bad.flatten(1).any(1).nonzero()[0][0].item<int64_t>();
    const int64_t v = m[s].masked_select(bad[s])[0].item<int64_t>();
    throw Error(ErrorKind::kInvalidArgument, "",
                "mask '" + spec.fields[0] + "': sample " + std::to_string(batch.indices[s]) +
                    " has class " + std::to_string(v) + "; the run has " +
                    std::to_string(spec.outputs()) + " classes (0.." +
                    std::to_string(spec.outputs() - 1) + ") and --ignore-index " +
                    std::to_string(spec.ignore_index));
  }
  return device.is_cpu() ? m : m.to(device);
}

PixelLoss pixel_loss(const TargetSpec& spec, const torch::Tensor& logits,
                     const torch::Tensor& masks) {
  namespace F = torch::nn::functional;
  const torch::Tensor w = weight_tensor(spec, logits.device());
  auto opt = F::CrossEntropyFuncOptions().reduction(torch::kSum).ignore_index(spec.ignore_index);
  if (w.defined()) opt.weight(w);
  PixelLoss r;
  r.loss_sum = F::cross_entropy(logits, masks, opt);
  const torch::Tensor labelled = masks != spec.ignore_index;
  if (w.defined()) {
    r.weight = (w.to(torch::kDouble).index({masks.masked_fill(~labelled, 0)}) * labelled).sum();
  } else {
    r.weight = labelled.sum().to(torch::kDouble);
  }
  return r;
}

MicroResult forward_backward_segment(Classifier& model, const torch::Tensor& x,
                                     const torch::Tensor& masks, const TargetSpec& spec,
                                     int64_t window_pixels, const AmpConfig& amp,
                                     const GradScaler* scaler) {
  torch::Tensor logits, weight;
  const torch::Tensor loss_sum = backward_window_share(
      model, x, window_pixels, amp, scaler,
      [&](const torch::Tensor& out) {
        PixelLoss p = pixel_loss(spec, out, masks);
        weight = p.weight;
        return p.loss_sum;
      },
      &logits);
  MicroResult r;
  r.loss_sum = loss_sum.detach().to(torch::kDouble);
  const torch::Tensor labelled = masks != spec.ignore_index;
  r.correct = ((logits.detach().argmax(1) == masks) & labelled).sum();
  r.count = labelled.sum();
  r.weight = weight;
  return r;
}

void rescale_window_grads(const std::vector<torch::Tensor>& params, double window_pixels,
                          double window_weight) {
  if (!(window_weight > 0)) return;
  const double f = window_pixels / window_weight;
  torch::NoGradGuard no_grad;
  for (const torch::Tensor& p : params) {
    if (p.grad().defined()) p.mutable_grad().mul_(f);
  }
}

SegmentMetrics::SegmentMetrics(const TargetSpec& spec)
    : spec_(spec), confusion_(torch::zeros({spec.outputs(), spec.outputs()}, torch::kLong)) {}

void SegmentMetrics::add(const torch::Tensor& logits, const torch::Tensor& masks) {
  const int64_t c = spec_.outputs();
  const torch::Tensor labelled = masks != spec_.ignore_index;
  const torch::Tensor truth = masks.masked_select(labelled);
  const torch::Tensor pred = logits.argmax(1).masked_select(labelled);
  confusion_ += torch::bincount(truth * c + pred, {}, c * c).cpu().view({c, c});
}

nlohmann::json SegmentMetrics::finish() const {
  const int64_t c = spec_.outputs();
  const torch::Tensor cm = confusion_.contiguous();
  const int64_t* m = cm.data_ptr<int64_t>();
  int64_t right = 0, total = 0;
  double iou_sum = 0;
  int64_t present = 0;
  nlohmann::json iou = nlohmann::json::array();
  for (int64_t k = 0; k < c; ++k) {
    int64_t row = 0, col = 0;
    for (int64_t j = 0; j < c; ++j) {
      row += m[k * c + j];
      col += m[j * c + k];
    }
    right += m[k * c + k];
    total += row;
    const int64_t uni = row + col - m[k * c + k];
    if (uni == 0) {
      iou.push_back(nullptr);
      continue;
    }
    const double v = static_cast<double>(m[k * c + k]) / static_cast<double>(uni);
    iou.push_back(v);
    iou_sum += v;
    ++present;
  }
  nlohmann::json j;
  j["val_pixel_acc"] = total ? static_cast<double>(right) / static_cast<double>(total) : 0.0;
  j["val_miou"] = present ? nlohmann::json(iou_sum / static_cast<double>(present)) : nullptr;
  j["val_iou"] = iou;
  return j;
}

TargetEval evaluate_segment(Classifier& model, Loader& loader, const BatchConverter& conv,
                            const AmpConfig& amp, const TargetSpec& spec) {
  SegmentMetrics metrics(spec);
  double loss = 0, weight = 0;
  for_each_eval_batch(model, loader, conv, amp,
                      [&](const Batch& b, const torch::Tensor& x, const torch::Tensor& logits) {
                        const torch::Tensor masks = batch_masks(spec, b, x.device());
                        const PixelLoss p = pixel_loss(spec, logits, masks);
                        loss += p.loss_sum.item<double>();
                        weight += p.weight.item<double>();
                        metrics.add(logits, masks);
                      });
  TargetEval r;
  r.loss = weight > 0 ? loss / weight : 0;
  r.metrics = metrics.finish();
  return r;
}

}  // namespace train
}  // namespace dscache
