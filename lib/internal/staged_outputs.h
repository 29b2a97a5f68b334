// staged_outputs.h - a host copy of a call's outputs (SPEC 14.11): a backend that reports
// progress works on the copies, and the caller's outputs receive them only once the work is
// complete, so a cancelled call leaves its outputs as they were.
#ifndef DILATTN_STAGED_OUTPUTS_H
#define DILATTN_STAGED_OUTPUTS_H

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "dilattn.h"

namespace dilattn {

class StagedOutputs {
 public:
  // Replaces *view (an output in host memory, or null: left alone) by a contiguous copy of
  // the same shape and dtype, uninitialised: the backends that report progress (ref, cpu)
  // write every element of their outputs, as the tests that poison outputs first check
  // (tests/common/attention_run.h). OUT_OF_MEMORY when the copy cannot be allocated.
  dilattn_status stage(const dilattn_tensor** view);
  // The same for an array of `count` doubles (d_sinks; null: left alone).
  dilattn_status stage(double** values, int64_t count);
  // Copies every copy into the output it replaced.
  void commit() const;

 private:
  struct Tensor {
    const dilattn_tensor* output;
    dilattn_tensor copy;
    std::unique_ptr<char[]> bytes;
  };
  struct Values {
    double* output;
    std::vector<double> copy;
  };
  std::deque<Tensor> tensors_;  // a deque: the views handed out stay where they are
  std::deque<Values> values_;
};

}  // namespace dilattn

#endif  // DILATTN_STAGED_OUTPUTS_H
