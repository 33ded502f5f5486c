// The one Fisher–Yates shuffle behind every order serve/ draws (epoch orders, build orders,
// mixtures): private, defined in sampler.cpp beside the generator it consumes.
#pragma once

#include <cstdint>

#include "dscache/sampler.h"

namespace dscache {

// Fisher–Yates from the back: position i takes a uniform element of [0, i] (rng.below(i + 1)).
// Never change it: every saved run's order and the golden orders of tests/test_sampler.cpp and
// tests/test_mix_order.cpp depend on its exact draws.
void shuffle(uint64_t* first, uint64_t count, Rng& rng);

}  // namespace dscache
