#ifndef AMPJIT_TESTS_UNIT_FRONTEND_ELEMENTWISEOPTIMIZERCHOICES_H
#define AMPJIT_TESTS_UNIT_FRONTEND_ELEMENTWISEOPTIMIZERCHOICES_H

// The optimizers written with the elementwise ops (they have no fused update
// op), as the trace tests (CPU) and the compiled-step GPU tests build them
// over a small MLP: one list, so a new optimizer joins both at once.

#include "jit/optim.h"

#include <memory>
#include <string>
#include <vector>

namespace jit::testing {

inline const std::vector<std::string>& elementwiseOptimizerNames() {
  static const std::vector<std::string> names = {"RMSprop",  "Adagrad",   "RAdam", "NAdam",
                                                 "Adamax",   "Adadelta",  "Adafactor", "LAMB"};
  return names;
}

/// Optimizer `which` (one of elementwiseOptimizerNames()) over `parameters`,
/// with settings that take each one's optional paths (RMSprop's momentum and
/// centering, Adagrad's lr decay, weight decay).
inline std::unique_ptr<optim::Optimizer> makeElementwiseOptimizer(const std::string& which,
                                                                   std::vector<Tensor> parameters) {
  if (which == "RMSprop")
    return std::make_unique<optim::RMSprop>(
        std::move(parameters), optim::RMSpropOptions{.lr = 1e-3, .weight_decay = 1e-3, .momentum = 0.9, .centered = true});
  if (which == "Adagrad")
    return std::make_unique<optim::Adagrad>(std::move(parameters),
                                            optim::AdagradOptions{.lr = 1e-2, .lr_decay = 0.1, .weight_decay = 1e-3});
  if (which == "RAdam")
    return std::make_unique<optim::RAdam>(std::move(parameters), optim::RAdamOptions{.lr = 1e-2, .weight_decay = 1e-3});
  if (which == "NAdam")
    return std::make_unique<optim::NAdam>(std::move(parameters), optim::NAdamOptions{.lr = 2e-3, .weight_decay = 1e-3});
  if (which == "Adamax")
    return std::make_unique<optim::Adamax>(std::move(parameters), optim::AdamaxOptions{.lr = 2e-3, .weight_decay = 1e-3});
  if (which == "Adadelta")
    return std::make_unique<optim::Adadelta>(std::move(parameters), optim::AdadeltaOptions{.weight_decay = 1e-3});
  if (which == "Adafactor")
    return std::make_unique<optim::Adafactor>(std::move(parameters), optim::AdafactorOptions{.weight_decay = 1e-3});
  if (which == "LAMB")
    return std::make_unique<optim::LAMB>(std::move(parameters), optim::LAMBOptions{.lr = 1e-2});
  throw Error("makeElementwiseOptimizer: no optimizer '" + which + "'");
}

} // namespace jit::testing

#endif // AMPJIT_TESTS_UNIT_FRONTEND_ELEMENTWISEOPTIMIZERCHOICES_H
