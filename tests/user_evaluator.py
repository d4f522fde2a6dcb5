"""A user's own evaluator, registered from its own module (tests/test_evaluator_registry.py names it
as "user_evaluator:constant" in a config)."""

from trainers.evaluators import Evaluator, registry


class ConstantEvaluator(Evaluator):
    def __init__(self, name, value, every):
        self.name, self.value, self.every = name, value, every

    def run(self, model):
        return {f"{self.name}/value": self.value}


@registry.register("constant")
def create(name, context, *, value=1.0, every=0):
    return ConstantEvaluator(name, float(value), every)
