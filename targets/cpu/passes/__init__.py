"""The cpu target's back end as registered passes, one file each (see `pipeline.cpu_pipeline`).

Every module here is imported by the pass registry (`etc.passes.registry.PASS_PACKAGES`), so
`etc-opt --list-passes` shows these passes and `etc-opt` runs any prefix of the cpu pipeline.
"""
