// Validation: loss and accuracy over a Loader's epoch.
#include "evaluate.h"

#include <optional>

namespace dscache {
namespace train {

EvalResult evaluate(Classifier& model, Loader& loader, const BatchConverter& conv,
                    const AmpConfig& amp) {
  model.eval();
  torch::NoGradGuard no_grad;
  conv.wait_copied();
  loader.start_epoch(0, 0);
  double loss = 0;
  int64_t correct = 0, n = 0;
  while (true) {
    conv.wait_copied();
    const Batch* b = loader.next();
    if (!b) break;
    torch::Tensor x = conv.images(*b), y = conv.labels(*b);
    torch::Tensor logits;
    {
      std::optional<AutocastGuard> guard;
      if (amp.autocast) guard.emplace(amp.device, amp.dtype);
      logits = model.forward(x);
    }
    logits = logits.to(torch::kFloat);
    loss += torch::nn::functional::cross_entropy(
                logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                .item<double>();
    correct += (logits.argmax(1) == y).sum().item<int64_t>();
    n += b->size;
  }
  model.train();
  EvalResult r;
  if (n > 0) {
    r.loss = loss / n;
    r.acc = static_cast<double>(correct) / n;
  }
  return r;
}

}  // namespace train
}  // namespace dscache
