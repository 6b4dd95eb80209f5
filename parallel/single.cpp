// distributed.strategy: single (parallel/strategy.h): one process. Every question of the loop is answered
// with what this process has: nothing to synchronise, reduce or gather.
#include "parallel/strategy.h"

namespace stoker::parallel {
namespace {

class Single final : public Strategy {
 public:
  std::string name() const override { return "single"; }
};

}  // namespace

std::shared_ptr<Strategy> make_single(const StrategyContext& /*context*/) { return std::make_shared<Single>(); }

}  // namespace stoker::parallel
