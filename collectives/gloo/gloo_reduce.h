// The element-wise reductions the GlooCommunicator hands Gloo, for each dtype and op.
#pragma once

#include <cstddef>

#include "collectives/communicator.h"
#include "common/dtype.h"

namespace omt {

// Gloo calls fn(out, a, b, n) with out possibly equal to a.
using ReduceFn = void (*)(void*, const void*, const void*, size_t);

// kSum and kAvg sum (kAvg then divides: divide_in_place). float16 and bfloat16 reduce in
// float and round to nearest even.
ReduceFn reduce_fn(DType dtype, ReduceOp op);

// kAvg = sum, then this. Integers truncate toward zero.
void divide_in_place(void* buf, size_t count, DType dtype, int n);

}  // namespace omt
