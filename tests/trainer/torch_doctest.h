// LibTorch and doctest in one test file, in the one safe order: Debian's c10 pulls in glog, whose
// CHECK* macros would otherwise replace doctest's (silently turning assertions into glog aborts).
// Include this first, in place of <torch/torch.h> and <doctest/doctest.h>.
#pragma once

#include <torch/torch.h>
#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LT
#undef CHECK_LE
#undef CHECK_GT
#undef CHECK_GE
#undef CHECK_NOTNULL
#undef CHECK_FALSE
#include <doctest/doctest.h>
