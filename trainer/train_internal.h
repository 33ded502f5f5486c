// The pieces of the training loop, exposed for tests: normalization and batch conversion
// (data.h, device_input.h), one micro-step, the LR schedule and accumulation windows (step.h).
#pragma once

#include "data.h"
#include "device_input.h"
#include "step.h"
