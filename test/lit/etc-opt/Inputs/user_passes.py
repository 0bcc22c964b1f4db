"""A user's pass plugin, as a user would write it: loaded by plugin.mlir with
`etc-opt --load-pass-plugin=%S/Inputs/user_passes.py`."""

from dataclasses import dataclass

from etc.passes.pass_api import Pass, RewritePatternSet, option, register_pass


@register_pass
class ForwardAlias(Pass):
    name = "user-forward-alias"
    summary = "Replace aten.alias by its operand (a patterns() pass)"

    def patterns(self):
        patterns = RewritePatternSet()
        patterns.add("aten.alias", self.forward)
        return patterns

    def forward(self, op, rewriter):
        rewriter.replace_op(op, [op.operands[0]])


@register_pass
class CountOps(Pass):
    name = "user-count-ops"
    summary = "Remark on how many ops of a dialect each function has (a run() pass)"

    @dataclass
    class Options:
        dialect: str = option("aten", help="the dialect whose ops are counted")

    def run(self, op):
        for func in op.regions[0].blocks[0].operations:
            ops = [o for o in func.regions[0].blocks[0].operations
                   if o.operation.name.startswith(self.options.dialect + ".")]
            self.remark(f"{len(ops)} {self.options.dialect} ops", at=func)


@register_pass
class Broken(Pass):
    name = "user-broken"
    summary = "A pass with a bug in it"

    def run(self, op):
        limits = {}
        return limits["threshold"]
