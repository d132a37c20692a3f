//===- OverlapWeightGradients.cpp - weight gradients on the side lane ------===//
//
// In a convolutional network's backward, each layer's filter gradient
// (conv2d_grad_weight) and data gradient (conv2d_grad_input) both read the
// layer's output gradient, and nothing on the way to the loss's input needs
// the filter gradient: only the finiteness check and the update read it, at
// the end. At the sizes a GPU trains small images at (ResNet-50 on 32x32
// images ends at 2x2 and 1x1 feature maps), no single cuDNN call fills the
// device, so the filter gradients run as side steps (runtime
// Plan::sideSteps): on a second stream, beside the batch-norm and data
// gradients that the next layers wait for.
//
// A side step joins before the filter gradient kWeightGradientLag places
// later starts, so at most that many wait on the side lane and the arena
// holds each one's inputs only that long; or earlier, before the first step
// that reads what it writes or writes what it touches (runtime mustFollow).
//
//===----------------------------------------------------------------------===//

#include "PlanFusion.h"

#include "ampjit/Codegen/PlanBuilder.h"

#include <algorithm>
#include <vector>

namespace rt = ampjit::runtime;

namespace ampjit::codegen {

void overlapWeightGradients(rt::Plan &plan, size_t lag) {
  std::vector<size_t> gradients;
  for (size_t index = plan.deferredSteps; index < plan.steps.size(); ++index)
    if (plan.steps[index].kind == rt::StepKind::Conv2dGradWeight)
      gradients.push_back(index);
  plan.sideSteps.clear();
  for (size_t k = 0; k < gradients.size(); ++k) {
    size_t index = gradients[k];
    size_t join = k + std::max<size_t>(lag, 1) < gradients.size() ? gradients[k + std::max<size_t>(lag, 1)]
                                                                   : plan.steps.size();
    join = std::min(join, detail::firstDependent(plan.steps, index));
    // Joined at the very next step, it would overlap nothing.
    if (join > index + 1)
      plan.sideSteps.push_back({uint32_t(index), uint32_t(join)});
  }
}

} // namespace ampjit::codegen
