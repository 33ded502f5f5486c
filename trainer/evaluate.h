// Validation: loss and accuracy of the model over every sample of a Loader, without gradients.
#pragma once

#include <functional>

#include "device_input.h"
#include "dscache/loader.h"
#include "models.h"
#include "step.h"

namespace dscache {
namespace train {

struct EvalResult {
  double loss = 0, acc = 0;  // mean cross entropy and accuracy; both 0 for an empty epoch
};

// One pass over `loader` (epoch 0 of seed 0: in order when it does not shuffle) in eval mode
// without gradients, the forward under autocast as `amp` says: calls each(batch, x, outputs in
// fp32) for every batch (the batch is valid during the call), then puts the model back in train
// mode. Every task's validation is one of these.
void for_each_eval_batch(
    Classifier& model, Loader& loader, const BatchConverter& conv, const AmpConfig& amp,
    const std::function<void(const Batch&, const torch::Tensor&, const torch::Tensor&)>& each);

// One pass over `loader` (epoch 0 of seed 0: in order when it does not shuffle) in eval mode,
// the forward under autocast as `amp` says; puts the model back in train mode. Reads the loss
// and hit count back every batch (one device sync each).
EvalResult evaluate(Classifier& model, Loader& loader, const BatchConverter& conv,
                    const AmpConfig& amp);

}  // namespace train
}  // namespace dscache
