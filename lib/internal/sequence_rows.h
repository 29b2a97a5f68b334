// sequence_rows.h - the rows of one packed sequence (SPEC 10.2) as a tensor view of their own:
// a backend that runs a packed batch one sequence at a time (Problem::sequence_problem) hands
// each sequence's problem the views of its rows of Q, K, V, O, LSE and the gradients.
#ifndef DILATTN_SEQUENCE_ROWS_H
#define DILATTN_SEQUENCE_ROWS_H

#include <cstddef>
#include <cstdint>

#include "dilattn.h"
#include "dtype_convert.h"

namespace dilattn {

// Rows [first, first + count) of dimension dim of a tensor, as a tensor of its own.
inline dilattn_tensor rows_view(const dilattn_tensor& t, int dim, int64_t first, int64_t count) {
  dilattn_tensor v = t;
  const ptrdiff_t bytes = static_cast<ptrdiff_t>(first * t.strides[dim]) *
                         static_cast<ptrdiff_t>(dtype_size(t.dtype));
  v.data = static_cast<char*>(t.data) + bytes;
  v.shape[dim] = count;
  return v;
}

}  // namespace dilattn

#endif  // DILATTN_SEQUENCE_ROWS_H
